"""Metadata images: the image, deltas, snapshots, and what an image means to one broker (sans-I/O)."""
