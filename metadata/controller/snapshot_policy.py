"""When a node snapshots its metadata image into Raft (sans-I/O).

KRaft's SnapshotGenerator: every node (controller or broker) snapshots its own
image once `metadata_snapshot_max_new_record_bytes` of records (20 MiB by
default) have been applied since the last snapshot, or once a count of records
has, whichever comes first. The count bound matters for logs of many tiny
records (heartbeat-driven NoOps, PartitionChanges) whose bytes grow slowly but
whose replay on restart costs per record. One snapshot at a time; a failed one
waits for the next bound.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kafka has no record-count bound; 500,000 records replay in a few seconds here, which keeps a
# cold start bounded even when records are small.
DEFAULT_MAX_NEW_RECORDS = 500_000


@dataclass
class SnapshotPolicy:
    max_new_record_bytes: int = 20 * 1024 * 1024
    max_new_records: int = DEFAULT_MAX_NEW_RECORDS
    new_bytes: int = 0
    new_records: int = 0
    in_progress: bool = False
    last_snapshot_offset: int = -1

    def __post_init__(self) -> None:
        if self.max_new_record_bytes < 1 or self.max_new_records < 1:
            raise ValueError("snapshot bounds must be positive")

    def on_applied(self, records: int, size_bytes: int) -> None:
        self.new_records += records
        self.new_bytes += size_bytes

    def should_snapshot(self) -> bool:
        if self.in_progress:
            return False
        return self.new_bytes >= self.max_new_record_bytes or self.new_records >= self.max_new_records

    def started(self) -> None:
        """A snapshot of the current image begins; what is applied from now on counts toward the next."""
        self.in_progress = True
        self.new_bytes = 0
        self.new_records = 0

    def finished(self, offset: int | None) -> None:
        """The snapshot was stored (`offset` = its end offset) or failed (None)."""
        self.in_progress = False
        if offset is not None:
            self.last_snapshot_offset = max(self.last_snapshot_offset, offset)

    def on_snapshot_loaded(self, offset: int) -> None:
        """A snapshot was loaded (restart or FetchSnapshot): the count starts over from it."""
        self.new_bytes = 0
        self.new_records = 0
        self.last_snapshot_offset = max(self.last_snapshot_offset, offset)
