"""The production controller plus replication under random faults, for minutes of virtual time (issue 13).

See soak.py for the model and the invariants. The slow test soaks SOAK_SEEDS
seeds of SOAK_DURATION_MS each (10 minutes of virtual time in all);
`--seeds N --seed-start S` picks others. The other tests prove the soak's
invariants catch a broken controller, both by the controller's own invariant
and, with that one switched off, by the loss of acknowledged writes it causes,
and a broken replication core (a follower that ignores DivergingEpoch).
"""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import follower
from tests.simulation import controller_sim, soak
from tests.simulation.broken_controllers import elects_outside_the_isr
from tests.simulation.soak import SoakSimulation, run, soak_config

SOAK_SEEDS = 3
SOAK_DURATION_MS = 200_000
# Rare fsyncs and frequent faults: every ISR copy of some writes is lost, which acks=all without an fsync allows.
HARSH = {"flush_interval_ms": (200, 1_500), "fault_interval_ms": (40, 300), "downtime_ms": (10, 500)}
HARSH_SEEDS = 6
HARSH_DURATION_MS = 60_000
# Short runs for the broken variants: each is caught on the first seed today; allow a few.
PROOF_SEEDS = 10
PROOF_DURATION_MS = 30_000


def first_violation(**changes) -> tuple[int, list[str]]:
    for seed in range(PROOF_SEEDS):
        result = run(soak_config(seed, duration_ms=PROOF_DURATION_MS, **changes))
        if not result.ok:
            return seed, result.violations
    raise AssertionError(f"no violation in {PROOF_SEEDS} seeds: the soak is blind to this bug")


@pytest.mark.slow
def test_the_production_controller_and_replication_keep_every_invariant_in_a_soak(seed_range: range | None) -> None:
    seeds = seed_range if seed_range is not None else range(SOAK_SEEDS)
    totals = {"acked": 0, "leader_changes": 0, "crashes": 0, "failovers": 0, "fencings": 0, "isr_changes": 0}
    for seed in seeds:
        sim = SoakSimulation(soak_config(seed, duration_ms=SOAK_DURATION_MS))
        result = sim.run()
        assert result.ok, (
            f"seed {seed}: {result.violations}\n  trace: {result.trace[-10:]}\n"
            f"  replay: pytest tests/simulation/test_soak.py --seed-start {seed} --seeds 1"
        )
        stats = sim.controller.checker.stats
        for key, value in (
            ("acked", result.acked),
            ("leader_changes", result.leader_changes),
            ("crashes", result.crashes),
            ("failovers", sim.controller.failovers),
            ("fencings", stats.fencings),
            ("isr_changes", stats.isr_changes),
        ):
            totals[key] += value
    # Minutes of faults must actually exercise failover everywhere, or passing means little.
    n = len(seeds) * SOAK_DURATION_MS // 1000  # per virtual second
    assert totals["acked"] >= 5 * n, totals
    assert totals["leader_changes"] >= n // 4, totals
    assert totals["crashes"] >= n // 4, totals
    assert totals["failovers"] >= n // 10, totals
    assert totals["fencings"] >= n // 4, totals
    assert totals["isr_changes"] >= n, totals


@pytest.mark.slow
def test_losing_every_isr_copy_is_the_only_loss_in_a_harsh_soak() -> None:
    forfeited, failures = 0, []
    for seed in range(HARSH_SEEDS):
        result = run(soak_config(seed, duration_ms=HARSH_DURATION_MS, **HARSH))
        forfeited += result.forfeited
        if not result.ok:
            failures.append(f"seed {seed}: {result.violations}\n  trace: {result.trace[-10:]}")
    assert failures == [], "\n".join(failures[:3])
    assert forfeited > 0, "the harsh soak never lost an ISR's every copy: it tests nothing more than the default"


def test_a_write_forfeited_again_after_it_was_committed_again_lowers_the_hw_again() -> None:
    """Harsh seed 2: offsets lost by every ISR member (forfeited) were committed again, with the same
    batches, by a leader that had fetched them, and then lost again in its crash. The checker kept them
    forfeited from the first time, so it did not lower the HW a leader may expose after the second loss
    and reported the new leader's lower HW as going back."""
    result = run(soak_config(2, duration_ms=HARSH_DURATION_MS, **HARSH))
    assert result.ok, result.violations
    assert result.forfeited > 0


CLEAN_SEEDS = 4


def test_clean_restarts_keep_eligible_leaders_and_lose_nothing_in_a_soak() -> None:
    """Half the broker crashes are process crashes (the page cache keeps the log; the broker registers
    naming its last epoch): the controller keeps such brokers among the eligible leader replicas
    (KIP-966) and elects them when the ISR empties. No committed record is lost, and ELR elections
    really happen, or the run tests nothing new."""
    elr_elections, failures = 0, []
    for seed in range(CLEAN_SEEDS):
        sim = SoakSimulation(soak_config(seed, duration_ms=PROOF_DURATION_MS, process_crash_share=0.5, **HARSH))
        result = sim.run()
        elr_elections += sim.controller.checker.stats.elr_elections
        if not result.ok:
            failures.append(f"seed {seed}: {result.violations}\n  trace: {result.trace[-10:]}")
    assert failures == [], "\n".join(failures[:3])
    assert elr_elections > 0, "no leader came from an ELR: the clean-restart soak exercised nothing"


def test_a_power_loss_whose_restart_never_registered_keeps_the_next_restart_unclean() -> None:
    """Harsh seed 128 with process crashes: node 1 lost its tail in a power loss while cut off from the
    controller, so that restart's (unclean) registration never arrived; two process crashes later it
    registered naming its last *answered* epoch, which the controller still held, and was taken for
    clean: elected from the ELR without the records it lost. The broker's restart record keeps what
    each start decided (broker/clean_restart.py), so the later start names -1 too."""
    result = run(soak_config(128, duration_ms=60_000, process_crash_share=0.5, **HARSH))
    assert result.ok, f"{result.violations}\n  trace: {result.trace[-10:]}"


def test_the_same_seed_gives_the_same_soak() -> None:
    a, b = (run(soak_config(5, duration_ms=5_000)) for _ in range(2))
    assert a == b
    assert a.ok and a.acked > 0


def test_a_controller_that_elects_outside_the_isr_fails_the_soak(monkeypatch: pytest.MonkeyPatch) -> None:
    elects_outside_the_isr(monkeypatch)
    seed, violations = first_violation()
    assert any("from outside its ISR" in v for v in violations), violations
    monkeypatch.undo()
    assert run(soak_config(seed, duration_ms=PROOF_DURATION_MS)).ok


def test_the_data_invariants_alone_see_what_an_election_outside_the_isr_loses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the controller's invariants switched off, the same broken controller still fails the soak:
    the leader it elects lacks acknowledged writes."""
    elects_outside_the_isr(monkeypatch)
    monkeypatch.setattr(controller_sim.CommittedHistoryChecker, "check", lambda self, old, new, records: None)
    _seed, violations = first_violation()
    assert any("lacks an acknowledged batch" in v or "lacks a committed batch" in v for v in violations), violations


def test_a_follower_that_ignores_the_leaders_diverging_epoch_fails_the_soak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken replication core: a follower told its log diverged keeps it (never truncates)."""
    monkeypatch.setattr(follower, "truncation_offset", lambda diverging, own, log_end_offset: (log_end_offset, True))
    seed, violations = first_violation()
    assert any("differs from leader" in v or "another batch than the committed one" in v for v in violations), (
        violations
    )
    monkeypatch.undo()
    assert run(soak_config(seed, duration_ms=PROOF_DURATION_MS)).ok


def test_a_restarted_broker_the_controller_never_unfences_fails_the_soak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken shell: only a broker's first incarnation heartbeats, so a restarted one stays fenced."""
    heartbeat = soak.QuorumControllerShell.heartbeat
    monkeypatch.setattr(
        soak.QuorumControllerShell,
        "heartbeat",
        lambda self, broker, incarnation: heartbeat(self, broker, incarnation) if incarnation == 0 else None,
    )
    _seed, violations = first_violation()
    assert any("after healing the controller holds" in v and "fenced=True" in v for v in violations), violations
