"""Cluster metadata: records, the immutable image, the controller and LMDB snapshots."""
