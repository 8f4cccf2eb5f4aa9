"""The checkers catch what they claim to: broken core variants and corrupted histories fail.

Each variant breaks one rule of the protocol on purpose (a fault-injected core);
the random simulation must report the invariant that rule protects, by its own
message, within a bounded number of seeds. A variant that merely crashes (the
simulator reports a core's exception as a violation too) does not count as
caught. Runs are deterministic, so "within N seeds" is a fixed fact, not luck.
The corrupted-history tests feed the invariant checker impossible events directly.
"""

from __future__ import annotations

import re

import pytest

from kraftpy.raft.actions import Send
from kraftpy.raft.log import Entry, OffsetAndEpoch
from kraftpy.raft.node import RaftNode
from tests.simulation.cluster import SimConfig, Simulator, run_seed
from tests.simulation.invariants import GENESIS, Invariants, InvariantViolation, chain_digest


class VotesForAnyLog(RaftNode):
    """Grants votes without the election restriction (log up to date)."""

    def _vote_log_ok(self, request) -> bool:
        return True


class CommitsByCountingOldEntries(RaftNode):
    """Advances the high watermark over old-epoch entries by counting replicas (Figure 8)."""

    def _to_leader(self) -> None:
        super()._to_leader()
        if self._leader is not None:
            self._leader.epoch_start_offset = -1


class FetchesFromUnflushedEnd(RaftNode):
    """A follower acknowledges (fetches from) entries it has not fsynced yet."""

    def _send_fetch(self) -> None:
        saved, self._flushed = self._flushed, self.view.end_offset
        try:
            super()._send_fetch()
        finally:
            self._flushed = saved


class SendsBeforePersisting(RaftNode):
    """Puts its messages before the quorum-state persist: a crash in between loses the epoch."""

    def take_actions(self):
        actions = super().take_actions()
        return [a for a in actions if isinstance(a, Send)] + [a for a in actions if not isinstance(a, Send)]


class TruncatesTooFar(RaftNode):
    """Truncates a few entries below the DivergingEpoch answer."""

    def _truncate(self, offset: int) -> None:
        super()._truncate(max(self.high_watermark, offset - 3))


class CrashesWhenVoting(RaftNode):
    """Not a broken rule, a broken program: a method it calls is gone (a rename gone wrong)."""

    def _vote_log_ok(self, request) -> bool:
        return self._no_such_method(request)


# a crash in the middle of a step is what exposes a wrong action order: make it frequent
MID_STEP_CRASHES = {"crash_mid_step_rate": 0.05}

# What the checkers say when each rule is broken (the first line of the violation).
LEADER_COMPLETENESS = r"became leader of epoch \d+ without committed offset \d+"
HW_MONOTONIC = r"high watermark went back from \d+ to \d+"
EPOCH_PERSISTED = r"restarted in epoch \d+ but had sent messages in epoch \d+"


def first_violation(variant: type[RaftNode], voters: int, within: int, changes: dict) -> tuple[int, str] | None:
    """(seed, message) of the first seed whose run reports a violation, or None."""
    config = SimConfig(voters=voters, label=f"mutant-{variant.__name__}", **changes)
    for seed in range(within):
        try:
            run_seed(seed, config, variant)
        except InvariantViolation as exc:
            return seed, str(exc)
    return None


@pytest.mark.parametrize(
    ("variant", "voters", "within", "changes", "expected"),
    [
        (VotesForAnyLog, 3, 20, {}, LEADER_COMPLETENESS),
        (VotesForAnyLog, 5, 20, {}, LEADER_COMPLETENESS),
        (CommitsByCountingOldEntries, 3, 20, {}, HW_MONOTONIC),
        (CommitsByCountingOldEntries, 5, 20, {}, HW_MONOTONIC),
        (FetchesFromUnflushedEnd, 3, 100, {}, LEADER_COMPLETENESS),
        # a rare window (an acknowledged unflushed entry lost in a crash, then needed): 77 seeds since
        # fetch_high_watermark_linger_ms changed the fetch pattern (33 before)
        (FetchesFromUnflushedEnd, 5, 100, {}, LEADER_COMPLETENESS),
        (SendsBeforePersisting, 3, 50, MID_STEP_CRASHES, EPOCH_PERSISTED),
        (SendsBeforePersisting, 5, 50, MID_STEP_CRASHES, EPOCH_PERSISTED),
        # entries a follower drops below the divergence may be committed: it is caught either when
        # it leads without them or when a high watermark then goes back, whichever a seed hits first
        # (the leader sending a new batch before writing it moved seed 6 from the second to the first)
        (TruncatesTooFar, 3, 20, {}, f"{LEADER_COMPLETENESS}|{HW_MONOTONIC}"),
        (TruncatesTooFar, 5, 20, {}, f"{LEADER_COMPLETENESS}|{HW_MONOTONIC}"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else ("" if isinstance(v, dict | str) else str(v)),
)
def test_broken_core_is_caught(variant: type[RaftNode], voters: int, within: int, changes: dict, expected: str) -> None:
    found = first_violation(variant, voters, within, changes)
    if found is None:
        pytest.fail(f"{variant.__name__} survived {within} seeds: the checkers missed a broken rule")
    seed, message = found
    assert re.search(expected, message.splitlines()[0]), f"caught, but not by the rule it breaks:\n{message}"
    assert f"seed {seed}" in message and "replay:" in message and "last events:" in message


def test_a_crashing_core_is_not_a_caught_one() -> None:
    """The simulator reports a core's AttributeError as a violation; no checker's message matches it."""
    found = first_violation(CrashesWhenVoting, 3, 5, {})
    assert found is not None
    first_line = found[1].splitlines()[0]
    assert first_line.startswith("AttributeError")
    assert not any(re.search(rule, first_line) for rule in (LEADER_COMPLETENESS, HW_MONOTONIC, EPOCH_PERSISTED))


def test_correct_core_passes_the_same_seeds() -> None:
    for seed in range(20):
        run_seed(seed, SimConfig(voters=3))
        run_seed(seed, SimConfig(voters=3, **MID_STEP_CRASHES))


def test_two_leaders_in_one_epoch_is_reported() -> None:
    inv = Invariants()
    inv.on_leader(1, 4)
    with pytest.raises(InvariantViolation, match="two leaderships in epoch 4"):
        inv.on_leader(2, 4)


def test_log_matching_violation_is_reported() -> None:
    inv = Invariants()
    inv.on_append(1, (Entry(0, 1, b"a"), Entry(1, 1, b"b")), 0)
    inv.on_append(2, (Entry(0, 1, b"a"),), 0)
    with pytest.raises(InvariantViolation, match="log matching"):
        inv.on_append(2, (Entry(1, 1, b"other"),), 1)


def test_divergent_commit_and_lost_acknowledged_write_are_reported() -> None:
    inv = Invariants()
    inv.on_apply(1, Entry(0, 1, b"a"))
    with pytest.raises(InvariantViolation, match="applied offset 0"):
        inv.on_apply(2, Entry(0, 2, b"b"))
    inv.on_acked(1, 1, 1, b"w")
    with pytest.raises(InvariantViolation, match="lost"):
        inv.check_acked_in_log([(1, 1, b"w")])


def test_high_watermark_and_epoch_going_back_are_reported() -> None:
    inv = Invariants()
    inv.on_exposed_hw(1, 10)
    with pytest.raises(InvariantViolation, match="went back"):
        inv.on_exposed_hw(1, 9)
    inv.on_epoch_sent(2, 5)
    with pytest.raises(InvariantViolation, match="restarted in epoch 4"):
        inv.on_restart(2, 4)
    inv.on_persist(3, 6)
    with pytest.raises(InvariantViolation, match="durable epoch"):
        inv.on_persist(3, 5)


def test_snapshot_disagreeing_with_the_log_is_reported() -> None:
    inv = Invariants()
    inv.on_apply(1, Entry(0, 1, b"a"))
    inv.on_apply(1, Entry(1, 2, b"b"))
    good = chain_digest(chain_digest(GENESIS, 1, b"a"), 2, b"b")
    inv.on_snapshot(1, OffsetAndEpoch(2, 2), good)
    with pytest.raises(InvariantViolation, match="has epoch 2"):
        inv.on_snapshot(1, OffsetAndEpoch(2, 1), good)
    with pytest.raises(InvariantViolation, match="does not match"):
        inv.on_snapshot(1, OffsetAndEpoch(2, 2), GENESIS)


def test_stale_read_is_reported() -> None:
    with pytest.raises(InvariantViolation, match="stale read"):
        Invariants().on_read(1, 5, 7)


def test_corrupted_log_fails_the_run_with_a_replay_hint() -> None:
    """Flip the data of a not-yet-applied entry in one follower's log (silent disk corruption);
    the run fails when that node applies it, with the seed, the replay command and the trace."""
    sim = Simulator(3, SimConfig(voters=3, faults=False, label="corrupted", scripted=True))
    sim.start()
    sim.every(20, sim.propose, 60_000)
    assert sim.run_until(lambda: len(sim.invariants.committed) > 5, 10_000)

    def unapplied_entry() -> bool:
        return any(n.core is not None and n.log.end_offset > n.sm.applied + 1 for n in sim.nodes.values())

    assert sim.run_until(unapplied_entry, 5000)
    victim = next(n for n in sim.nodes.values() if n.core is not None and n.log.end_offset > n.sm.applied + 1)
    position = victim.sm.applied - victim.log.log_start_offset + 1
    entry = victim.log._entries[position]
    victim.log._entries[position] = Entry(entry.offset, entry.epoch, b"corrupted", entry.kind)
    with pytest.raises(InvariantViolation) as info:
        sim.run_for(5000)
    message = str(info.value)
    assert "corrupted" in message and "seed 3" in message
    assert "replay: run the same test again" in message and "full trace:" in message


def test_a_core_exception_is_reported_with_seed_and_trace() -> None:
    class Crashes(RaftNode):
        def _to_leader(self) -> None:
            raise RuntimeError("boom: core crashed")

    with pytest.raises(InvariantViolation) as info:
        run_seed(0, SimConfig(voters=3, label="crashing-core"), Crashes)
    message = str(info.value)
    assert "RuntimeError: boom" in message and "seed 0" in message and "last events:" in message


def test_a_leader_of_an_older_epoch_is_not_a_violation() -> None:
    """Seed 101327 (harsh, 3 voters): a vote for epoch 2 is delayed ~550 ms; meanwhile epoch 3
    elects a leader and commits its first entry; then the late vote makes node 1 leader of
    epoch 2 without that entry. Raft allows it (that leader can commit nothing); an earlier,
    too strict leader-completeness check reported it. Kept as the checker's regression test."""
    from tests.simulation.cluster import profile_config

    stats = run_seed(101327, profile_config("harsh", 3, seed=101327))
    assert stats["committed"] > 0
