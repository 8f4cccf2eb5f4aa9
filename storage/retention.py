"""Which closed segments retention deletes: a pure decision over segment sizes and timestamps.

Kafka's three rules, each deleting a prefix of the oldest segments:
- log start breach: the whole segment lies below the log start offset (after
  DeleteRecords or a Raft snapshot); applies whatever the cleanup policy;
- retention_ms: now - the segment's largest timestamp > retention_ms;
- retention_bytes: the log stays above retention_bytes without the segment.
The active segment is never deleted, nor a segment holding offsets at or
above the high watermark (data not yet replicated everywhere).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraftpy.storage.config import LogConfig


@dataclass(frozen=True, slots=True)
class SegmentStats:
    base_offset: int
    next_base_offset: int  # base offset of the following segment
    size_bytes: int


def deletable_prefix(
    closed: Sequence[SegmentStats],
    *,
    total_bytes: int,
    log_start_offset: int,
    high_watermark: int,
    config: LogConfig,
    now_ms: int,
    largest_timestamp: Callable[[int], int],
) -> tuple[int, str]:
    """How many of the oldest `closed` segments to delete, and which rule chose the last one.

    `largest_timestamp(i)` is asked lazily, since it may read an index file.
    """
    count, reason = 0, ""
    below_start = 0
    while below_start < len(closed) and closed[below_start].next_base_offset <= log_start_offset:
        below_start += 1
    if below_start:
        count, reason = below_start, "below the log start offset"
    if not config.delete:
        return count, reason
    # Only segments entirely below the high watermark are eligible for the other rules.
    eligible = 0
    while eligible < len(closed) and closed[eligible].next_base_offset <= high_watermark:
        eligible += 1
    if config.retention_ms >= 0:
        by_time = 0
        while by_time < eligible and now_ms - largest_timestamp(by_time) > config.retention_ms:
            by_time += 1
        if by_time > count:
            count, reason = by_time, f"older than retention_ms {config.retention_ms}"
    if config.retention_bytes >= 0:
        by_size, remaining = 0, total_bytes
        while by_size < eligible and remaining - closed[by_size].size_bytes >= config.retention_bytes:
            remaining -= closed[by_size].size_bytes
            by_size += 1
        if by_size > count:
            count, reason = by_size, f"log above retention_bytes {config.retention_bytes}"
    return count, reason
