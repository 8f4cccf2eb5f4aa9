"""Properties: a history made by running a sequential spec under random concurrency is linearizable;
one with a read changed to an impossible value is not."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kraftpy.tools.checker.linearizability import check_linearizability
from tests.unit.tools.checker.generate import KINDS, corrupt_read, random_history

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET = {"memory_mb": 4096, "timeout_s": 10}  # RSS of the whole test process; an unknown is discarded


def _init(kind: str):
    return 0 if kind in ("register", "cas-register") else None


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(
    rng=st.randoms(use_true_random=False),
    processes=st.integers(1, 5),
    ops=st.integers(1, 30),
    crash_p=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_generated_history_is_linearizable(kind: str, rng: random.Random, processes: int, ops: int, crash_p: float):
    h = random_history(kind, rng, processes, ops, crash_p)
    result = check_linearizability(h, kind, init=_init(kind))
    assert result.valid is True, result.anomalies
    if kind == "kv":
        assert check_linearizability(h, "kv", partition=False).valid is True


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(
    rng=st.randoms(use_true_random=False),
    processes=st.integers(1, 5),
    ops=st.integers(2, 30),
    crash_p=st.sampled_from([0.0, 0.2]),
)
def test_impossible_read_is_not_linearizable(kind: str, rng: random.Random, processes: int, ops: int, crash_p: float):
    h = random_history(kind, rng, processes, ops, crash_p)
    bad = corrupt_read(h, rng)
    assume(bad is not None)
    # Proving a history invalid means searching every order; with crashed (never-ending) operations
    # some generated histories take more than the machine has, so the search is bounded as a real
    # check is (`kraftpy check --memory-mb`), and an unknown verdict proves nothing either way.
    # (The checker says "unknown", a string, when a budget runs out: `is not None` let it through.)
    result = check_linearizability(bad, kind, init=_init(kind), **BUDGET)
    assume(result.valid != "unknown")
    assert result.valid is False
    (anomaly,) = result.anomalies
    assert anomaly["unplaceable"]
    if kind == "kv":
        assert check_linearizability(bad, "kv", partition=False, **BUDGET).valid in (False, "unknown")
