"""Scripted fault scenarios on the simulator, with timing asserted in virtual time.

No random faults here (no drops, duplicates or mid-step crashes); each test
scripts its own. Virtual time is deterministic, so the timing assertions
(election, failover, graceful resignation) are exact properties of the
protocol and the configured timeouts, not wall-clock measurements.
Every invariant of invariants.py is still checked on every step.
"""

from __future__ import annotations

from kraftpy.raft.actions import InstallSnapshot, TruncateTo, WriteSnapshotChunk
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.messages import VoteRequest
from kraftpy.raft.quorum_state import Role
from tests.simulation.cluster import SimConfig, Simulator

T = RaftConfig().election_timeout_ms  # 1000
FETCH_TIMEOUT = RaftConfig().fetch_timeout_ms  # 2000
CHECK_QUORUM = RaftConfig().check_quorum_timeout_ms  # 3000


def make(voters: int = 3, observers: int = 1, seed: int = 7, **changes) -> Simulator:
    sim = Simulator(
        seed, SimConfig(voters=voters, observers=observers, faults=False, label="scenario", scripted=True, **changes)
    )
    sim.start()
    return sim


def ready_leader(sim: Simulator, timeout_ms: int, other_than: int | None = None) -> int:
    def ready() -> bool:
        leader = sim.leader()
        return leader is not None and leader != other_than and sim.nodes[leader].core.leader_ready

    assert sim.run_until(ready, timeout_ms), f"no ready leader within {timeout_ms} ms"
    leader = sim.leader()
    assert leader is not None
    return leader


def commit(sim: Simulator, count: int, timeout_ms: int = 5000) -> list[bytes]:
    """Propose `count` entries on the current leader and wait until all are acknowledged."""
    leader = sim.leader()
    assert leader is not None
    sent = []
    for _ in range(count):
        assert sim.propose(leader)
        sent.append(f"p{sim._proposal_seq}".encode())
    acked = lambda: {d for _, _, d in sim.acked} >= set(sent)  # noqa: E731
    assert sim.run_until(acked, timeout_ms), "proposals not acknowledged"
    return sent


def converged(sim: Simulator) -> bool:
    target = len(sim.invariants.committed)
    if target < sim.invariants.acked_high:
        return False
    return all(n.up and n.sm.applied == target for n in sim.nodes.values())


def settle(sim: Simulator, timeout_ms: int = 15_000) -> None:
    sim.heal()
    for node_id in sim.nodes:
        sim.restart(node_id)
    sim.settle(timeout_ms)


def traced(sim: Simulator, node: int, kind: type) -> list:
    return [what for _, k, n, what in sim._trace if n == node and isinstance(what, kind)]


def test_initial_election() -> None:
    sim = make()
    leader = ready_leader(sim, 2 * T + 500)
    assert sim.now < 2 * T + 500
    epochs = {n.core.epoch for n in sim.nodes.values()}
    assert epochs == {1}, "one election, one epoch (pre-vote keeps the losers from bumping it)"
    followers = [n for n in sim.nodes.values() if n.node_id != leader]
    assert sim.run_until(lambda: all(n.core.leader_id == leader for n in followers), 500)
    assert sim.invariants.committed[0][0] == 1  # the leader-change entry commits first
    commit(sim, 10)
    settle(sim)


def test_reelection_after_leader_crash() -> None:
    sim = make()
    old = ready_leader(sim, 3000)
    commit(sim, 20)
    crashed_at = sim.now
    sim.crash(old)
    new = ready_leader(sim, FETCH_TIMEOUT + 2 * T + 1000, other_than=old)
    elapsed = sim.now - crashed_at
    # followers notice after the fetch timeout, then one pre-vote + vote round
    assert FETCH_TIMEOUT <= elapsed < FETCH_TIMEOUT + 2 * T + 500, elapsed
    assert sim.nodes[new].core.epoch == 2
    commit(sim, 10)
    sim.restart(old)
    assert sim.run_until(lambda: converged(sim), 5000)
    settle(sim)


def test_recovery_after_every_node_is_killed() -> None:
    sim = make(voters=3, observers=1)
    ready_leader(sim, 3000)
    acked = commit(sim, 40)
    for node_id in sim.nodes:
        sim.crash(node_id)
    sim.run_for(500)
    for node_id in sim.nodes:
        sim.restart(node_id)
    ready_leader(sim, 3 * T + 1000)
    commit(sim, 5)
    settle(sim)
    committed = {data for _, data in sim.invariants.committed}
    assert set(acked) <= committed


def test_leader_partitioned_away() -> None:
    sim = make(voters=3, observers=1)
    old = ready_leader(sim, 3000)
    commit(sim, 10)
    isolated_at = sim.now
    sim.isolate(old)
    for _ in range(3):  # proposals that reach only the isolated leader: never committed
        assert sim.propose(old)
    doomed = {f"p{sim._proposal_seq - i}".encode() for i in range(3)}
    # check-quorum: the old leader resigns once a majority has not fetched for 1.5x fetch timeout
    assert sim.run_until(lambda: sim.nodes[old].core.role is not Role.LEADER, CHECK_QUORUM + 500)
    assert CHECK_QUORUM - 600 <= sim.now - isolated_at <= CHECK_QUORUM, sim.now - isolated_at
    new = ready_leader(sim, FETCH_TIMEOUT + 3 * T, other_than=old)
    assert sim.nodes[new].core.epoch > sim.nodes[old].core.epoch
    commit(sim, 10)
    sim.heal()
    assert sim.run_until(lambda: sim.nodes[old].core.leader_id == new and converged(sim), 8000)
    assert traced(sim, old, TruncateTo), "the old leader dropped its uncommitted tail"
    assert not doomed & {d for _, _, d in sim.acked}
    assert not doomed & {d for _, d in sim.invariants.committed}
    settle(sim)


def test_progress_with_only_a_majority_up() -> None:
    sim = make(voters=5, observers=1)
    leader = ready_leader(sim, 3000)
    others = [n for n in sorted(sim.voter_ids) if n != leader]
    sim.crash(others[0])
    sim.crash(others[1])
    commit(sim, 20)  # 3 of 5 voters: progress
    sim.crash(others[2])  # 2 of 5: no majority, nothing commits (the observer does not count)
    before = len(sim.invariants.committed)
    sim.propose(leader)
    sim.run_for(2000)
    assert len(sim.invariants.committed) == before
    sim.restart(others[2])
    assert sim.run_until(lambda: len(sim.invariants.committed) > before, 6 * T)
    settle(sim)


def test_back_to_back_leader_failures() -> None:
    sim = make(voters=5, observers=1)
    acked: list[bytes] = []
    down: list[int] = []
    leader = ready_leader(sim, 3000)
    for _ in range(4):
        acked += commit(sim, 5)
        sim.crash(leader)
        down.append(leader)
        if len(down) > 2:
            sim.restart(down.pop(0))
        leader = ready_leader(sim, FETCH_TIMEOUT + 4 * T, other_than=leader)
    acked += commit(sim, 5)
    settle(sim)
    assert len(sim.invariants.leaders) >= 5
    assert set(acked) <= {d for _, d in sim.invariants.committed}


def test_follower_loses_its_unsynced_tail() -> None:
    sim = make(voters=3, observers=0)
    leader = ready_leader(sim, 3000)
    commit(sim, 10)
    slow = next(n for n in sorted(sim.voter_ids) if n != leader)
    sim.flush_extra_ms[slow] = 10_000  # its fsyncs never finish before the crash
    before = sim.nodes[slow].log.end_offset
    commit(sim, 10)  # leader + the other follower are a majority
    assert sim.nodes[slow].log.end_offset > before
    sim.crash(slow)
    assert sim.nodes[slow].log.end_offset == before, "the unsynced tail is gone"
    del sim.flush_extra_ms[slow]
    sim.restart(slow)
    assert sim.run_until(lambda: converged(sim), 5000)
    settle(sim)


def test_leader_loses_its_unsynced_tail_but_not_the_commit() -> None:
    sim = make(voters=3, observers=0)
    leader = ready_leader(sim, 3000)
    commit(sim, 10)
    sim.flush_extra_ms[leader] = 10_000
    acked = commit(sim, 10)  # committed by the two followers' fsyncs alone
    sim.crash(leader)
    assert sim.nodes[leader].log.end_offset < len(sim.invariants.committed) or acked[-1] not in {
        e.data for e in sim.nodes[leader].log.entries()
    }
    del sim.flush_extra_ms[leader]
    ready_leader(sim, FETCH_TIMEOUT + 3 * T, other_than=leader)
    sim.restart(leader)  # comes back resigned in its old epoch, then follows
    assert sim.nodes[leader].core.role in (Role.RESIGNED, Role.FOLLOWER)
    settle(sim)
    assert set(acked) <= {d for _, d in sim.invariants.committed}


def test_far_behind_node_caught_up_by_snapshot() -> None:
    sim = make(
        voters=3, observers=1, snapshot_every_entries=25, raft=RaftConfig(snapshot_chunk_bytes=16, append_linger_ms=25)
    )
    leader = ready_leader(sim, 3000)
    lagging = next(n for n in sorted(sim.voter_ids) if n != leader)
    sim.crash(lagging)
    sim.crash(4)  # the observer too
    for _ in range(6):
        commit(sim, 25)
    assert sim.nodes[leader].log.log_start_offset > sim.nodes[lagging].log.end_offset, "leader trimmed its log"
    sim.restart(lagging)
    sim.restart(4)
    assert sim.run_until(lambda: converged(sim), 8000)
    for node in (lagging, 4):
        installs = traced(sim, node, InstallSnapshot)
        assert installs, f"node {node} caught up by snapshot"
        assert len(traced(sim, node, WriteSnapshotChunk)) > 1, "in several chunks"
    settle(sim)


def test_graceful_resignation_elects_the_successor_fast() -> None:
    sim = make(voters=3, observers=1)
    old = ready_leader(sim, 3000)
    commit(sim, 20)
    resigned_at = sim.now
    sim.resign(old)
    sim.crash(old)  # a planned restart: the process stops right after EndQuorumEpoch
    new = ready_leader(sim, T, other_than=old)
    elapsed = sim.now - resigned_at
    assert elapsed < 0.3 * T, f"graceful failover took {elapsed} ms of virtual time"
    commit(sim, 1)
    first_commit = sim.now - resigned_at
    assert first_commit < 0.3 * T, first_commit
    sim.restart(old)
    # it learns the new leader from a BeginQuorumEpoch resend or its own pre-vote answers
    assert sim.run_until(lambda: sim.nodes[old].core.leader_id == new, RaftConfig().request_timeout_ms + 2 * T)
    settle(sim)


def test_graceful_resignation_prefers_the_most_caught_up() -> None:
    sim = make(voters=5, observers=0)
    old = ready_leader(sim, 3000)
    commit(sim, 5)
    lagging = [n for n in sorted(sim.voter_ids) if n != old][:2]
    for n in lagging:
        sim.crash(n)
    commit(sim, 10)
    for n in lagging:
        sim.restart(n)
    sim.resign(old)
    new = ready_leader(sim, T, other_than=old)
    assert new not in lagging
    settle(sim)


def test_rejoining_follower_does_not_disrupt_the_leader() -> None:
    sim = make(voters=3, observers=0)
    leader = ready_leader(sim, 3000)
    follower = next(n for n in sorted(sim.voter_ids) if n != leader)
    epoch = sim.nodes[leader].core.epoch
    sim.isolate(follower)
    sim.run_for(4 * FETCH_TIMEOUT)  # it keeps trying pre-votes, which never bump its epoch
    assert sim.nodes[follower].core.epoch == epoch
    sim.heal()
    commit(sim, 5)
    sim.run_for(2 * FETCH_TIMEOUT)
    assert sim.leader() == leader and sim.nodes[leader].core.epoch == epoch
    settle(sim)


def test_observer_never_votes_nor_counts() -> None:
    sim = make(voters=3, observers=1)
    leader = ready_leader(sim, 3000)
    commit(sim, 10)
    others = [n for n in sorted(sim.voter_ids) if n != leader]
    sim.crash(others[0])
    sim.crash(others[1])
    before = len(sim.invariants.committed)
    sim.propose(leader)
    sim.run_for(CHECK_QUORUM + 1000)
    assert len(sim.invariants.committed) == before, "the observer's fetches do not count toward the commit"
    assert sim.nodes[leader].core.role is not Role.LEADER, "check-quorum ignores the observer too"
    settle(sim)
    assert sim.nodes[4].sm.applied == len(sim.invariants.committed)
    assert not [m for m in traced(sim, 4, VoteRequest) if m.src == 4], "observers never run for election"


def test_linearizable_reads() -> None:
    sim = make(voters=3, observers=0)
    leader = ready_leader(sim, 3000)
    commit(sim, 5)
    ok = sim.reads_ok
    assert sim.read(leader)
    assert sim.run_until(lambda: sim.reads_ok > ok, 100), "a read needs one round of fetches"
    # a deposed leader cannot confirm its leadership: its reads never succeed
    sim.isolate(leader)
    ok = sim.reads_ok
    assert sim.read(leader)
    ready_leader(sim, FETCH_TIMEOUT + 3 * T, other_than=leader)
    commit(sim, 3)
    sim.run_for(RaftConfig().read_timeout_ms)
    assert sim.reads_ok == ok
    assert not sim.reads, "the read failed (timed out or lost leadership) instead of answering"
    settle(sim)
