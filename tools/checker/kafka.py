"""The Kafka log checker (`--model kafka`): Jepsen's anomaly classes over sends and polls.

Design notes: docs/checker.md, section "tools/checker/kafka.py".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from kraftpy.tools.checker.kafka_history import KafkaOp
from kraftpy.tools.checker.result import jsonable

ANOMALY_CLASSES = (
    "inconsistent-offsets",
    "duplicate",
    "lost-write",
    "unseen",
    "nonmonotonic-poll",
    "poll-skip",
    "int-nonmonotonic-poll",
    "int-poll-skip",
    "nonmonotonic-send",
    "aborted-read",
)
SUBSCRIBE_ALLOWED = frozenset({"poll-skip", "nonmonotonic-poll"})


@dataclass(slots=True)
class PartitionLog:
    """What was seen in one partition: offset -> values, and dense indices over it."""

    by_offset: dict[int, set[Any]]
    offsets: list[int]  # sorted offsets that hold at least one value
    index_of_offset: dict[int, int]
    first_index: dict[Any, int]  # value -> lowest index it was seen at
    last_index: dict[Any, int]  # value -> highest index

    def values_between(self, i: int, j: int) -> list[Any]:
        """The values at indices strictly between i and j."""
        out: list[Any] = []
        for idx in range(i + 1, j):
            out.extend(sorted(self.by_offset[self.offsets[idx]], key=repr))
        return out


def partition_logs(ops: list[KafkaOp]) -> dict[Any, PartitionLog]:
    """Each partition's log as the history saw it: acknowledged sends' offsets and polled records."""
    raw: dict[Any, dict[int, set[Any]]] = defaultdict(lambda: defaultdict(set))
    for k in ops:
        if k.status == "ok":
            for key, value, offset in k.sends:
                if offset is not None:
                    raw[key][offset].add(value)
        for key, offset, value in k.polls:
            if offset is not None:
                raw[key][offset].add(value)
    logs = {}
    for key, by_offset in raw.items():
        offsets = sorted(by_offset)
        index_of = {o: i for i, o in enumerate(offsets)}
        first: dict[Any, int] = {}
        last: dict[Any, int] = {}
        for i, o in enumerate(offsets):
            for v in by_offset[o]:
                first.setdefault(v, i)
                last[v] = i
        logs[key] = PartitionLog(dict(by_offset), offsets, index_of, first, last)
    return logs


def _ref(k: KafkaOp) -> dict[str, Any]:
    op = k.op
    return {"id": op.id, "line": op.invoke_line, "process": op.process, "f": op.f, "status": op.status}


def _refs(ops: Iterable[KafkaOp]) -> list[dict[str, Any]]:
    seen: dict[int, KafkaOp] = {}
    for k in ops:
        seen.setdefault(k.op.id, k)
    return [_ref(seen[i]) for i in sorted(seen)]


def analyse(ops: list[KafkaOp]) -> list[dict[str, Any]]:
    """Every anomaly found, each with the operations involved, in ANOMALY_CLASSES order."""
    logs = partition_logs(ops)
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)

    # Who wrote and who read what, per partition.
    writers: dict[tuple[Any, Any], list[KafkaOp]] = defaultdict(list)
    readers: dict[tuple[Any, Any], list[KafkaOp]] = defaultdict(list)
    seen_at: dict[tuple[Any, int, Any], list[KafkaOp]] = defaultdict(list)
    for k in ops:
        for key, value, offset in k.sends:
            writers[(key, value)].append(k)
            if offset is not None and k.status == "ok":
                seen_at[(key, offset, value)].append(k)
        for key, offset, value in k.polls:
            if k.status == "ok":
                readers[(key, value)].append(k)
            if offset is not None:
                seen_at[(key, offset, value)].append(k)

    for key, log in logs.items():
        for offset in log.offsets:
            values = log.by_offset[offset]
            if len(values) > 1:
                involved = [k for v in values for k in seen_at[(key, offset, v)]]
                found["inconsistent-offsets"].append(
                    {"key": jsonable(key), "offset": offset, "values": _sorted(values), "ops": _refs(involved)}
                )
        at: dict[Any, list[int]] = defaultdict(list)
        for offset in log.offsets:
            for v in log.by_offset[offset]:
                at[v].append(offset)
        for v, offsets in at.items():
            if len(offsets) > 1:
                involved = [k for o in offsets for k in seen_at[(key, o, v)]]
                found["duplicate"].append(
                    {"key": jsonable(key), "value": jsonable(v), "offsets": offsets, "ops": _refs(involved)}
                )

    acked: dict[Any, dict[Any, KafkaOp]] = defaultdict(dict)
    for k in ops:
        if k.status == "ok":
            for key, value, _ in k.sends:
                acked[key].setdefault(value, k)
    read_values: dict[Any, set[Any]] = defaultdict(set)
    for (key, value), rs in readers.items():
        if rs:
            read_values[key].add(value)

    for key, log in logs.items():
        read = read_values.get(key, set())
        bounds = [log.first_index[v] for v in read if v in log.first_index]
        if not bounds:
            continue
        bound = max(bounds)
        bound_value = next(v for v in _sorted_raw(read) if log.first_index.get(v) == bound)
        for v, last in sorted(log.last_index.items(), key=lambda kv: kv[1]):
            if last <= bound and v not in read and v in acked[key]:
                writer = acked[key][v]
                found["lost-write"].append(
                    {
                        "key": jsonable(key),
                        "value": jsonable(v),
                        "offset": log.offsets[log.first_index[v]],
                        "max_read_offset": log.offsets[bound],
                        "max_read_value": jsonable(bound_value),
                        "ops": _refs([writer, *readers[(key, bound_value)][:1]]),
                    }
                )

    for key in sorted(acked, key=repr):
        unseen = [v for v in acked[key] if v not in read_values.get(key, set())]
        if unseen:
            found["unseen"].append(
                {
                    "key": jsonable(key),
                    "count": len(unseen),
                    "values": _sorted(unseen),
                    "ops": _refs(acked[key][v] for v in unseen),
                }
            )

    _poll_order(ops, logs, found)
    _send_order(ops, logs, found)

    for k in ops:
        if k.status != "ok":
            continue
        for key, _, value in k.polls:
            failed = [w for w in writers[(key, value)] if w.status == "fail"]
            if failed and not any(w.status in ("ok", "info", "pending") for w in writers[(key, value)]):
                found["aborted-read"].append(
                    {"key": jsonable(key), "value": jsonable(value), "ops": _refs([*failed, k])}
                )

    return [{"type": cls, **a} for cls in ANOMALY_CLASSES for a in found.get(cls, [])]


def _poll_order(ops: list[KafkaOp], logs: dict[Any, PartitionLog], found: dict[str, list[dict[str, Any]]]) -> None:
    """Per consumer and within one assignment, successive reads of a partition move forward by one."""
    last: dict[int, dict[Any, tuple[KafkaOp, Any]]] = defaultdict(dict)  # process -> key -> (op, value)
    for k in ops:
        mine = last[k.process]
        if k.f in ("assign", "subscribe"):
            if k.status == "ok":
                for key in [key for key in mine if key not in k.keys]:
                    del mine[key]
            continue
        if k.status != "ok" or not k.polls:
            continue
        for key in k.rebalanced:
            mine.pop(key, None)
        by_key: dict[Any, list[Any]] = defaultdict(list)
        for key, _, value in k.polls:
            by_key[key].append(value)
        for key, values in by_key.items():
            log = logs.get(key)
            if log is None:
                continue
            if key in mine:
                prev_op, prev_value = mine[key]
                _compare(log, key, prev_value, values[0], [prev_op, k], "nonmonotonic-poll", "poll-skip", found)
            if key not in k.rebalanced:
                for a, b in pairwise(values):
                    _compare(log, key, a, b, [k], "int-nonmonotonic-poll", "int-poll-skip", found)
            mine[key] = (k, values[-1])


def _send_order(ops: list[KafkaOp], logs: dict[Any, PartitionLog], found: dict[str, list[dict[str, Any]]]) -> None:
    """One producer's successive sends to a partition land at increasing positions.

    Unlike Jepsen we do not reset this on assign/subscribe: those change what
    a consumer reads, not where a producer's writes land.
    """
    last: dict[int, dict[Any, tuple[KafkaOp, Any]]] = defaultdict(dict)
    for k in ops:
        if k.status not in ("ok", "info") or not k.sends:
            continue
        mine = last[k.process]
        for key, value, _ in k.sends:
            log = logs.get(key)
            if log is not None and key in mine:
                prev_op, prev_value = mine[key]
                i, j = log.first_index.get(prev_value), log.first_index.get(value)
                if i is not None and j is not None and j - i < 1:
                    found["nonmonotonic-send"].append(
                        {
                            "key": jsonable(key),
                            "values": [jsonable(prev_value), jsonable(value)],
                            "offsets": [log.offsets[i], log.offsets[j]],
                            "delta": j - i,
                            "ops": _refs([prev_op, k]),
                        }
                    )
            mine[key] = (k, value)


def _compare(
    log: PartitionLog,
    key: Any,
    a: Any,
    b: Any,
    involved: list[KafkaOp],
    backwards: str,
    skip: str,
    found: dict[str, list[dict[str, Any]]],
) -> None:
    i, j = log.first_index.get(a), log.first_index.get(b)
    if i is None or j is None:
        return
    delta = j - i
    entry = {
        "key": jsonable(key),
        "values": [jsonable(a), jsonable(b)],
        "offsets": [log.offsets[i], log.offsets[j]],
        "delta": delta,
        "ops": _refs(involved),
    }
    if delta < 1:
        found[backwards].append(entry)
    elif delta > 1:
        entry["skipped"] = [jsonable(v) for v in log.values_between(i, j)]
        found[skip].append(entry)


def _sorted_raw(values: Iterable[Any]) -> list[Any]:
    return sorted(values, key=lambda v: (type(v).__name__, repr(v)))


def _sorted(values: Iterable[Any]) -> list[Any]:
    return [jsonable(v) for v in _sorted_raw(values)]
