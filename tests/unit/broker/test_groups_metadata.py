"""GroupMetadata's own bookkeeping: leadership, static members and the group's rebalance timeout."""

from __future__ import annotations

from kraftpy.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from kraftpy.protocol.consumer_protocol import Subscription, encode_subscription
from kraftpy.protocol.types import TopicPartition


def member(
    member_id: str,
    *,
    instance: str | None = None,
    rebalance_ms: int = 30_000,
    protocol_type: str = "consumer",
    topics: tuple[str, ...] = ("t",),
) -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance_ms,
        session_timeout_ms=10_000,
        protocol_type=protocol_type,
        protocols=(("range", encode_subscription(Subscription(topics))),),
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


def test_a_rejoined_leader_stays_leader_else_the_first_member_that_rejoined_leads() -> None:
    group = GroupMetadata("g", 0)
    for mid in ("a", "b", "c"):
        group.add(member(mid))
    group.leader_id = "b"
    group.members["a"].awaiting_join = "join-a"
    group.members["b"].awaiting_join = "join-b"
    assert group.maybe_elect_new_joined_leader() and group.leader_id == "b"  # b rejoined: kept
    group.members["b"].awaiting_join = None
    group.members["c"].awaiting_join = "join-c"
    assert group.maybe_elect_new_joined_leader() and group.leader_id == "a"  # b did not: the first that did
    for m in group.members.values():
        m.awaiting_join = None
    assert not group.maybe_elect_new_joined_leader() and group.leader_id == "a"  # nobody rejoined


def test_subscribed_topics_are_known_only_for_a_consumer_group_with_a_protocol() -> None:
    consumers = GroupMetadata("g", 0)
    consumers.add(member("a", topics=("t1",)))
    consumers.add(member("b", topics=("t2",)))
    assert consumers.compute_subscribed_topics() is None  # no protocol chosen yet
    consumers.protocol_name = "range"
    assert consumers.compute_subscribed_topics() == frozenset({"t1", "t2"})
    connect = GroupMetadata("w", 0)
    connect.add(member("a", protocol_type="connect"))
    connect.protocol_name = "range"
    assert connect.compute_subscribed_topics() is None  # not the consumer protocol: its bytes mean nothing to us


def test_concurrent_commits_of_one_partition_stay_unstable_until_the_last_completes() -> None:
    group = GroupMetadata("g", 0)
    tp = TopicPartition("t", 0)
    group.add_pending_commits([tp])
    group.add_pending_commits([tp])
    group.complete_pending_commits([tp])
    assert group.has_unstable_offset(tp) and group.has_offsets()
    group.complete_pending_commits([tp])
    assert not group.has_unstable_offset(tp) and not group.has_offsets()


def test_a_stored_group_loads_back_with_its_subscriptions_and_static_members() -> None:
    group = GroupMetadata("g", 0)
    group.add(member("a", instance="i-a", topics=("t1",)))
    group.add(member("b", topics=("t2",)))
    group.protocol_name, group.generation_id = "range", 4
    loaded = GroupMetadata.from_record("g", 0, group.metadata_value())
    assert loaded.state is GroupState.STABLE and loaded.leader_id == "a" and loaded.generation_id == 4
    assert loaded.static_members == {"i-a": "a"}
    assert loaded.members["b"].metadata("range") == group.members["b"].metadata("range")
    assert loaded.compute_subscribed_topics() == frozenset({"t1", "t2"})
