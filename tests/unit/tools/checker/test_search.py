"""The search and its scheduling: explanations, budgets giving unknown, parallel parts."""

from __future__ import annotations

import random

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.linearizability import check_linearizability
from kraftpy.tools.checker.models import make_model
from kraftpy.tools.checker.partition import check_parts
from kraftpy.tools.checker.search import Search, search
from tests.unit.tools.checker.generate import corrupt_read, random_history
from tests.unit.tools.checker.histories import history, op, seq


def test_longest_prefix_and_unplaceable_ops() -> None:
    h = seq(op(0, "write", 1), op(1, "write", 2), op(0, "read", result=2), op(1, "read", result=1))
    model = make_model("register")
    calls = model.prepare(h.operations)
    r = search(calls, model)
    assert r.valid is False
    assert [calls[i].op.id for i in r.order] == [0, 1, 2]
    assert r.state == 2
    assert [calls[i].op.id for i in r.blocked] == [3]


def test_linearization_respects_real_time() -> None:
    h = history(
        (0, "invoke", "write", 1),
        (1, "invoke", "write", 2),
        (1, "ok", "write", 2),
        (2, "invoke", "read"),
        (0, "ok", "write", 1),
        (2, "ok", "read", 2),
    )
    model = make_model("register")
    calls = model.prepare(h.operations)
    r = search(calls, model)
    assert r.valid is True
    order = [calls[i].op.f + str(calls[i].op.value or calls[i].op.result) for i in r.order]
    assert order == ["write1", "write2", "read2"], "write 1 must come before write 2 for the read to see 2"


def test_resumable_search_gives_the_same_answer_in_slices() -> None:
    h = random_history("kv", random.Random(7), 5, 60, 0.1)
    model = make_model("kv", partition=False)
    calls = model.prepare(h.operations)
    whole = search(calls, model)
    s = Search(calls, model)
    result = None
    while result is None:
        result = s.run(3)
    assert (result.valid, result.order, result.configs) == (whole.valid, whole.order, whole.configs)


def test_spent_budget_is_unknown_never_a_verdict() -> None:
    h = random_history("kv", random.Random(3), 8, 300, 0.0)
    r = check_linearizability(h, "kv", partition=False, timeout_s=0)
    assert r.valid == "unknown" and r.exit_code == 2
    assert r.anomalies[0]["type"] == "undecided" and r.anomalies[0]["reason"] == "timeout"
    r = check_linearizability(h, "kv", partition=False, memory_mb=1)
    assert r.valid == "unknown" and r.anomalies[0]["reason"] == "memory"
    # even a trivial history: a spent budget is never turned into a verdict
    easy = seq(op(0, "write", 1), op(0, "read", result=1))
    r = check_linearizability(easy, "register", timeout_s=0)
    assert r.valid == "unknown" and r.exit_code == 2


def test_parallel_parts_agree_with_serial() -> None:
    rng = random.Random(11)
    good = random_history("kv", rng, 6, 400, 0.05)
    bad = corrupt_read(good, rng)
    assert bad is not None
    for h, expected in ((good, True), (bad, False)):
        model = make_model("kv")
        parts = model.partition(model.prepare(h.operations))
        serial = check_parts(parts, model, Budget(), workers=1)
        forked = check_parts(parts, model, Budget(), workers=2)
        verdicts = [{o.result.valid for o in outcomes if o.result is not None} for outcomes in (serial, forked)]
        assert all((False in v) != expected for v in verdicts)
        if expected:
            assert [o.result.valid for o in serial] == [o.result.valid for o in forked] == [True] * len(parts)


def test_first_failure_stops_the_check() -> None:
    h = seq(
        op(0, "append", "x", key="a"),
        op(0, "get", result="y", key="a"),
        *[op(1, "append", f"v{i}", key=f"k{i}") for i in range(5)],
    )
    model = make_model("kv")
    parts = model.partition(model.prepare(h.operations))
    outcomes = check_parts(parts, model, Budget(), workers=1)
    assert outcomes[0].result is not None and outcomes[0].result.valid is False
    r = check_linearizability(h, "kv")
    assert r.valid is False and [a["key"] for a in r.anomalies] == ["a"]
