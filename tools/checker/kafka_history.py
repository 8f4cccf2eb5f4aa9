"""Kafka operations as the log checker sees them: sends, polls and assignments.

Two shapes are read (docs/history-format.md has both in full). kraftpy's own: `send` with
key = partition and the offset on its completion; `poll` completing with [partition, offset,
value] triples in the order received; `assign`/`subscribe` with the partitions; an optional
`rebalanced` list on a poll. Jepsen's `:kafka` workload shape: `:send`/`:poll`/`:txn` whose
values are micro-op vectors (`[:send k [offset v]]`, `[:poll {k [[offset v] ...]}]`) and an
optional `:rebalance-log`. In JSON Lines a `txn` takes the same micro-ops, a poll's records as
`["poll", [[partition, offset, message], ...]]` (JSON objects cannot have integer keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraftpy.tools.checker.edn import Keyword
from kraftpy.tools.checker.history import History, HistoryError, Operation


@dataclass(slots=True)
class KafkaOp:
    op: Operation
    f: str  # send, poll, txn, assign, subscribe
    sends: list[tuple[Any, Any, int | None]] = field(default_factory=list)  # (key, value, offset)
    polls: list[tuple[Any, int | None, Any]] = field(default_factory=list)  # (key, offset, value)
    keys: tuple[Any, ...] = ()  # assign/subscribe: the new assignment
    rebalanced: frozenset[Any] = frozenset()

    @property
    def process(self) -> int:
        return self.op.process

    @property
    def status(self) -> str:
        return self.op.status


def _kw(x: Any) -> str | None:
    return x.name if isinstance(x, Keyword) else x if isinstance(x, str) else None


def _is_micro_ops(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) > 0
        and all(isinstance(m, tuple) and m and _kw(m[0]) in ("send", "poll") for m in value)
    )


def _offset(x: Any, op: Operation) -> int | None:
    if x is None:
        return None
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise HistoryError(f"offset {x!r} is not an integer", op.complete_line or op.invoke_line)


def _jepsen(op: Operation) -> KafkaOp:
    kop = KafkaOp(op, op.f)
    micro = op.result if op.status in ("ok", "info") and _is_micro_ops(op.result) else op.value
    for m in micro or ():
        kind = _kw(m[0])
        if kind == "send":
            _, key, v = m
            if isinstance(v, tuple) and len(v) == 2:
                kop.sends.append((key, v[1], _offset(v[0], op)))
            else:
                kop.sends.append((key, v, None))
        elif kind == "poll" and len(m) > 1 and isinstance(m[1], dict):
            for key, pairs in m[1].items():
                for pair in pairs:
                    kop.polls.append((key, _offset(pair[0], op), pair[1]))
        elif kind == "poll" and len(m) > 1 and isinstance(m[1], tuple):  # JSON Lines: [partition, offset, message]
            for rec in m[1]:
                if not (isinstance(rec, tuple) and len(rec) == 3):
                    raise HistoryError(f"poll record {rec!r} is not [partition, offset, message]", op.invoke_line)
                kop.polls.append((rec[0], _offset(rec[1], op), rec[2]))
    log = op.extra.get("rebalance-log") or ()
    keys: set[Any] = set()
    for event in log:
        if isinstance(event, dict):
            keys.update(event.get(Keyword("keys"), ()) or ())
    kop.rebalanced = frozenset(keys)
    return kop


def _kraftpy(op: Operation) -> KafkaOp:
    kop = KafkaOp(op, op.f)
    line = op.complete_line or op.invoke_line
    if op.f == "send":
        if op.key is None:
            raise HistoryError("send has no key (the partition)", op.invoke_line)
        kop.sends.append((op.key, op.value, _offset(op.extra.get("offset"), op) if op.status == "ok" else None))
    elif op.f == "poll" and op.status == "ok":
        for rec in op.result or ():
            if not (isinstance(rec, tuple) and len(rec) == 3):
                raise HistoryError(f"poll record {rec!r} is not [partition, offset, value]", line)
            kop.polls.append((rec[0], _offset(rec[1], op), rec[2]))
        kop.rebalanced = frozenset(op.extra.get("rebalanced") or ())
    return kop


def kafka_ops(history: History) -> list[KafkaOp]:
    """The history's Kafka operations in invocation order; other f's are ignored."""
    out: list[KafkaOp] = []
    for op in history.operations:
        if op.f in ("assign", "subscribe"):
            keys = op.result if op.status == "ok" and op.result is not None else op.value
            out.append(KafkaOp(op, op.f, keys=tuple(keys or ())))
        elif op.f in ("send", "poll", "txn"):
            out.append(_jepsen(op) if _is_micro_ops(op.value) or _is_micro_ops(op.result) else _kraftpy(op))
    return out
