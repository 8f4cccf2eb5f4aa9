"""GroupMetadata's own bookkeeping: leadership, static members and the group's rebalance timeout."""

from __future__ import annotations

from kraftpy.broker.groups.group import GroupMetadata, MemberMetadata


def member(member_id: str, *, instance: str | None = None, rebalance_ms: int = 30_000) -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance_ms,
        session_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
    )


def test_the_leader_leaving_hands_leadership_to_the_next_member_in_join_order() -> None:
    group = GroupMetadata("g", 0)
    for mid in ("a", "b", "c"):
        group.add(member(mid))
    assert group.leader_id == "a"
    group.remove("b")  # not the leader: nothing changes
    assert group.leader_id == "a"
    group.remove("a")
    assert group.leader_id == "c"
    group.remove("c")
    assert group.leader_id is None


def test_a_static_member_leaving_frees_its_instance_id() -> None:
    group = GroupMetadata("g", 0)
    group.add(member("a", instance="i-a"))
    group.add(member("b", instance="i-b"))
    group.remove("a")
    assert group.static_members == {"i-b": "b"}
    assert group.current_static_member_id("i-a") is None


def test_a_replaced_static_member_keeps_its_place_and_its_instance_maps_to_the_new_id() -> None:
    group = GroupMetadata("g", 0)
    group.add(member("a", instance="i-a"))
    group.add(member("b"))
    group.replace_static_member("i-a", "a", "a2")
    assert list(group.members) == ["a2", "b"] and group.leader_id == "a2"
    assert group.static_members == {"i-a": "a2"}


def test_the_group_waits_as_long_as_its_most_patient_member() -> None:
    """Kafka's rebalanceTimeoutMs: the largest of the members' rebalance timeouts."""
    group = GroupMetadata("g", 0)
    assert group.rebalance_timeout_ms() == 0
    group.add(member("a", rebalance_ms=10_000))
    group.add(member("b", rebalance_ms=60_000))
    group.add(member("c", rebalance_ms=20_000))
    assert group.rebalance_timeout_ms() == 60_000
