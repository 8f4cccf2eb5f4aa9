"""Raft's asyncio shell: the driver, transport, durable log, quorum-state file and LMDB snapshots."""
