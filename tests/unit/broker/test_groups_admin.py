"""ListGroups, DescribeGroups, DeleteGroups, and owning offsets partitions: loading, unloading, NOT_COORDINATOR."""

from __future__ import annotations

import random

import pytest

from kraftpy.broker.groups import GroupCoordinator, GroupCoordinatorConfig, GroupState
from kraftpy.broker.groups.loader import replay
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import SESSION, Harness

E = ErrorCode


def test_list_groups_with_and_without_a_state_filter() -> None:
    h = Harness()
    h.form_group(1, group="active")
    h.commit({("t", 0): 1}, group="simple")
    body = h.call("list_groups", {})
    assert body["error_code"] == 0
    assert body["groups"] == [
        {"group_id": "active", "protocol_type": "consumer", "group_state": "Stable"},
        {"group_id": "simple", "protocol_type": "", "group_state": "Empty"},
    ]
    assert [g["group_id"] for g in h.call("list_groups", {"states_filter": ["empty"]})["groups"]] == ["simple"]
    assert h.call("list_groups", {"states_filter": ["Rebalancing"]})["error_code"] == E.INVALID_REQUEST


def test_describe_shows_members_with_their_assignment_when_stable() -> None:
    h = Harness()
    (a, b), _gen = h.form_group(2)
    [group] = h.call("describe_groups", {"groups": ["g"]})["groups"]
    assert (group["group_state"], group["protocol_type"], group["protocol_data"]) == ("Stable", "consumer", "range")
    assert {m["member_id"]: m["member_assignment"] for m in group["members"]} == {a: a.encode(), b: b.encode()}
    assert all(m["client_id"] == "c" and m["member_metadata"] for m in group["members"])
    h.join(member_id=a)
    [group] = h.call("describe_groups", {"groups": ["g"]})["groups"]
    assert group["group_state"] == "PreparingRebalance" and group["protocol_data"] == ""
    assert all(m["member_assignment"] == b"" for m in group["members"])
    [unknown] = h.call("describe_groups", {"groups": ["nope"]})["groups"]
    assert (unknown["error_code"], unknown["group_state"], unknown["members"]) == (0, "Dead", [])


def test_delete_groups_deletes_only_empty_groups_and_writes_tombstones() -> None:
    h = Harness()
    h.form_group(1, group="busy")
    h.commit({("t", 0): 1, ("t", 1): 2}, group="idle")
    body = h.call("delete_groups", {"groups_names": ["busy", "idle", "missing"]})
    codes = {r["group_id"]: r["error_code"] for r in body["results"]}
    assert codes == {"busy": E.NON_EMPTY_GROUP, "idle": 0, "missing": E.GROUP_ID_NOT_FOUND}
    assert h.c.group("idle") is None and h.fetch("idle") == {}
    assert "idle" not in replay(h.log[h.c.partition_for("idle")])


def test_delete_answers_after_the_tombstones_are_written() -> None:
    h = Harness(auto_complete=False)
    h.commit({("t", 0): 1}, group="idle")
    h.complete_appends()
    rid = h.send("delete_groups", {"groups_names": ["idle"]})
    assert rid not in h.answers
    h.complete_appends(E.NOT_ENOUGH_REPLICAS)
    assert h.answers[rid]["results"][0]["error_code"] == E.COORDINATOR_NOT_AVAILABLE


def test_a_commit_in_flight_when_its_group_is_deleted_is_deleted_too_in_memory_as_in_the_log() -> None:
    h = Harness(auto_complete=False)
    h.commit({("t", 0): 1}, group="idle")
    h.complete_appends()
    late = h.commit({("t", 5): 2}, group="idle")  # a partition the group had no offset for yet
    h.send("delete_groups", {"groups_names": ["idle"]})
    h.complete_appends()
    assert h.commit_codes(late) == {("t", 5): 0}
    assert "idle" not in replay(h.log[h.c.partition_for("idle")])
    assert h.c.group("idle") is None and h.fetch("idle") == {}


def test_groups_of_partitions_not_led_here_are_not_coordinator_and_loading_ones_are_in_progress() -> None:
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=4)
    c = GroupCoordinator(config, rng=random.Random(0))
    p = c.partition_for("g")
    body = {"group_id": "g", "session_timeout_ms": SESSION, "protocol_type": "consumer", "protocols": []}
    [answer] = c.handle(1, "join_group", body, 0)
    assert answer.body["error_code"] == E.NOT_COORDINATOR
    c.begin_loading(p)
    [answer] = c.handle(2, "heartbeat", {"group_id": "g", "member_id": "m", "generation_id": 1}, 0)
    assert answer.body["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    [answer] = c.handle(3, "list_groups", {}, 0)
    assert answer.body["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.complete_loading(p, [], 0) == []
    [answer] = c.handle(4, "offset_fetch", {"group_id": "g"}, 0)
    assert answer.body["error_code"] == 0


@pytest.mark.parametrize("loading", [False, True])
def test_offset_delete_where_the_group_is_not_coordinated_says_so(loading: bool) -> None:
    # Found by tests/integration/test_edge_hostile_bodies.py: the error path answered UNKNOWN_SERVER_ERROR.
    c = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=4), rng=random.Random(0))
    if loading:
        c.begin_loading(c.partition_for("g"))
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    [answer] = c.handle(1, "offset_delete", body, 0)
    expected = E.COORDINATOR_LOAD_IN_PROGRESS if loading else E.NOT_COORDINATOR
    assert (answer.body["error_code"], answer.body["topics"]) == (expected, [])
    assert "__consumer_offsets-" in answer.body["message"]


def test_unloading_answers_waiting_members_not_coordinator_and_forgets_the_groups() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    ja = h.join(member_id=a)
    p = h.c.partition_for("g")
    h.apply(h.c.unload(p, h.now))
    assert h.answers[ja]["error_code"] == E.NOT_COORDINATOR
    assert h.c.group("g") is None
    assert h.heartbeat(b, gen) == E.NOT_COORDINATOR
    assert h.c.next_deadline_ms() is None or h.c.next_deadline_ms() > h.now  # no timers of the group remain


def test_loading_replays_the_log_into_stable_groups_whose_members_then_need_heartbeats() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    h.commit({("t", 0): 11}, member_id=a, generation=gen)
    p = h.c.partition_for("g")
    log = list(h.log[p])
    h.apply(h.c.unload(p, h.now))
    h.c.begin_loading(p)
    h.apply(h.c.complete_loading(p, log, h.now))
    group = h.c.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == gen and group.leader_id == a
    assert h.fetch() == {("t", 0): 11}
    assert h.heartbeat(a, gen) == E.NONE
    assert h.answers[h.sync(b, gen)]["assignment"] == b.encode()
    h.advance(SESSION)  # b never heartbeats to the new coordinator
    assert b not in h.c.group("g").members


def test_an_unreadable_record_is_skipped_and_the_load_completes() -> None:
    c = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    c.begin_loading(0)
    c.complete_loading(0, [(b"\xff\xff", b"")], 0)
    assert c.partition_status(0).value == "active"


def test_loading_a_partition_twice_is_a_shell_bug() -> None:
    c = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=2))
    c.complete_loading(0, [], 0)
    with pytest.raises(ValueError, match="__consumer_offsets-0 is already loaded; unload it first"):
        c.begin_loading(0)
    with pytest.raises(ValueError, match="partition 7 is not one of the 2 offsets partitions"):
        c.begin_loading(7)


def _delete_offsets(h: Harness, group: str, partitions: list[tuple[str, int]]) -> dict:
    topics: dict[str, list[dict]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append({"partition_index": p})
    return h.call(
        "offset_delete", {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    )


def _codes(answer: dict) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}


def test_offset_delete_of_an_empty_group_writes_tombstones() -> None:
    h = Harness()
    h.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, group="idle")
    answer = _delete_offsets(h, "idle", [("t", 0), ("u", 0), ("v", 9)])
    assert answer["error_code"] == 0
    assert _codes(answer) == {("t", 0): 0, ("u", 0): 0, ("v", 9): 0}  # nothing committed: nothing to do, as Kafka
    assert h.fetch("idle") == {("t", 1): 2}
    replayed = replay(h.log[h.c.partition_for("idle")])
    assert {(tp.topic, tp.partition) for tp in replayed["idle"].offsets} == {("t", 1)}  # a replay agrees


def test_offset_delete_refuses_topics_a_consumer_group_reads() -> None:
    h = Harness()
    (member,), generation = h.form_group(1, group="busy")  # subscribed to topic "t"
    h.commit({("t", 0): 1, ("gone", 0): 5}, group="busy", member_id=member, generation=generation)
    answer = _delete_offsets(h, "busy", [("t", 0), ("gone", 0)])
    assert (answer["error_code"], _codes(answer)) == (0, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("gone", 0): 0})
    assert h.fetch("busy") == {("t", 0): 1}
    assert _delete_offsets(h, "missing", [("t", 0)])["error_code"] == E.GROUP_ID_NOT_FOUND


def test_offset_delete_answers_after_the_tombstones_are_written() -> None:
    h = Harness(auto_complete=False)
    h.commit({("t", 0): 1}, group="idle")
    h.complete_appends()
    rid = h.send(
        "offset_delete", {"group_id": "idle", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    )
    assert h.answer(rid) is None
    h.complete_appends(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert _codes(h.answers[rid]) == {("t", 0): E.NOT_COORDINATOR}
    assert h.c.group("idle").offsets  # a failed write deletes nothing
