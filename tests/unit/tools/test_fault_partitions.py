"""The partition planner (tools/faults/partitions.py): specs -> directed drops -> nft scripts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.tools.faults.partitions import (
    CLIENT,
    TABLE,
    bridge,
    cut_clients,
    heal,
    hears,
    isolate,
    majority_split,
    nft_scripts,
    one_way,
    ring,
    split,
)

clusters = st.integers(min_value=3, max_value=9).map(lambda n: tuple(range(1, n + 1)))


def symmetric(drops: frozenset[tuple[int, int]]) -> bool:
    return all((b, a) in drops for a, b in drops)


@given(clusters, st.data())
def test_a_majority_split_leaves_exactly_one_side_with_a_majority(nodes, data) -> None:
    size = data.draw(st.integers(min_value=1, max_value=(len(nodes) - 1) // 2))
    minority = data.draw(st.permutations(nodes)).__getitem__(slice(size))
    drops = majority_split(nodes, minority)
    views = {hears(drops, nodes, n) for n in nodes}
    assert len(views) == 2 and symmetric(drops)
    assert sum(2 * len(v) > len(nodes) for v in views) == 1
    assert frozenset(minority) in views


@given(clusters)
def test_a_bridge_s_middle_node_hears_all_and_the_halves_not_each_other(nodes) -> None:
    drops = bridge(nodes)
    middle = nodes[len(nodes) // 2]
    assert hears(drops, nodes, middle) == frozenset(nodes)
    assert symmetric(drops)
    halves = {frozenset(nodes[: len(nodes) // 2 + 1]), frozenset(nodes[len(nodes) // 2 :])}
    assert {hears(drops, nodes, n) for n in nodes if n != middle} == halves


@given(clusters)
def test_in_a_ring_each_node_hears_only_its_neighbours(nodes) -> None:
    drops = ring(nodes)
    count = len(nodes)
    for i, n in enumerate(nodes):
        assert hears(drops, nodes, n) == {n, nodes[i - 1], nodes[(i + 1) % count]}
    assert symmetric(drops)


def test_a_ring_of_three_cuts_nothing() -> None:
    assert ring((1, 2, 3)) == frozenset()


@given(clusters, st.data())
def test_isolating_a_node_cuts_it_from_everyone_both_ways(nodes, data) -> None:
    members = (CLIENT, *nodes)
    node = data.draw(st.sampled_from(nodes))
    drops = isolate(members, node)
    assert hears(drops, members, node) == {node}
    assert all(hears(drops, members, m) == frozenset(members) - {node} for m in members if m != node)
    assert symmetric(drops)


def test_one_way_drops_one_direction_only() -> None:
    assert one_way(1, 2) == {(1, 2)}
    assert not symmetric(one_way(1, 2))
    with pytest.raises(ValueError):
        one_way(2, 2)


def test_heal_is_empty_and_removes_the_run_s_table() -> None:
    assert heal() == frozenset()
    scripts = nft_scripts(heal(), {1: "10.0.0.11", 2: "10.0.0.12"})
    for script in scripts.values():
        assert script == f"table inet {TABLE}\ndelete table inet {TABLE}\n"


def test_nft_scripts_drop_at_the_receiver() -> None:
    scripts = nft_scripts(split([[1], [2, 3]]), {1: "10.0.0.11", 2: "10.0.0.12", 3: "10.0.0.13"})
    assert "ip saddr { 10.0.0.12, 10.0.0.13 } drop" in scripts[1]
    assert "ip saddr { 10.0.0.11 } drop" in scripts[2]
    assert "hook input" in scripts[3] and "hook output" not in scripts[3]


def test_bad_specs_say_why() -> None:
    with pytest.raises(ValueError, match="minority"):
        majority_split((1, 2, 3, 4), (1, 2))
    with pytest.raises(ValueError, match="not one of"):
        isolate((1, 2, 3), 7)
    with pytest.raises(ValueError, match="3 nodes"):
        bridge((1, 2))


def test_clients_cut_from_some_nodes_keep_the_others_and_the_nodes_keep_each_other() -> None:
    drops = cut_clients((1, 2, 3), [2])
    assert drops == {(CLIENT, 2), (2, CLIENT)}
    assert hears(drops, (CLIENT, 1, 2, 3), CLIENT) == {CLIENT, 1, 3}
    assert hears(drops, (CLIENT, 1, 2, 3), 2) == {1, 2, 3}
    with pytest.raises(ValueError):
        cut_clients((1, 2, 3), [])
    with pytest.raises(ValueError):
        cut_clients((1, 2, 3), [1, 2, 3])  # clients cut from every node is no partition of the cluster


def test_a_client_partition_puts_rules_in_the_client_namespace_and_the_cut_node() -> None:
    addresses = {CLIENT: "10.0.0.2", 1: "10.0.0.11", 2: "10.0.0.12", 3: "10.0.0.13"}
    scripts = nft_scripts(cut_clients((1, 2, 3), [2]), addresses)
    assert "ip saddr { 10.0.0.12 } drop" in scripts[CLIENT]
    assert "ip saddr { 10.0.0.2 } drop" in scripts[2]
    assert "drop" not in scripts[1] and "drop" not in scripts[3]


def test_the_client_nemeses_cut_only_client_links() -> None:
    import random

    from kraftpy.tools.faults.schedule import aim, expand, next_fault

    assert expand(["client"]) == ("client-partition", "client-partition-leader")
    for seed in range(20):
        fault = next_fault("client-partition", (1, 2, 3, 4, 5), random.Random(seed))
        assert fault.drops and all(CLIENT in pair for pair in fault.drops)
        assert 1 <= len(fault.drops) // 2 <= 2
    leader = next_fault("client-partition-leader", (1, 2, 3), random.Random(1), partition_count=3)
    assert leader.role == "partition-leader" and leader.partition is not None
    assert aim(leader, 3, (1, 2, 3)).drops == {(CLIENT, 3), (3, CLIENT)}
