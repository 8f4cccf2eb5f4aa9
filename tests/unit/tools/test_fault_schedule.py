"""The nemesis schedule (tools/faults/schedule.py): seeded, every nemesis once per round, valid faults."""

from __future__ import annotations

import random

import pytest

from kraftpy.tools.faults.partitions import isolate
from kraftpy.tools.faults.schedule import (
    FAMILIES,
    LEADER_NEMESES,
    LEADER_ROLES,
    NEMESES,
    NODE_ACTIONS,
    Schedule,
    TimedFault,
    aim,
    aim_free,
    conflicts,
    expand,
    max_node_faults,
    may_leave_down,
    next_fault,
    plan_drops,
    plan_overlapping,
)

NODES = (1, 2, 3, 4, 5)


def test_the_same_seed_gives_the_same_schedule() -> None:
    def schedule(seed: int) -> list[object]:
        s = Schedule(NEMESES, NODES, random.Random(seed), disk_node=2, partition_count=3)
        return [s.next() for _ in range(50)]

    assert schedule(4) == schedule(4)
    assert schedule(4) != schedule(5)


def test_every_nemesis_runs_once_per_round() -> None:
    s = Schedule(NEMESES, NODES, random.Random(7), disk_node=1)
    for _ in range(3):
        assert sorted(s.next().nemesis for _ in NEMESES) == sorted(NEMESES)


def test_the_leader_nemeses_of_a_round_hit_each_role_once() -> None:
    s = Schedule(LEADER_NEMESES, NODES, random.Random(3), partition_count=3)
    for _ in range(4):
        assert sorted(s.next().role for _ in LEADER_NEMESES) == sorted(LEADER_ROLES)


def test_node_faults_name_a_node_and_partitions_cut_only_nodes() -> None:
    s = Schedule(("kill", "pause", "lose-tail", "majority", "one-way"), (1, 2, 3), random.Random(1))
    for f in (s.next() for _ in range(100)):
        if f.action == "partition":
            assert f.node is None and f.drops and all(a in (1, 2, 3) and b in (1, 2, 3) for a, b in f.drops)
        else:
            assert f.action == f.nemesis and f.node in (1, 2, 3) and not f.drops


def test_disk_full_hits_the_node_with_the_small_disk_and_needs_one() -> None:
    assert {next_fault("disk-full", NODES, random.Random(i), disk_node=4).node for i in range(20)} == {4}
    with pytest.raises(ValueError, match="disk_node"):
        next_fault("disk-full", NODES, random.Random(0))


def test_leader_faults_name_a_role_and_a_fallback_node_then_aim_at_the_holder() -> None:
    faults = [next_fault(n, NODES, random.Random(i), partition_count=3) for i in range(60) for n in LEADER_NEMESES]
    assert {f.role for f in faults} == set(LEADER_ROLES)
    for f in faults:
        assert f.node in NODES
        assert (f.partition in (0, 1, 2)) == (f.role == "partition-leader")
        assert f.action == f.nemesis.removesuffix("-leader").replace("isolate", "partition")
        aimed = aim(f, 3, NODES)
        assert aimed.node == 3 and aimed.role == f.role
        assert aimed.drops == (isolate(NODES, 3) if f.nemesis == "isolate-leader" else frozenset())
        assert aimed.describe()["role"] == f.role


def test_families_expand_to_their_nemeses_once_in_a_fixed_order() -> None:
    assert expand(["leader", "kill", "kill-leader"]) == ("kill", *LEADER_NEMESES)
    assert expand(["all"]) == NEMESES
    assert set(expand(["partition"])) == set(FAMILIES["partition"])
    with pytest.raises(ValueError, match="unknown nemesis"):
        expand(["flood"])


def test_an_unknown_nemesis_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown nemesis"):
        plan_drops("flood", (1, 2, 3), random.Random(0))


# --- overlapping schedules ---------------------------------------------------------------------------
def overlapping(seed: int, nodes: tuple[int, ...] = NODES, limit_s: float = 60.0) -> list[TimedFault]:
    return plan_overlapping(NEMESES, nodes, random.Random(seed), limit_s, disk_node=nodes[1], partition_count=3)


@pytest.mark.parametrize("nodes", [(1, 2, 3), NODES])
def test_overlapping_faults_never_conflict_on_a_node_and_keep_a_majority_up(nodes: tuple[int, ...]) -> None:
    for seed in range(30):
        plan = overlapping(seed, nodes)
        for t in plan:
            on = [u for u in plan if u is not t and u.start_s <= t.start_s < u.end_s]
            assert not any(conflicts(t.fault, u.fault) for u in on), (seed, t, on)
            node_faults = [u for u in (*on, t) if u.fault.action in NODE_ACTIONS]
            assert len(node_faults) <= max_node_faults(nodes)
            assert len({u.fault.node for u in node_faults}) == len(node_faults)  # one node fault per node


def test_overlapping_faults_do_overlap_a_partition_with_a_kill_and_a_pause() -> None:
    pairs: set[tuple[str, str]] = set()
    for seed in range(30):
        plan = overlapping(seed, (1, 2, 3))
        for t in plan:
            for u in plan:
                if t.fault.action == "partition" and u.start_s < t.end_s and t.start_s < u.end_s and u is not t:
                    pairs.add((t.fault.action, u.fault.action))
    assert {("partition", "kill"), ("partition", "pause")} <= pairs


def test_every_overlapping_fault_ends_and_every_nemesis_starts() -> None:
    for seed in range(30):
        plan = overlapping(seed, limit_s=5.0)  # shorter than a round: the plan goes on until each has run
        assert {t.fault.nemesis for t in plan} == set(NEMESES)
        assert all(0 < t.start_s < t.end_s for t in plan)
        assert [t.start_s for t in plan] == sorted(t.start_s for t in plan)
        assert sorted(t.fault_id for t in plan) == list(range(1, len(plan) + 1))


def test_the_same_seed_replays_the_same_overlapping_schedule() -> None:
    assert overlapping(11) == overlapping(11)
    assert overlapping(11) != overlapping(12)


def test_a_leader_fault_falls_back_to_its_planned_node_when_the_holder_is_busy() -> None:
    fault = next_fault("kill-leader", NODES, random.Random(1), role="raft-leader")
    planned = fault.node
    busy_holder = next(n for n in NODES if n != planned)
    assert aim_free(fault, busy_holder, [busy_holder], NODES).node == planned
    assert aim_free(fault, busy_holder, [], NODES).node == busy_holder
    assert aim_free(fault, None, [], NODES).node == planned


def test_a_disk_full_node_may_be_down_at_its_heal_and_only_it() -> None:
    # seed 105's finding: the filled node's Raft log stalled, the node shut itself down (as a Kafka broker
    # does when its metadata log directory fails), and the heal counted it as a node dead on its own.
    disk_full = next_fault("disk-full", NODES, random.Random(105), disk_node=3)
    assert may_leave_down(disk_full) == {3}
    assert may_leave_down(next_fault("kill", NODES, random.Random(1))) == {
        next_fault("kill", NODES, random.Random(1)).node
    }
    for nemesis in ("pause", "lose-tail", "isolate"):
        assert may_leave_down(next_fault(nemesis, NODES, random.Random(1))) == frozenset()
