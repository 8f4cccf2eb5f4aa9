"""`check_linearizability`: prepare calls, split them, search every part, and report.

This is the library entry point behind `kraftpy check --model M` for every
model but kafka. The verdict is False as soon as one part is not
linearizable (that is certain whatever the other parts hold), "unknown" when
no part failed but some part ran out of budget, and True only when every
part was found linearizable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.history import History
from kraftpy.tools.checker.model import UNKNOWN, Call, Model
from kraftpy.tools.checker.models import make_model
from kraftpy.tools.checker.partition import PartOutcome, ProgressSink, check_parts
from kraftpy.tools.checker.projection import check_projected
from kraftpy.tools.checker.result import CheckResult, jsonable


@dataclass(slots=True)
class LinearizabilityDetail:
    """What the explanation and the HTML report need beyond the JSON."""

    model: Model
    parts: list[PartOutcome]


def check_linearizability(
    history: History,
    model: str | Model,
    *,
    init: Any = None,
    partition: bool = True,
    timeout_s: float | None = None,
    memory_mb: float | None = None,
    workers: int | None = None,
    progress: ProgressSink | None = None,
) -> CheckResult:
    """Check `history` against `model` (a name from MODEL_NAMES or a Model instance)."""
    started = time.monotonic()
    budget = Budget.from_limits(timeout_s, memory_mb)
    m = make_model(model, init=init, partition=partition) if isinstance(model, str) else model
    calls = m.prepare(history.operations)
    parts = m.partition(calls) if partition else [(None, calls)]
    projections = m.projections(calls) if len(parts) == 1 else None
    # Check checking time, not setup: the budget starts before preparation all the same.
    if projections is not None:
        outcomes = check_projected(calls, m, projections, budget, workers=workers, progress=progress)
    else:
        outcomes = check_parts(parts, m, budget, workers=workers, progress=progress)
    elapsed = time.monotonic() - started

    results = [o.result for o in outcomes]
    if any(r is not None and r.valid is False for r in results):
        valid: bool | str = False
    elif all(r is not None and r.valid is True for r in results):
        valid = True
    else:
        valid = "unknown"
    anomalies = [_anomaly(o.model or m, o) for o in outcomes if o.result is not None and o.result.valid is not True]
    if valid == "unknown":
        unchecked = [o for o in outcomes if o.result is None]
        anomalies += [{"type": "unchecked", "key": jsonable(o.label), "calls": len(o.calls)} for o in unchecked]
    return CheckResult(
        valid=valid,
        model=m.name if partition or m.name != "kv" else "kv-nopartition",
        operations=len(history.operations),
        elapsed_s=elapsed,
        anomalies=anomalies,
        history=history,
        detail=LinearizabilityDetail(m, outcomes),
    )


def _anomaly(model: Model, outcome: PartOutcome) -> dict[str, Any]:
    r = outcome.result
    assert r is not None
    calls = outcome.calls
    base = {
        "type": "nonlinearizable" if r.valid is False else "undecided",
        "key": jsonable(outcome.label),
        "calls": len(calls),
        "longest_prefix": [_call_json(model, calls[i]) for i in r.order],
        "state": model.describe_state(r.state),
    }
    if outcome.model is not None:
        base["projection"] = True  # found by searching this part alone (projection.py)
    if r.valid is False:
        base["unplaceable"] = [_call_json(model, calls[i]) for i in r.blocked]
    else:
        base["reason"] = r.reason
    return base


def _call_json(model: Model, call: Call) -> dict[str, Any]:
    op = call.op
    return {
        "id": op.id,
        "line": op.invoke_line,
        "process": op.process,
        "f": op.f,
        "key": jsonable(op.key),
        "value": jsonable(op.value),
        "result": None if call.output is UNKNOWN else jsonable(op.result),
        "status": op.status,
        "text": model.describe_call(call),
    }
