"""Randomised replication runs: crashes losing unsynced tails, partitions, message loss, leader churn.

Each seed is a whole 3-broker run checked after every event (see
replication_sim.Checker). `--seeds N` / `--seed-start S` pick the seeds;
the default is CI_SEEDS.
"""

from __future__ import annotations

from tests.simulation.replication_sim import SimConfig, run

CI_SEEDS = 200
# Seeds scanned for the broken variant before declaring the checker blind.
PROOF_SEEDS = 300


def test_replication_invariants_hold_across_seeds(seed_range: range | None) -> None:
    seeds = seed_range if seed_range is not None else range(CI_SEEDS)
    failures = []
    totals = {"acked": 0, "leader_changes": 0, "crashes": 0}
    for seed in seeds:
        result = run(SimConfig(seed=seed))
        totals["acked"] += result.acked
        totals["leader_changes"] += result.leader_changes
        totals["crashes"] += result.crashes
        if not result.ok:
            failures.append(f"seed {seed}: {result.violations}\n  trace: {result.trace[-10:]}")
    assert failures == [], "\n".join(failures[:5])
    # The runs must actually exercise failover, or passing means little.
    assert totals["acked"] > 10 * len(seeds)
    assert totals["leader_changes"] > len(seeds)
    assert totals["crashes"] > len(seeds)


def test_truncating_to_the_high_watermark_loses_acknowledged_writes() -> None:
    """The proof that the checker sees what KIP-101 fixes.

    The broken variant truncates a new follower's log to its own HW (as
    Kafka did before leader epochs). A follower's HW lags the leader's, so
    this drops committed records; if that follower is elected before it
    re-fetches them, acknowledged writes are gone. The simulator must find
    such a run, and the same seed must pass with truncation by epoch.
    """
    for seed in range(PROOF_SEEDS):
        broken = run(SimConfig(seed=seed, broken_truncate_to_hw=True))
        if not broken.ok:
            break
    else:
        raise AssertionError(f"no violation in {PROOF_SEEDS} seeds with truncate-to-HW: the checker is blind")
    assert any("lacks an acknowledged batch" in v or "lacks a committed batch" in v for v in broken.violations), (
        broken.violations
    )
    assert run(SimConfig(seed=seed)).ok
