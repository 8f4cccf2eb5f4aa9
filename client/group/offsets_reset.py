"""Where `groups reset-offsets` moves a group's committed offsets (Kafka's ConsumerGroupCommand rules), sans-I/O.

The CLI gathers the facts (committed offsets, each partition's log start and
end, offsets_for_times for --to-datetime), calls `plan_reset`, prints the plan,
and with --execute commits it as a simple commit (generation -1, no member),
which the coordinator accepts only while the group has no active members.

    to-earliest    the log start offset
    to-latest      the log end offset
    to-offset N    N, clamped into [log start, log end]
    shift-by N     the committed offset + N, clamped; a partition without one is an error
    to-datetime T  the first offset with a timestamp >= T (epoch ms), the log end if there is none
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kraftpy.protocol.types import TopicPartition

KINDS = ("to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime")


@dataclass(frozen=True, slots=True)
class ResetSpec:
    kind: str
    value: int | None = None  # N for to-offset / shift-by, epoch ms for to-datetime

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown reset {self.kind!r}; use one of {', '.join(KINDS)}")
        if self.kind in ("to-offset", "shift-by", "to-datetime") and self.value is None:
            raise ValueError(f"--{self.kind} needs a value")
        if self.kind == "to-offset" and self.value is not None and self.value < 0:
            raise ValueError("--to-offset must not be negative")


def plan_reset(
    spec: ResetSpec,
    partitions: Iterable[TopicPartition],
    *,
    committed: Mapping[TopicPartition, int | None],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    offsets_for_times: Mapping[TopicPartition, int | None] | None = None,
) -> dict[TopicPartition, int]:
    plan: dict[TopicPartition, int] = {}
    for tp in sorted(set(partitions)):
        start, end = log_start[tp], log_end[tp]

        def clamp(offset: int, start: int = start, end: int = end) -> int:
            return max(start, min(end, offset))

        if spec.kind == "to-earliest":
            plan[tp] = start
        elif spec.kind == "to-latest":
            plan[tp] = end
        elif spec.kind == "to-offset":
            assert spec.value is not None
            plan[tp] = clamp(spec.value)
        elif spec.kind == "shift-by":
            assert spec.value is not None
            current = committed.get(tp)
            if current is None:
                raise ValueError(f"cannot shift the offset of {tp}: it has no committed offset")
            plan[tp] = clamp(current + spec.value)
        else:
            found = (offsets_for_times or {}).get(tp)
            plan[tp] = end if found is None else clamp(found)
    return plan
