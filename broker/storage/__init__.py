"""The partition storage engine: segmented logs, indexes, checkpoints, recovery, retention, compaction."""
