"""The node process: its config, the wiring of raft, metadata and broker components, its identity on disk."""
