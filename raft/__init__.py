"""Raft consensus for the metadata quorum (KRaft-style): sans-I/O core, durable log, transport."""
