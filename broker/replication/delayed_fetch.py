"""When a long-polling fetch must be answered: Kafka's DelayedFetch, as a pure decision.

Design notes: docs/replication.md, section "broker/replication/delayed_fetch.py".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode


class FetchCompletion(enum.Enum):
    IMMEDIATE = "immediate"
    ERROR = "error"
    DIVERGING = "diverging"
    LOG_CHANGED = "log_changed"
    ENOUGH_BYTES = "enough_bytes"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class FetchPartitionStatus:
    error: ErrorCode = ErrorCode.NONE
    diverging: bool = False
    fetch_offset_beyond_end: bool = False
    on_older_segment: bool = False
    # Bytes between the fetch offset and the partition's bound (LEO for a follower, HW for a consumer).
    bytes_readable: int = 0


@dataclass(frozen=True, slots=True)
class DelayedFetch:
    min_bytes: int
    max_wait_ms: int
    start_ms: int

    @property
    def deadline_ms(self) -> int:
        return self.start_ms + max(0, self.max_wait_ms)

    def should_complete(self, statuses: Iterable[FetchPartitionStatus], now_ms: int) -> FetchCompletion | None:
        statuses = list(statuses)
        if self.max_wait_ms <= 0 or not statuses:
            return FetchCompletion.IMMEDIATE
        if any(s.error != ErrorCode.NONE for s in statuses):
            return FetchCompletion.ERROR
        if any(s.diverging for s in statuses):
            return FetchCompletion.DIVERGING
        if any(s.fetch_offset_beyond_end or s.on_older_segment for s in statuses):
            return FetchCompletion.LOG_CHANGED
        if sum(s.bytes_readable for s in statuses) >= self.min_bytes:
            return FetchCompletion.ENOUGH_BYTES
        if now_ms >= self.deadline_ms:
            return FetchCompletion.TIMED_OUT
        return None
