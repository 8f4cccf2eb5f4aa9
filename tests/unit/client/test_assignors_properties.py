"""Assignor properties (hypothesis): coverage, balance, stickiness, and cooperative-sticky's two phases."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.client.group.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    partitions_transferring_ownership,
)
from kraftpy.client.group.assignors.sticky import MemberData, sticky_assign
from kraftpy.protocol.consumer_protocol import Assignment, Subscription
from kraftpy.protocol.types import TopicPartition

TOPICS = ["a", "b", "c"]


@st.composite
def groups(draw, same_subscriptions: bool | None = None, max_members: int = 6):
    """(partitions_per_topic, {member: Subscription}); some subscribed topics may be missing from metadata."""
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS if draw(st.booleans())} or {"a": draw(st.integers(1, 9))}
    n = draw(st.integers(1, max_members))
    same = draw(st.booleans()) if same_subscriptions is None else same_subscriptions
    known = sorted(counts)
    topic_sets = st.sets(st.sampled_from([*known, "unknown"]), min_size=1).map(lambda s: tuple(sorted(s)))
    shared = draw(topic_sets)
    subscriptions = {}
    for i in range(n):
        topics = shared if same else draw(topic_sets)
        instance = f"instance-{draw(st.integers(0, 99))}" if draw(st.booleans()) else None
        subscriptions[f"member-{i:02d}"] = Subscription(topics, group_instance_id=instance)
    # Static instance ids are unique within a group.
    seen: set[str] = set()
    for member, sub in list(subscriptions.items()):
        if sub.group_instance_id in seen:
            subscriptions[member] = Subscription(sub.topics)
        elif sub.group_instance_id is not None:
            seen.add(sub.group_instance_id)
    return counts, subscriptions


def expected_partitions(counts, subscriptions) -> set[TopicPartition]:
    topics = {t for s in subscriptions.values() for t in s.topics if t in counts}
    return {TopicPartition(t, p) for t in topics for p in range(counts[t])}


def check_complete_and_exclusive(counts, subscriptions, assignment: dict[str, Assignment]) -> None:
    assert set(assignment) == set(subscriptions)
    owners = Counter(tp for a in assignment.values() for tp in a.partitions)
    assert set(owners) == expected_partitions(counts, subscriptions)
    assert all(n == 1 for n in owners.values()), "a partition was assigned twice"
    for member, a in assignment.items():
        assert all(tp.topic in subscriptions[member].topics for tp in a.partitions)


def check_no_balancing_move(subscriptions, assignment: dict[str, Assignment]) -> None:
    """No partition could move to a subscribed member holding two or more fewer (Kafka's isBalanced)."""
    size = {m: len(a.partitions) for m, a in assignment.items()}
    for donor, a in assignment.items():
        for tp in a.partitions:
            for taker, sub in subscriptions.items():
                assert not (tp.topic in sub.topics and size[donor] - size[taker] >= 2), (tp, donor, taker, size)


def within_one(assignment: dict[str, Assignment]) -> bool:
    sizes = [len(a.partitions) for a in assignment.values()]
    return max(sizes) - min(sizes) <= 1


ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@settings(max_examples=150, deadline=None)
@given(groups())
def test_every_subscribed_partition_is_assigned_exactly_once_to_a_subscriber(group) -> None:
    counts, subscriptions = group
    for cls in ALL:
        check_complete_and_exclusive(counts, subscriptions, cls().assign(counts, subscriptions))


@settings(max_examples=150, deadline=None)
@given(groups())
def test_range_is_balanced_within_one_per_topic_and_hands_out_consecutive_ranges(group) -> None:
    counts, subscriptions = group
    assignment = RangeAssignor().assign(counts, subscriptions)
    for topic in counts:
        subscribers = [m for m, s in subscriptions.items() if topic in s.topics]
        if not subscribers:
            continue
        per_member = {m: [tp.partition for tp in assignment[m].partitions if tp.topic == topic] for m in subscribers}
        sizes = [len(p) for p in per_member.values()]
        assert max(sizes) - min(sizes) <= 1
        assert all(p == list(range(p[0], p[0] + len(p))) for p in per_member.values() if p)


@settings(max_examples=150, deadline=None)
@given(groups(same_subscriptions=True))
def test_with_identical_subscriptions_roundrobin_and_sticky_are_balanced_within_one_overall(group) -> None:
    counts, subscriptions = group
    for cls in (RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor):
        assert within_one(cls().assign(counts, subscriptions)), cls.__name__


@settings(max_examples=150, deadline=None)
@given(groups(same_subscriptions=False))
def test_sticky_leaves_no_balancing_move_with_any_subscriptions(group) -> None:
    counts, subscriptions = group
    check_no_balancing_move(subscriptions, StickyAssignor().assign(counts, subscriptions))


@st.composite
def with_previous(draw, same_subscriptions: bool | None = None):
    """A group plus a previous owner (or none) for each partition, as claims at one generation."""
    counts, subscriptions = draw(groups(same_subscriptions))
    members = sorted(subscriptions)
    claims: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp in sorted(expected_partitions(counts, subscriptions)):
        owner = draw(st.sampled_from([None, *members]))
        if owner is not None:
            claims[owner].append(tp)
    return counts, subscriptions, {m: MemberData(tuple(ps), 3) for m, ps in claims.items()}


def kept(assignment: dict[str, list[TopicPartition]], claims: dict[str, MemberData], subscriptions) -> int:
    return sum(
        1
        for m, ps in assignment.items()
        for tp in ps
        if tp in claims[m].partitions and tp.topic in subscriptions[m].topics
    )


@settings(max_examples=200, deadline=None)
@given(with_previous(same_subscriptions=True))
def test_sticky_keeps_as_many_partitions_as_any_balanced_assignment_could(case) -> None:
    counts, subscriptions, claims = case
    assignment = sticky_assign(counts, subscriptions, claims)
    total = sum(len(p) for p in assignment.values())
    members = len(subscriptions)
    min_quota, extra = divmod(total, members)
    valid_owned = sorted(
        (
            sum(1 for tp in claims[m].partitions if tp.topic in subscriptions[m].topics and tp.topic in counts)
            for m in subscriptions
        ),
        reverse=True,
    )
    best = sum(min(owned, min_quota + (1 if i < extra else 0)) for i, owned in enumerate(valid_owned))
    assert kept(assignment, claims, subscriptions) == best
    sizes = [len(p) for p in assignment.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(with_previous())
def test_sticky_is_stable_once_balanced_and_keeps_every_claim_balance_allows(case) -> None:
    counts, subscriptions, claims = case
    first = sticky_assign(counts, subscriptions, claims)
    again = sticky_assign(counts, subscriptions, {m: MemberData(tuple(ps), 4) for m, ps in first.items()})
    assert again == first  # a balanced assignment is its own sticky answer: nothing moves without cause
    # A claim is lost only by a member that ended up at least as loaded as the one that took it over.
    owner = {tp: m for m, ps in first.items() for tp in ps}
    for member, data in claims.items():
        for tp in data.partitions:
            if tp in owner and owner[tp] != member and tp.topic in subscriptions[member].topics:
                assert len(first[member]) >= len(first[owner[tp]]), (tp, member, owner[tp])


def test_a_stale_claim_loses_to_a_newer_generation_and_a_tie_to_nobody() -> None:
    counts = {"a": 2}
    subscriptions = {"m1": Subscription(("a",)), "m2": Subscription(("a",))}
    tp0, tp1 = TopicPartition("a", 0), TopicPartition("a", 1)
    claims = {"m1": MemberData((tp0, tp1), 5), "m2": MemberData((tp0,), 4)}
    assert sticky_assign(counts, subscriptions, claims) == {"m1": [tp0], "m2": [tp1]} or sticky_assign(
        counts, subscriptions, claims
    ) == {"m1": [tp1], "m2": [tp0]}
    result = sticky_assign(counts, subscriptions, {"m1": MemberData((tp0, tp1), 5), "m2": MemberData((tp1,), 5)})
    assert tp0 in result["m1"]  # tp1 is contested at generation 5: nobody keeps it by right


@st.composite
def cooperative_rounds(draw):
    counts, subscriptions, claims = draw(with_previous())
    # Owned partitions as cooperative members report them: exactly what each holds.
    return counts, {
        m: Subscription(s.topics, owned_partitions=claims[m].partitions, generation_id=3, group_instance_id=None)
        for m, s in subscriptions.items()
    }


MAX_COOPERATIVE_ROUNDS = 4


def run_cooperative_rounds(counts, subscriptions) -> tuple[int, dict]:
    """Rebalance until nothing is held back; check every round's safety. Returns (rounds, final assignment)."""
    assignor = CooperativeStickyAssignor()
    subs = subscriptions
    for rounds in range(1, MAX_COOPERATIVE_ROUNDS + 1):
        result = assignor.assign(counts, subs)
        holder = {tp: m for m, s in subs.items() for tp in s.owned_partitions}
        for member, a in result.items():
            for tp in a.partitions:
                assert holder.get(tp, member) == member, (
                    f"round {rounds}: {tp} given to {member} while {holder[tp]} holds it"
                )
        assert partitions_transferring_ownership(subs, {m: list(a.partitions) for m, a in result.items()}) == set()
        # Owners revoke what they were not given and rejoin with what they kept.
        subs = {
            m: Subscription(s.topics, owned_partitions=result[m].partitions, generation_id=s.generation_id + 1)
            for m, s in subs.items()
        }
        assigned = {tp for a in result.values() for tp in a.partitions}
        if assigned == expected_partitions(counts, subs):
            return rounds, subs
    raise AssertionError(f"cooperative rebalancing did not converge in {MAX_COOPERATIVE_ROUNDS} rounds")


@settings(max_examples=200, deadline=None)
@given(cooperative_rounds())
def test_cooperative_sticky_never_gives_a_partition_to_a_new_owner_while_the_old_one_holds_it(case) -> None:
    """Every round is safe (a partition reaches a new owner only after its holder released it), and the
    rounds converge to a complete, exclusive, balanced assignment. Usually in two rounds; with unequal
    subscriptions the sticky balance can move a partition once more (see the pinned example below)."""
    counts, subscriptions = case
    _, final = run_cooperative_rounds(counts, subscriptions)
    final_assignment = {m: Assignment(s.owned_partitions) for m, s in final.items()}
    check_complete_and_exclusive(counts, final, final_assignment)
    check_no_balancing_move(final, final_assignment)


def test_unequal_subscriptions_can_need_a_third_cooperative_round() -> None:
    """Found by the property above: round 2 places the released c5 on member-00 (a tie with member-01),
    and balancing then moves b4 away from member-00, which cooperative rules hold back for round 3."""
    tp = TopicPartition
    counts = {"a": 0, "b": 5, "c": 6}
    subs = {
        "member-00": Subscription(("a", "b", "c"), owned_partitions=(tp("b", 3), tp("b", 4)), generation_id=3),
        "member-01": Subscription(("a", "b", "c"), generation_id=3),
        "member-02": Subscription(("a",), owned_partitions=(tp("c", 5),), generation_id=3),
        "member-03": Subscription(("a",), generation_id=3),
        "member-04": Subscription(("b",), generation_id=3),
        "member-05": Subscription(("b",), generation_id=3),
    }
    rounds, final = run_cooperative_rounds(counts, subs)
    assert rounds == 3
    final_assignment = {m: Assignment(s.owned_partitions) for m, s in final.items()}
    check_complete_and_exclusive(counts, final, final_assignment)


def test_kafkas_range_example() -> None:
    # Kafka's RangeAssignor javadoc: two consumers, two topics of three partitions each.
    subscriptions = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    assignment = RangeAssignor().assign({"t0": 3, "t1": 3}, subscriptions)
    tps = lambda *pairs: tuple(TopicPartition(t, p) for t, p in pairs)  # noqa: E731
    assert assignment["C0"].partitions == tps(("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1))
    assert assignment["C1"].partitions == tps(("t0", 2), ("t1", 2))
    rr = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subscriptions)
    assert rr["C0"].partitions == tps(("t0", 0), ("t0", 2), ("t1", 1))
    assert rr["C1"].partitions == tps(("t0", 1), ("t1", 0), ("t1", 2))


def test_static_members_keep_their_place_across_a_new_member_id() -> None:
    before = {"z-1": Subscription(("t",), group_instance_id="a"), "b-1": Subscription(("t",), group_instance_id="b")}
    after = {"z-2": Subscription(("t",), group_instance_id="a"), "b-1": Subscription(("t",), group_instance_id="b")}
    for cls in (RangeAssignor, RoundRobinAssignor):
        first, second = cls().assign({"t": 4}, before), cls().assign({"t": 4}, after)
        assert first["z-1"] == second["z-2"] and first["b-1"] == second["b-1"]


def test_the_eager_sticky_assignor_remembers_its_partitions_in_its_user_data() -> None:
    a, b = StickyAssignor(), StickyAssignor()
    assert a.subscription_user_data(frozenset({"t"})) is None
    first = a.assign({"t": 4}, {"m1": Subscription(("t",)), "m2": Subscription(("t",))})
    a.on_assignment(first["m1"], 1)
    b.on_assignment(first["m2"], 1)
    # m3 joins; m1 and m2 revoked everything (eager) but their user data says what they had.
    subscriptions = {
        "m1": Subscription(("t",), user_data=a.subscription_user_data(frozenset({"t"}))),
        "m2": Subscription(("t",), user_data=b.subscription_user_data(frozenset({"t"}))),
        "m3": Subscription(("t",)),
    }
    second = a.assign({"t": 4}, subscriptions)
    assert set(second["m1"].partitions) <= set(first["m1"].partitions)
    assert set(second["m2"].partitions) <= set(first["m2"].partitions)
    assert len(second["m3"].partitions) == 1
    garbage = {"m1": Subscription(("t",), user_data=b"\xff\x00"), "m2": Subscription(("t",))}
    check_complete_and_exclusive({"t": 4}, garbage, a.assign({"t": 4}, garbage))


def test_a_claim_taken_by_a_member_that_fills_up_goes_back_to_its_owner() -> None:
    """Hypothesis's example (session 17): member-02 owned a5-a8; balancing moved a5 to member-03, which
    then filled up with free partitions to 3 while member-02 kept 2. The claim goes back: loads 3/2."""
    sub = {
        "member-00": ("b",), "member-01": ("b",), "member-02": ("a",), "member-03": ("a",),
        "member-04": ("a",), "member-05": ("a", "b"),
    }  # fmt: skip
    subscriptions = {m: Subscription(topics=t) for m, t in sub.items()}
    claims = {m: MemberData((), 3) for m in sub}
    claims["member-02"] = MemberData(tuple(TopicPartition("a", p) for p in (5, 6, 7, 8)), 3)
    claims["member-05"] = MemberData((TopicPartition("b", 0),), 3)
    out = sticky_assign({"a": 9, "b": 1}, subscriptions, claims)
    holder = {tp: m for m, tps in out.items() for tp in tps}
    for tp in claims["member-02"].partitions:  # each claim kept, or lost to a member no more loaded
        assert len(out["member-02"]) >= len(out[holder[tp]]), (tp, out)
    assert len(out["member-02"]) == 3
    loads = [len(out[m]) for m in ("member-02", "member-03", "member-04", "member-05")]
    assert max(loads) - min(loads) <= 1
