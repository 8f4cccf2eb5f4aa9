"""Cluster metadata (sans-I/O): records, the immutable image and its delta, snapshot encoding,
and the controller's decisions. See docs/metadata.md; Raft stores the log and the snapshots."""
