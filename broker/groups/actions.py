"""What the group coordinator asks its shell to do.

Every entry point of GroupCoordinator returns a list of these, to be carried
out in order:

  Respond   send `body` as the answer to the request the shell registered as
            `request_id`. An answer may come from a later call than the request
            (JoinGroup and SyncGroup wait for the rebalance; commits wait for
            their append), and a request is answered exactly once.
  Append    append `records` ((key, value) pairs; value None = tombstone) to
            `__consumer_offsets` partition `partition` as one batch, acks=all,
            then call `coordinator.append_completed(append_id, error_code, now_ms)`.
            Appends of one partition must be written, and completed, in the
            order they were asked for; an append that fails must not reach the
            log (a timeout whose fate is unknown should be reported as
            REQUEST_TIMED_OUT and the partition resigned, as Kafka does).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.groups.records import Record


@dataclass(frozen=True, slots=True)
class Respond:
    request_id: Hashable
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Append:
    append_id: int
    partition: int
    records: tuple[Record, ...]
    # Why the records are written: "offset_commit", "group_metadata" or "cleanup" (for logs and metrics).
    kind: str


Action = Respond | Append
