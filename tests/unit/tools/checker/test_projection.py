"""Deciding a one-search kv history through its per-key projections (projection.py)."""

from __future__ import annotations

import random
from typing import Any

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.linearizability import check_linearizability
from kraftpy.tools.checker.model import Call, Model
from kraftpy.tools.checker.model_kv import KvModel
from kraftpy.tools.checker.models import make_model
from kraftpy.tools.checker.projection import check_projected, merge_orders, replay
from kraftpy.tools.checker.search import search
from tests.unit.tools.checker.generate import corrupt_read, random_history
from tests.unit.tools.checker.histories import history, op, seq


def _histories(seed: int, processes: int = 6, ops: int = 300) -> list[tuple[Any, bool]]:
    rng = random.Random(seed)
    good = random_history("kv", rng, processes, ops, 0.05)
    bad = corrupt_read(good, rng)
    assert bad is not None
    return [(good, True), (bad, False)]


def test_projections_decide_what_the_whole_search_decides() -> None:
    """With no steps for the whole search, the projections give its verdict; a "yes" is a replayed order."""
    for seed in (1, 2, 3):
        for h, expected in _histories(seed):
            model = make_model("kv", partition=False)
            calls = model.prepare(h.operations)
            assert check_linearizability(h, "kv").valid is expected  # partitioned: the reference verdict
            proj = model.projections(calls)
            assert proj is not None
            outcomes = check_projected(calls, model, proj, Budget(), workers=1, plain_steps=0)
            if expected:
                (whole,) = outcomes
                assert whole.label is None and whole.model is None and whole.result is not None
                assert whole.result.valid is True
                assert replay(calls, model, whole.result.order) is not None
            else:
                failing = [o for o in outcomes if o.result is not None and o.result.valid is False]
                assert len(failing) == 1 and failing[0].model is proj[0] and failing[0].label in model.keys


def test_a_failing_projection_is_reported_as_its_key() -> None:
    h = seq(
        op(0, "put", "a", key="x"),
        op(1, "put", "b", key="y"),
        op(0, "get", result="a", key="x"),
        op(1, "get", result="c", key="y"),  # never written
    )
    model = make_model("kv", partition=False)
    calls = model.prepare(h.operations)
    proj = model.projections(calls)
    assert proj is not None
    outcomes = check_projected(calls, model, proj, Budget(), workers=1, plain_steps=0)
    (failing,) = [o for o in outcomes if o.result is not None and o.result.valid is False]
    assert failing.label == "y"
    assert failing.model is not None and failing.model.describe_state(failing.result.state) == "'b'"
    assert [failing.calls[i].op.id for i in failing.result.blocked] == [3]


def test_what_the_whole_search_decides_is_reported_as_before() -> None:
    """Decided within PLAIN_STEPS, the report is the whole search's: one part, the whole map as state."""
    for h, expected in _histories(4):
        model = make_model("kv", partition=False)
        calls = model.prepare(h.operations)
        plain = search(calls, model)
        result = check_linearizability(h, "kv", partition=False)
        assert result.valid is expected
        (part,) = result.detail.parts
        assert part.label is None and part.model is None
        assert (part.result.order, part.result.state, part.result.blocked) == (plain.order, plain.state, plain.blocked)


class _DroppingGets(KvModel):
    """Projections that leave the gets out: they always pass, and their merged order misses calls."""

    def projections(self, calls: list[Call]) -> tuple[Model, list[tuple[Any, list[Call]]]] | None:
        proj = super().projections(calls)
        assert proj is not None
        return proj[0], [(k, [c for c in part if c.input[0] != "get"]) for k, part in proj[1]]


def test_an_order_that_does_not_replay_leaves_the_verdict_to_the_search() -> None:
    for h, expected in _histories(5, 4, 120):
        model = _DroppingGets(partitioned=False)
        calls = model.prepare(h.operations)
        proj = model.projections(calls)
        assert proj is not None
        (whole,) = check_projected(calls, model, proj, Budget(), workers=1, plain_steps=0)
        assert whole.label is None and whole.result is not None and whole.result.valid is expected


def test_replay_checks_real_time_legality_and_completeness() -> None:
    h = history(
        (0, "invoke", "put", "a", "x"),
        (0, "ok", "put", "a", "x"),
        (1, "invoke", "append", "b", "x"),
        (2, "invoke", "get", None, "x"),
        (1, "ok", "append", "b", "x"),
        (2, "ok", "get", "ab", "x"),
        (3, "invoke", "put", "c", "y"),
        (3, "ok", "put", "c", "y"),
    )
    model = make_model("kv", partition=False)
    calls = model.prepare(h.operations)
    assert replay(calls, model, [0, 1, 2, 3]) is not None
    assert replay(calls, model, [3, 0, 1, 2]) is None, "legal steps, but y was put after the rest returned"
    assert replay(calls, model, [0, 2, 1, 3]) is None, "the get sees the append"
    assert replay(calls, model, [0, 1, 2]) is None, "every completed call is placed"


def test_merge_keeps_each_order_and_real_time() -> None:
    h = history(
        (0, "invoke", "put", "a", "x"),
        (1, "invoke", "put", "b", "y"),
        (1, "ok", "put", "b", "y"),
        (0, "ok", "put", "a", "x"),
        (1, "invoke", "get", None, "x"),
        (1, "ok", "get", "a", "x"),
    )
    calls = make_model("kv", partition=False).prepare(h.operations)
    assert merge_orders(calls, [[0, 2], [1]]) == [0, 1, 2]
    assert merge_orders(calls, [[2, 0], [1]]) is None, "the get was invoked after the put returned"
