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
    Schedule,
    aim,
    expand,
    next_fault,
    plan_drops,
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
