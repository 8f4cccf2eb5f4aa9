"""Randomised replication runs: crashes losing unsynced tails, partitions, message loss, leader churn.

Each seed is a whole 3-broker run checked after every event (see
replication_sim.Checker). `--seeds N` / `--seed-start S` pick the seeds;
the default is CI_SEEDS.
"""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import isr as isr_module
from kraftpy.broker.replication.model import EpochEndOffset
from tests.simulation import replication_sim
from tests.simulation.replication_sim import SimConfig, run

CI_SEEDS = 200
# Seeds scanned for a broken variant before declaring the checker blind.
PROOF_SEEDS = 300
HARSH_SEEDS = 40
# Rare fsyncs and frequent crashes: every ISR copy of a write is sometimes lost, which the design allows.
HARSH = {"flush_interval_ms": (200, 1_500), "fault_interval_ms": (40, 200), "downtime_ms": (10, 150)}


def first_violation(**overrides) -> tuple[int, list[str]]:
    for seed in range(PROOF_SEEDS):
        result = run(SimConfig(seed=seed, **overrides))
        if not result.ok:
            return seed, result.violations
    raise AssertionError(f"no violation in {PROOF_SEEDS} seeds: the checker is blind to this bug")


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
    seed, violations = first_violation(broken_truncate_to_hw=True)
    assert any("lacks an acknowledged batch" in v or "lacks a committed batch" in v for v in violations), violations
    assert run(SimConfig(seed=seed)).ok


def test_a_leader_acting_on_its_persisted_metadata_after_a_power_loss_loses_acknowledged_writes() -> None:
    """Issue 11, section 1: the fault "power loss of a leader's unsynced tail plus a fast restart".

    b78d6bc's broker took the roles its persisted metadata gave it before the controller had acted
    on its new registration: back within its session timeout, the leader led again in its old epoch
    with a shorter log, and followers truncated to it. The checker must see that on some seed (seed 0
    of the default profile), and the same seed must pass when roles wait for the registration.
    """
    seed, violations = first_violation(broken_roles_before_registration=True)
    assert any(
        "below the HW" in v or "lacks an acknowledged batch" in v or "lacks a committed batch" in v for v in violations
    ), violations
    assert run(SimConfig(seed=seed)).ok


def test_a_leader_that_skips_the_divergence_check_lets_replicas_differ_below_the_hw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shell hands the leader an epoch answer that always matches: diverged tails get counted in the HW."""

    def always_matching(broker, request):
        if request.last_fetched_epoch < 0:
            return None
        return EpochEndOffset(request.last_fetched_epoch, 1 << 40)

    monkeypatch.setattr(replication_sim.Broker, "_leader_epoch_end", always_matching)
    seed, violations = first_violation()
    assert any("another batch than the committed one" in v or "committed twice" in v for v in violations), violations
    monkeypatch.undo()
    assert run(SimConfig(seed=seed)).ok


def test_a_hw_over_the_committed_instead_of_the_maximal_isr_loses_acknowledged_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While an ISR change is in flight the HW must count every replica the controller may elect."""
    monkeypatch.setattr(isr_module.PendingExpandIsr, "maximal_isr", property(lambda s: s.isr))
    monkeypatch.setattr(isr_module.PendingShrinkIsr, "maximal_isr", property(lambda s: s.isr - s.out_of_sync_replicas))
    seed, violations = first_violation()
    assert any("lacks an acknowledged batch" in v or "lacks a committed batch" in v for v in violations), violations
    monkeypatch.undo()
    assert run(SimConfig(seed=seed)).ok


def test_losing_every_isr_copy_is_the_only_loss_and_it_does_happen_under_harsh_faults() -> None:
    """With rare fsyncs some writes vanish from every ISR member's disk; the checker must excuse exactly those."""
    forfeited, failures = 0, []
    for seed in range(HARSH_SEEDS):
        result = run(SimConfig(seed=seed, **HARSH))
        forfeited += result.forfeited
        if not result.ok:
            failures.append(f"seed {seed}: {result.violations}")
    assert failures == [], "\n".join(failures[:5])
    assert forfeited > 0, "the harsh profile never lost an ISR's every copy: it tests nothing more than the default"
