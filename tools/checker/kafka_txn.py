"""Transactional anomalies over a Kafka history: Adya's classes, as Elle finds them.

Every send, poll and txn operation is a transaction (`ok` committed, `fail` aborted, `info`
unknown); each partition's log gives its version order. Between transactions: ww (consecutive
writes of a key), wr (a highest read of a value another wrote), rw (a highest read followed by
another's write). G1a (aborted read) and G1b (intermediate read) are found directly; cycles are
classified by the edge types on a shortest cycle in each strongly connected component: G0 (ww
only), G1c (ww and wr), G-single (one rw), G2 (two or more rw). kafka_check.py runs this on
histories with `txn` operations. The edges' exact definitions: docs/checker.md, "Transactions".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from kraftpy.tools.checker.cycles import TypedGraph, shortest_path, strongly_connected
from kraftpy.tools.checker.kafka import PartitionLog
from kraftpy.tools.checker.kafka_history import KafkaOp
from kraftpy.tools.checker.result import jsonable

TXN_ANOMALY_CLASSES = ("G0", "G1a", "G1b", "G1c", "G-single", "G2")
WW, WR, RW = "ww", "wr", "rw"
_NO_RW = (WW, WR)
_ALL = (WW, WR, RW)


def _ref(k: KafkaOp) -> dict[str, Any]:
    op = k.op
    return {"id": op.id, "line": op.invoke_line, "process": op.process, "f": op.f, "status": op.status}


class _Dependencies:
    """Writers and readers of each partition's values, and the graph between transactions."""

    def __init__(self, ops: list[KafkaOp], logs: dict[Any, PartitionLog]) -> None:
        self.ops = {k.op.id: k for k in ops}
        self.logs = logs
        # (key, value) -> the op ids that sent it (one, for unique values); failed ones apart.
        self.writers: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        self.failed_writers: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        # op id -> key -> the values it sent to the key, in its order.
        self.sent: dict[int, dict[Any, list[Any]]] = defaultdict(lambda: defaultdict(list))
        for k in ops:
            for key, value, _ in k.sends:
                if k.status == "fail":
                    self.failed_writers[(key, value)].append(k.op.id)
                else:
                    self.writers[(key, value)].append(k.op.id)
                    self.sent[k.op.id][key].append(value)
        # op id -> key -> highest log index read (ok operations only: a failed poll saw nothing).
        self.last_read: dict[int, dict[Any, int]] = defaultdict(dict)
        for k in ops:
            if k.status != "ok":
                continue
            for key, _, value in k.polls:
                log = logs.get(key)
                i = log.first_index.get(value) if log is not None else None
                if i is not None and i > self.last_read[k.op.id].get(key, -1):
                    self.last_read[k.op.id][key] = i
        self.graph = TypedGraph()
        self.why: dict[tuple[int, int, str], dict[str, Any]] = {}
        self._build()

    def _at(self, key: Any, index: int) -> list[Any]:
        log = self.logs[key]
        return sorted(log.by_offset[log.offsets[index]], key=repr)

    def _edge(self, a: int, b: int, kind: str, key: Any, value: Any) -> None:
        if a == b:
            return
        self.graph.add(a, b, kind)
        self.why.setdefault((a, b, kind), {"key": jsonable(key), "value": jsonable(value)})

    def _build(self) -> None:
        for key, log in self.logs.items():
            previous: list[int] = []
            for offset in log.offsets:
                here = [w for v in log.by_offset[offset] for w in self.writers.get((key, v), [])]
                for a in previous:
                    for b in here:
                        self._edge(a, b, WW, key, sorted(log.by_offset[offset], key=repr)[0])
                if here:
                    previous = here
        for reader, reads in self.last_read.items():
            for key, i in reads.items():
                for value in self._at(key, i):
                    for writer in self.writers.get((key, value), []):
                        self._edge(writer, reader, WR, key, value)
                log = self.logs[key]
                if i + 1 < len(log.offsets):
                    for value in self._at(key, i + 1):
                        for writer in self.writers.get((key, value), []):
                            self._edge(reader, writer, RW, key, value)

    # -- anomalies ---------------------------------------------------------------------------------------------

    def aborted_reads(self) -> list[dict[str, Any]]:
        found = []
        for k in self.ops.values():
            if k.status != "ok":
                continue
            for key, offset, value in k.polls:
                failed = self.failed_writers.get((key, value))
                if failed and not self.writers.get((key, value)):
                    writers = [self.ops[i] for i in failed]
                    found.append(
                        {
                            "key": jsonable(key),
                            "value": jsonable(value),
                            "offset": offset,
                            "ops": [_ref(w) for w in writers] + [_ref(k)],
                        }
                    )
        return found

    def intermediate_reads(self) -> list[dict[str, Any]]:
        found = []
        for reader, reads in self.last_read.items():
            for key, i in reads.items():
                for value in self._at(key, i):
                    for writer in self.writers.get((key, value), []):
                        if writer == reader:
                            continue
                        mine = self.sent[writer][key]
                        if value in mine and mine[-1] != value:
                            found.append(
                                {
                                    "key": jsonable(key),
                                    "value": jsonable(value),
                                    "final_value": jsonable(mine[-1]),
                                    "ops": [_ref(self.ops[writer]), _ref(self.ops[reader])],
                                }
                            )
        return found

    def cycles(self) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for component in strongly_connected(self.graph, (WW,)):
            found["G0"].append(self._cycle_in(component, (WW,), (WW,)))
        for component in strongly_connected(self.graph, _NO_RW):
            cycle = self._cycle_in(component, _NO_RW, (WR,))
            if any(step["type"] == WR for step in cycle["steps"]):
                found["G1c"].append(cycle)
        for component in strongly_connected(self.graph, _ALL):
            members = set(component)
            rw_edges = [(a, b) for a in component for b in self.graph.successors(a, (RW,)) if b in members]
            single = None
            for a, b in rw_edges:
                path = shortest_path(self.graph, b, a, _NO_RW, members)
                if path is not None:
                    single = self._explain([a, *path], _NO_RW, first=RW)
                    break
            if single is not None:
                found["G-single"].append(single)
                continue
            for a, b in rw_edges:
                path = shortest_path(self.graph, b, a, _ALL, members)
                if path is not None:
                    found["G2"].append(self._explain([a, *path], _ALL, first=RW))
                    break
        return found

    def _cycle_in(self, component: list[int], kinds: tuple[str, ...], prefer: tuple[str, ...]) -> dict[str, Any]:
        """A shortest cycle inside `component` over `kinds`, through an edge of a `prefer` kind if one exists."""
        members = set(component)
        candidates = [
            (a, b)
            for a in sorted(component)
            for b in self.graph.successors(a, kinds)
            if b in members and not self.graph.out[a][b].isdisjoint(prefer)
        ] or [(a, b) for a in sorted(component) for b in self.graph.successors(a, kinds) if b in members]
        best: list[int] | None = None
        for a, b in candidates:
            path = shortest_path(self.graph, b, a, kinds, members)
            if path is not None and (best is None or len(path) + 1 < len(best)):
                best = [a, *path]
        assert best is not None  # a strongly connected component always has a cycle
        return self._explain(best, (*prefer, *kinds))

    def _explain(self, nodes: list[int], order: tuple[str, ...], first: str | None = None) -> dict[str, Any]:
        """nodes = [n0, n1, ..., n0]: each step typed by the first of `order` its edge has (`first` for step 0)."""
        steps = []
        for i, (a, b) in enumerate(pairwise(nodes)):
            available = self.graph.out[a][b]
            kind = first if i == 0 and first is not None else next(k for k in order if k in available)
            steps.append({"from": a, "to": b, "type": kind, **self.why[(a, b, kind)]})
        return {
            "cycle": [_ref(self.ops[n]) for n in nodes[:-1]],
            "steps": steps,
            "ops": _refs(self.ops[n] for n in nodes),
        }


def _refs(ops: Iterable[KafkaOp]) -> list[dict[str, Any]]:
    seen: dict[int, KafkaOp] = {}
    for k in ops:
        seen.setdefault(k.op.id, k)
    return [_ref(seen[i]) for i in sorted(seen)]


def analyse_txns(ops: list[KafkaOp], logs: dict[Any, PartitionLog]) -> list[dict[str, Any]]:
    """The transactional anomalies, in TXN_ANOMALY_CLASSES order."""
    deps = _Dependencies(ops, logs)
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    found["G1a"] = deps.aborted_reads()
    found["G1b"] = deps.intermediate_reads()
    found.update(deps.cycles())
    return [{"type": cls, **a} for cls in TXN_ANOMALY_CLASSES for a in found.get(cls, [])]
