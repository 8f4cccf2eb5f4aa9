"""When a long-polling fetch must be answered: Kafka's DelayedFetch, as a pure decision.

A fetch waits at most max_wait_ms for min_bytes to become readable. The
shell asks `should_complete` when the fetch arrives and again on each event
that can change the answer (an append, a HW change, a leadership change)
and on ticks; the first non-None answer says why to respond now. The shell
then re-reads every partition (for a follower that read also updates the
leader's view of it, as Kafka's completion re-read does).

Per partition the shell reports a FetchPartitionStatus (from
Partition.check_fetch plus log positions). Kafka's cases:

  A-E  the partition errors now: not the leader any more, unknown, offline,
       or the fetch's leader epoch got fenced        -> ERROR
  H    a diverging epoch must be reported             -> DIVERGING
  F    the fetch offset is past the log end (the leader truncated), or the
       offset's segment is no longer the active one   -> LOG_CHANGED
  G    the readable bytes of all partitions reach min_bytes -> ENOUGH_BYTES
  -    max_wait_ms has passed                         -> TIMED_OUT

A fetch with max_wait_ms <= 0 or with no partitions is answered at once.
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
