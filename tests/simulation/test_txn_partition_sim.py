"""Randomised runs of the transactional partition workload (txn_partition_sim): crashes losing unsynced
tails, leader changes, restarts, partitions; no read_committed read returns an aborted or undecided record,
the LSO never passes an open transaction, and after healing the LSO is where the log says.

`--seeds N` / `--seed-start S` pick the seeds; the default is CI_SEEDS.
"""

from __future__ import annotations

import pytest

from kraftpy.broker.replication.leader import PartitionLeader
from tests.simulation.replication_sim import SimConfig
from tests.simulation.txn_partition_sim import run

CI_SEEDS = 60
PROOF_SEEDS = 100


def first_violation(**broken: bool) -> tuple[int, list[str]]:
    for seed in range(PROOF_SEEDS):
        result = run(SimConfig(seed=seed), **broken).result
        if not result.ok:
            return seed, result.violations
    raise AssertionError(f"no violation in {PROOF_SEEDS} seeds: the checker is blind to this bug")


def test_transactions_hold_across_seeds(seed_range: range | None) -> None:
    seeds = seed_range if seed_range is not None else range(CI_SEEDS)
    failures = []
    totals = {"transactions": 0, "aborted": 0, "records_read": 0, "leader_changes": 0, "crashes": 0}
    for seed in seeds:
        outcome = run(SimConfig(seed=seed))
        result = outcome.result
        totals["transactions"] += outcome.transactions
        totals["aborted"] += outcome.aborted
        totals["records_read"] += outcome.records_read
        totals["leader_changes"] += result.leader_changes
        totals["crashes"] += result.crashes
        if not result.ok:
            failures.append(f"seed {seed}: {result.violations}\n  trace: {result.trace[-10:]}")
    assert failures == [], "\n".join(failures[:5])
    # The runs must decide both ways, read committed data, and fail over, or passing means little.
    assert totals["transactions"] > 5 * len(seeds)
    assert 0 < totals["aborted"] < totals["transactions"]
    assert totals["records_read"] > 10 * len(seeds)
    assert totals["leader_changes"] > len(seeds) and totals["crashes"] > len(seeds)


def test_the_checker_sees_aborted_reads_when_aborts_are_not_indexed() -> None:
    seed, violations = first_violation(broken_abort_index=True)
    assert any("aborted" in v for v in violations), violations
    assert run(SimConfig(seed=seed)).result.ok


def test_the_checker_sees_an_lso_that_ignores_open_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(PartitionLeader, "last_stable_offset", property(lambda self: self.high_watermark))
        seed, violations = first_violation()
    assert any("passes the open transaction" in v or "undecided" in v for v in violations), violations
    assert run(SimConfig(seed=seed)).result.ok
