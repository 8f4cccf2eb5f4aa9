"""Offset commits and fetches: who may commit when, metadata limits, durability before visibility, expiry."""

from __future__ import annotations

from kraftpy.broker.groups import GroupCoordinatorConfig, GroupState
from kraftpy.broker.groups.loader import replay
from kraftpy.protocol.consumer_protocol import Subscription, encode_subscription
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import SESSION, Harness

E = ErrorCode
DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS


def test_a_simple_commit_creates_an_offsets_only_group_and_fetch_returns_it() -> None:
    h = Harness()
    rid = h.commit({("t", 0): 42, ("t", 1): 7}, group="simple", metadata="note")
    assert h.commit_codes(rid) == {("t", 0): 0, ("t", 1): 0}
    assert h.fetch("simple") == {("t", 0): 42, ("t", 1): 7}
    assert h.fetch("simple", [("t", 0), ("t", 5)]) == {("t", 0): 42, ("t", 5): -1}
    body = h.call("offset_fetch", {"group_id": "simple", "topics": [{"name": "t", "partition_indexes": [0]}]})
    assert body["topics"][0]["partitions"][0]["metadata"] == "note"
    group = h.c.group("simple")
    assert group.state is GroupState.EMPTY and group.protocol_type is None


def test_a_fetch_for_an_unknown_group_answers_no_offsets() -> None:
    h = Harness()
    assert h.fetch("nobody") == {}
    assert h.fetch("nobody", [("t", 0)]) == {("t", 0): -1}
    assert h.c.group("nobody") is None


def test_members_commit_with_their_generation_and_others_are_refused() -> None:
    h = Harness()
    (a, _b), gen = h.form_group(2)
    assert h.commit_codes(h.commit({("t", 0): 5}, member_id=a, generation=gen)) == {("t", 0): 0}
    assert h.commit_codes(h.commit({("t", 0): 6})) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # not a member
    assert h.commit_codes(h.commit({("t", 0): 6}, member_id="x", generation=gen)) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit_codes(h.commit({("t", 0): 6}, member_id=a, generation=gen + 5)) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit_codes(h.commit({("t", 0): 6}, group="gone", member_id=a, generation=1)) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert h.fetch() == {("t", 0): 5}


def test_generation_zero_is_a_generation_not_an_admin_commit() -> None:
    """Only generation -1 (an admin client, a consumer without group management) commits outside
    the group's membership; 0 is a generation like any other (Kafka's generationId >= 0 checks)."""
    h = Harness()
    unknown = h.commit({("t", 0): 3}, group="fresh", generation=0)
    assert h.commit_codes(unknown) == {("t", 0): E.ILLEGAL_GENERATION}  # no such group: not created
    assert h.c.group("fresh") is None
    assert h.commit_codes(h.commit({("t", 0): 4}, group="empty")) == {("t", 0): 0}  # -1: creates it, empty
    assert h.commit_codes(h.commit({("t", 0): 5}, group="empty", generation=0)) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.fetch("empty") == {("t", 0): 4}


def test_commits_are_allowed_while_preparing_a_rebalance_but_not_while_completing_it() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    h.join(member_id=a)  # the leader rejoins; b learns of the rebalance, revokes and commits first
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert h.commit_codes(h.commit({("t", 0): 10}, member_id=b, generation=gen)) == {("t", 0): 0}
    h.join(member_id=b)
    assert h.c.group("g").state is GroupState.COMPLETING_REBALANCE
    codes = h.commit_codes(h.commit({("t", 0): 11}, member_id=b, generation=gen + 1))
    assert codes == {("t", 0): E.REBALANCE_IN_PROGRESS}
    assert h.fetch() == {("t", 0): 10}


def test_a_members_commit_keeps_its_session_alive() -> None:
    h = Harness()
    (a,), gen = h.form_group(1)
    for _ in range(3):
        h.advance(SESSION - 1)
        h.commit({("t", 0): 1}, member_id=a, generation=gen)
    assert a in h.c.group("g").members


def test_too_large_metadata_fails_only_that_partition() -> None:
    h = Harness(GroupCoordinatorConfig(offset_metadata_max_bytes=8, offsets_topic_num_partitions=4))
    body = {
        "group_id": "g",
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": "x" * 9},
                    {"partition_index": 1, "committed_offset": 2, "committed_metadata": "x" * 8},
                ],
            }
        ],
    }
    answer = h.call("offset_commit", body)
    codes = {p["partition_index"]: p["error_code"] for p in answer["topics"][0]["partitions"]}
    assert codes == {0: E.OFFSET_METADATA_TOO_LARGE, 1: 0}
    assert h.fetch() == {("t", 1): 2}


def test_offsets_become_visible_only_after_their_write_and_a_failed_write_changes_nothing() -> None:
    h = Harness(auto_complete=False)
    rid = h.commit({("t", 0): 5})
    assert rid not in h.answers and h.fetch() == {}
    body = h.call(
        "offset_fetch", {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": True}
    )
    assert body["topics"][0]["partitions"][0]["error_code"] == E.UNSTABLE_OFFSET_COMMIT
    h.complete_appends()
    assert h.commit_codes(rid) == {("t", 0): 0} and h.fetch() == {("t", 0): 5}
    rid = h.commit({("t", 0): 9})
    h.complete_appends(E.NOT_LEADER_OR_FOLLOWER)
    assert h.commit_codes(rid) == {("t", 0): E.NOT_COORDINATOR}
    rid = h.commit({("t", 0): 9})
    h.complete_appends(E.MESSAGE_TOO_LARGE)
    assert h.commit_codes(rid) == {("t", 0): E.INVALID_COMMIT_OFFSET_SIZE}
    assert h.fetch() == {("t", 0): 5}


def test_offsets_can_be_reset_for_a_group_with_no_active_members_only() -> None:
    h = Harness()
    (a,), gen = h.form_group(1)
    h.commit({("t", 0): 100}, member_id=a, generation=gen)
    assert h.commit_codes(h.commit({("t", 0): 0})) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    h.leave(a)
    assert h.c.group("g").state is GroupState.EMPTY
    assert h.commit_codes(h.commit({("t", 0): 0})) == {("t", 0): 0}  # what `groups reset-offsets --execute` does
    assert h.fetch() == {("t", 0): 0}


def test_offsets_of_an_empty_group_expire_after_the_retention_counted_from_when_it_emptied() -> None:
    h2 = Harness()  # the default retention: 7 days
    (a,), gen = h2.form_group(1)
    h2.commit({("t", 0): 5}, member_id=a, generation=gen)
    for _ in range(20):  # active for a while: that time does not count
        h2.advance(SESSION // 2)
        h2.heartbeat(a, gen)
    h2.leave(a)
    emptied = h2.now
    h2.advance(WEEK_MS - 1 - (h2.now - emptied))
    h2.apply(h2.c.cleanup_group_metadata(h2.now))
    assert h2.fetch() == {("t", 0): 5}
    h2.advance(1)
    h2.apply(h2.c.cleanup_group_metadata(h2.now))
    assert h2.fetch() == {}
    assert h2.c.group("g") is None  # no members, no offsets: the group goes too
    assert replay(h2.log[h2.c.partition_for("g")]) == {}  # tombstones for the offset and the group


def test_the_expiry_timer_runs_every_check_interval() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4, offsets_retention_minutes=1))
    h.commit({("t", 0): 5}, group="simple")
    h.advance(60_000)
    assert h.fetch("simple") == {("t", 0): 5}  # retention passed, but no check ran yet
    h.advance(600_000 - 60_000)
    assert h.fetch("simple") == {}


def test_a_stable_consumer_group_expires_only_offsets_of_topics_it_no_longer_reads() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4, offsets_retention_minutes=1))
    (a,), gen = h.form_group(1, session=60_000)  # subscribed to "t"
    h.commit({("t", 0): 1, ("old", 0): 2}, member_id=a, generation=gen)
    for _ in range(2):
        h.advance(30_000)
        h.heartbeat(a, gen)
    h.apply(h.c.cleanup_group_metadata(h.now))
    assert h.fetch() == {("t", 0): 1}


def test_a_group_whose_subscriptions_cannot_be_read_keeps_its_offsets() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4, offsets_retention_minutes=1))
    protos = [{"name": "range", "metadata": b"not cbor"}]
    (a,), gen = h.form_group(1, protos=protos, session=60_000)
    assert h.c.group("g").subscribed_topics is None
    h.commit({("old", 0): 2}, member_id=a, generation=gen)
    h.advance(30_000)
    h.heartbeat(a, gen)
    h.advance(30_000)
    h.apply(h.c.cleanup_group_metadata(h.now))
    assert h.fetch() == {("old", 0): 2}
    assert encode_subscription(Subscription(("t",)))  # the harness's members do use the real encoding


def test_the_commit_any_generation_broken_build_stores_a_stale_generations_commit() -> None:
    """The fault runs' broken build (KRAFTPY_TEST_BREAK=commit-any-generation) must really be broken."""
    h = Harness(GroupCoordinatorConfig(test_break_commit_any_generation=True))
    (a, _b), gen = h.form_group(2)
    assert h.commit_codes(h.commit({("t", 0): 6}, member_id=a, generation=gen - 1)) == {("t", 0): 0}
    assert h.commit_codes(h.commit({("t", 0): 2}, member_id="zombie", generation=gen - 1)) == {("t", 0): 0}
    assert h.fetch() == {("t", 0): 2}
