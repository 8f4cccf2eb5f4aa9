"""`--model kafka-groups`: a consumer group's guarantees over assignments, commits and polls.

Three anomaly classes: `double-owner` (two members given one partition in one generation),
`nonmonotonic-commit` (a commit, or the final read of committed offsets, that began after another
commit succeeded holds a lower offset, with no `reset` between; real-time order, so concurrent
commits never count against each other) and `commit-skip` (an offset below the final committed
one that no member, a process whose `assign` has a generation, ever polled: Kafka's groups
promise at-least-once). The history's shape and the classes: docs/checker.md, "Consumer groups".
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from kraftpy.tools.checker.history import History, HistoryError, Operation
from kraftpy.tools.checker.result import CheckResult

GROUP_ANOMALY_CLASSES = ("double-owner", "nonmonotonic-commit", "commit-skip")
MAX_SHOWN = 20  # offsets listed per skip anomaly


def _line(op: Operation) -> int:
    return op.complete_line or op.invoke_line


def _pairs(value: Any, op: Operation) -> list[tuple[int, int]]:
    try:
        return [(int(p), int(o)) for p, o in value or ()]
    except (TypeError, ValueError):
        raise HistoryError(f"{op.f}: expected [[partition, offset], ...], got {value!r}", _line(op)) from None


def _ref(op: Operation) -> dict[str, Any]:
    return {"id": op.id, "line": op.invoke_line, "process": op.process, "f": op.f, "status": op.status}


def _generation(op: Operation) -> int | None:
    """A group member's assignment carries its generation; a plain `assign` (a reader outside the group) does not."""
    return op.extra.get("generation", op.extra.get("generation_id"))


def _double_owners(ops: list[Operation]) -> list[dict[str, Any]]:
    owners: dict[tuple[int, int], dict[str, Operation]] = defaultdict(dict)
    for op in ops:
        if op.f != "assign" or op.status != "ok":
            continue
        generation = _generation(op)
        member = op.extra.get("member", op.process)
        if generation is None or generation < 0:
            continue
        for partition in op.result if op.result is not None else op.value or ():
            owners[(generation, partition)].setdefault(str(member), op)
    return [
        {
            "type": "double-owner",
            "generation": g,
            "partition": p,
            "members": sorted(by),
            "ops": [_ref(o) for o in by.values()],
        }
        for (g, p), by in sorted(owners.items())
        if len(by) > 1
    ]


def _nonmonotonic(ops: list[Operation]) -> list[dict[str, Any]]:
    """Per partition: each observation (an ok commit, the final read) against the commits done before it began."""
    done: dict[int, list[tuple[float, int, Operation]]] = defaultdict(list)  # partition -> (ret, offset, op)
    resets: dict[int, list[float]] = defaultdict(list)
    seen: list[tuple[Operation, int, int]] = []
    for op in ops:
        if op.status != "ok":
            continue
        if op.f == "commit":
            for p, o in _pairs(op.value, op):
                done[p].append((op.ret, o, op))
                seen.append((op, p, o))
        elif op.f == "committed":
            seen.extend((op, p, o) for p, o in _pairs(op.result, op))
        elif op.f == "reset":
            for p, _ in _pairs(op.value, op):
                resets[p].append(op.ret)
    for p in done:
        done[p].sort(key=lambda x: x[0])
        resets[p].sort()
    best_before = {p: _running_max(c) for p, c in done.items()}  # best commit among the first i done
    anomalies = []
    for op, p, offset in seen:
        commits = done.get(p, [])
        before = bisect.bisect_left(commits, op.call, key=lambda x: x[0])
        reset_at = bisect.bisect_left(resets[p], op.call)
        if reset_at:  # only commits begun after the last reset before this one count (rare: a scan)
            floor = resets[p][reset_at - 1]
            prior = max((c for c in commits[:before] if c[2].call > floor), key=lambda c: c[1], default=None)
        else:
            prior = best_before[p][before - 1] if before else None
        if prior is not None and offset < prior[1]:
            anomalies.append(
                {"type": "nonmonotonic-commit", "partition": p, "offset": offset, "prior_offset": prior[1],
                 "ops": [_ref(prior[2]), _ref(op)]}
            )  # fmt: skip
    return anomalies


def _running_max(commits: list[tuple[float, int, Operation]]) -> list[tuple[float, int, Operation]]:
    out: list[tuple[float, int, Operation]] = []
    for c in commits:
        out.append(c if not out or c[1] > out[-1][1] else out[-1])
    return out


def _skips(ops: list[Operation]) -> list[dict[str, Any]]:
    polled: dict[int, set[int]] = defaultdict(set)
    final: dict[int, int] = {}
    final_op: Operation | None = None
    members = {op.process for op in ops if op.f == "assign" and op.status == "ok" and _generation(op) is not None}
    for op in ops:
        if op.status != "ok":
            continue
        if op.f == "poll" and op.process in members:  # a reader outside the group consumed nothing for it
            for record in op.result or ():
                polled[int(record[0])].add(int(record[1]))
        elif op.f == "commit" and final_op is None:
            for p, o in _pairs(op.value, op):
                final[p] = max(final.get(p, 0), o)
        elif op.f == "committed":  # the final read, when the history has one, is the final word
            final_op, final = op, dict(_pairs(op.result, op))
    anomalies = []
    for p, committed in sorted(final.items()):
        missing = [o for o in range(committed) if o not in polled[p]]
        if missing:
            anomalies.append(
                {"type": "commit-skip", "partition": p, "committed": committed, "count": len(missing),
                 "offsets": missing[:MAX_SHOWN], "ops": [_ref(final_op)] if final_op else []}
            )  # fmt: skip
    return anomalies


def check_kafka_groups(history: History, allowed: Iterable[str] = ()) -> CheckResult:
    """Find the anomalies; valid unless one of a class not in `allowed` is found."""
    allowed = frozenset(allowed)
    unknown = allowed - set(GROUP_ANOMALY_CLASSES)
    if unknown:
        raise ValueError(
            f"unknown anomaly class(es) {', '.join(sorted(unknown))}; known: {', '.join(GROUP_ANOMALY_CLASSES)}"
        )
    started = time.monotonic()
    ops = history.operations
    anomalies = _double_owners(ops) + _nonmonotonic(ops) + _skips(ops)
    for a in anomalies:
        a["failure"] = a["type"] not in allowed
    return CheckResult(
        valid=not any(a["failure"] for a in anomalies),
        model="kafka-groups",
        operations=len(ops),
        elapsed_s=time.monotonic() - started,
        anomalies=anomalies,
        history=history,
    )
