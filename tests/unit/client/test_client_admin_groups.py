"""AdminClient consumer-group calls: bodies, answer parsing, and finding the coordinator again.

The parsing tests feed answers shaped as the coordinator's (docs/protocol.md,
Groups). The retry tests run the AdminClient against two Kafka listeners on
127.0.0.1 whose coordinators' answers are scripted (scripted_broker.py), because a real cluster cannot be
made to answer NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE on cue; the
real cluster is exercised in tests/integration/test_groups_cli.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraftpy.client.admin import protocol as proto
from kraftpy.client.admin.types import (
    AdminOperationError,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListConsumerGroupsResult,
)
from kraftpy.client.errors import KafkaTimeoutError
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.client.shell.admin import AdminClient
from kraftpy.protocol.consumer_protocol import Assignment, encode_assignment
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.scripted_broker import ScriptedBroker, scripted_brokers

E = ErrorCode
TP = TopicPartition


def member(member_id: str, partitions: list[TopicPartition], client_id: str = "c") -> dict[str, Any]:
    return {
        "member_id": member_id,
        "group_instance_id": None,
        "client_id": client_id,
        "client_host": "/127.0.0.1",
        "member_metadata": b"",
        "member_assignment": encode_assignment(Assignment(tuple(partitions))),
    }


def describe_answer(group: str, state: str = "Stable", members: list[dict] | None = None, code: int = 0) -> dict:
    return {
        "error_code": 0,
        "groups": [
            {
                "error_code": code,
                "group_id": group,
                "group_state": state,
                "protocol_type": "consumer",
                "protocol_data": "range" if state == "Stable" else "",
                "members": members or [],
            }
        ],
    }


# --- parsing ----------------------------------------------------------------------------------------------


def test_describe_decodes_each_members_assignment() -> None:
    answer = describe_answer("g", members=[member("m2", [TP("t", 1), TP("t", 0)]), member("m1", [TP("u", 0)])])
    described = proto.parse_describe_group(answer, "g", coordinator=2)
    assert isinstance(described, ConsumerGroupDescription)
    assert described.state == "Stable" and described.partition_assignor == "range" and described.coordinator == 2
    assert [(m.member_id, m.assignment) for m in described.members] == [
        ("m2", (TP("t", 0), TP("t", 1))),
        ("m1", (TP("u", 0),)),
    ]
    assert described.members[0].host == "/127.0.0.1" and described.exists


def test_describe_of_an_unknown_group_is_dead_and_a_group_error_is_returned_not_raised() -> None:
    dead = proto.parse_describe_group(describe_answer("g", state="Dead"), "g")
    assert isinstance(dead, ConsumerGroupDescription) and not dead.exists and dead.members == ()
    failed = proto.parse_describe_group(describe_answer("g", code=int(E.INVALID_GROUP_ID)), "g")
    assert isinstance(failed, KafkaError) and failed.code is E.INVALID_GROUP_ID


def test_describe_refuses_other_protocols_and_assignments_that_do_not_decode() -> None:
    answer = describe_answer("g", members=[member("m", [])])
    answer["groups"][0]["protocol_type"] = "connect"
    assert isinstance(proto.parse_describe_group(answer, "g"), KafkaError)
    broken = describe_answer("g", members=[{**member("m", []), "member_assignment": b"\xff\x00"}])
    error = proto.parse_describe_group(broken, "g")
    assert isinstance(error, KafkaError) and error.code is E.INCONSISTENT_GROUP_PROTOCOL
    missing = proto.parse_describe_group(describe_answer("other"), "g")
    assert isinstance(missing, KafkaError) and missing.code is E.CORRUPT_MESSAGE


def test_list_keeps_consumer_groups_only_and_merges_brokers() -> None:
    a = proto.parse_list_groups(
        {
            "error_code": 0,
            "groups": [
                {"group_id": "b", "protocol_type": "consumer", "group_state": "Stable"},
                {"group_id": "offsets-only", "protocol_type": "", "group_state": "Empty"},
                {"group_id": "worker", "protocol_type": "connect", "group_state": "Stable"},
            ],
        }
    )
    b = proto.parse_list_groups({"groups": [{"group_id": "a", "protocol_type": "consumer", "group_state": "Empty"}]})
    merged = proto.merge_group_listings([a, b, a])
    assert [g.group_id for g in merged] == ["a", "b", "offsets-only"]
    assert merged[2].is_simple_consumer_group and not merged[1].is_simple_consumer_group


def test_list_result_all_raises_when_a_broker_did_not_answer() -> None:
    ok = ListConsumerGroupsResult((ConsumerGroupListing("g", "Empty"),))
    assert ok.all() == ok.valid
    partial = ListConsumerGroupsResult(ok.valid, {3: KafkaError("down", E.NETWORK_EXCEPTION)})
    with pytest.raises(AdminOperationError) as info:
        partial.all()
    assert info.value.code is E.NETWORK_EXCEPTION and "broker 3" in str(info.value)


def test_coordinator_errors_are_found_at_any_level_and_others_are_not() -> None:
    nested = {"error_code": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 16}]}]}
    assert proto.coordinator_error(nested).code is E.NOT_COORDINATOR
    per_group = {"error_code": 0, "results": [{"group_id": "g", "error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS)}]}
    assert proto.coordinator_error(per_group).code is E.COORDINATOR_LOAD_IN_PROGRESS
    assert proto.coordinator_error({"error_code": int(E.NON_EMPTY_GROUP)}) is None
    assert proto.top_level_error({"error_code": int(E.NON_EMPTY_GROUP)}).code is E.NON_EMPTY_GROUP


def test_delete_and_commit_answers_keep_each_items_outcome() -> None:
    deleted = proto.parse_delete_groups(
        {"results": [{"group_id": "a", "error_code": 0}, {"group_id": "b", "error_code": int(E.NON_EMPTY_GROUP)}]}
    )
    assert deleted["a"].ok and deleted["b"].error.code is E.NON_EMPTY_GROUP
    assert proto.delete_groups_request(["a", "b"]) == {"groups_names": ["a", "b"]}
    commit = {
        "error_code": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}, {"partition_index": 1}]}],
    }
    results = proto.parse_offset_commit_results(commit)
    assert results[TP("t", 0)].ok and results[TP("t", 1)].ok
    refused = proto.parse_offset_commit_results({**commit, "error_code": int(E.UNKNOWN_MEMBER_ID)})
    assert all(r.error.code is E.UNKNOWN_MEMBER_ID for r in refused.values())
    with pytest.raises(KafkaError):
        proto.parse_offset_commit_results({"topics": [{"name": "t", "partitions": [{"partition_index": "0"}]}]})


# --- against scripted servers -----------------------------------------------------------------------------


@pytest.fixture
async def brokers() -> AsyncIterator[tuple[ScriptedBroker, ScriptedBroker]]:
    async with scripted_brokers(1, 2, topics={"t": 2}) as (one, two):
        yield one, two


def coordinator(broker: ScriptedBroker) -> dict:
    return {"error_code": 0, "node_id": broker.node_id, "host": "127.0.0.1", "port": broker.port}


def admin_for(broker: ScriptedBroker, timeout_ms: int = 5_000) -> AdminClient:
    return AdminClient(
        [broker.address], default_api_timeout_ms=timeout_ms, retry_backoff_ms=10, retry_backoff_max_ms=50
    )


async def test_describe_waits_for_a_coordinator_and_follows_it_when_it_moves(brokers) -> None:
    one, two = brokers
    # The offsets topic is being created, then node 1 coordinates, then the group moves to node 2.
    one.script["find_coordinator"] = [
        KafkaError("creating __consumer_offsets", E.COORDINATOR_NOT_AVAILABLE),
        coordinator(one),
        coordinator(two),
    ]
    one.script["describe_groups"] = [describe_answer("g", code=int(E.NOT_COORDINATOR))]
    two.script["describe_groups"] = [describe_answer("g", members=[member("m", [TP("t", 0)])])]
    async with admin_for(one) as admin:
        described = (await admin.describe_consumer_groups(["g"]))["g"]
    assert isinstance(described, ConsumerGroupDescription) and described.coordinator == 2
    assert described.members[0].assignment == (TP("t", 0),)
    assert len(one.calls("find_coordinator")) == 3 and one.calls("find_coordinator")[0] == {"key": "g", "key_type": 0}
    assert one.calls("describe_groups") == [{"groups": ["g"]}]


async def test_a_coordinator_that_stays_loading_is_retried_until_the_timeout(brokers) -> None:
    one, _ = brokers
    one.script["find_coordinator"] = [coordinator(one)]
    one.script["offset_fetch"] = [{"error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS)}]
    # Long enough for a retry on a loaded machine (the backoff is 100 ms): the test asserts there is one.
    async with admin_for(one, timeout_ms=2000) as admin:
        with pytest.raises(KafkaTimeoutError) as info:
            await admin.list_consumer_group_offsets("g")
    assert "COORDINATOR_LOAD_IN_PROGRESS" in str(info.value)
    assert len(one.calls("offset_fetch")) > 1
    assert len(one.calls("find_coordinator")) == 1  # loading: same coordinator, no new lookup


async def test_group_errors_are_not_retried(brokers) -> None:
    one, _ = brokers
    one.script["find_coordinator"] = [coordinator(one)]
    one.script["delete_groups"] = [
        lambda body: {"results": [{"group_id": body["groups_names"][0], "error_code": int(E.NON_EMPTY_GROUP)}]}
    ]
    async with admin_for(one) as admin:
        results = await admin.delete_consumer_groups(["a", "b", "a"])
    assert list(results) == ["a", "b"]
    assert all(r.error.code is E.NON_EMPTY_GROUP for r in results.values())
    assert len(one.calls("delete_groups")) == 2


async def test_offsets_are_fetched_and_altered_as_a_member_less_commit(brokers) -> None:
    one, _ = brokers
    one.script["find_coordinator"] = [coordinator(one)]
    one.script["offset_fetch"] = [
        {
            "error_code": 0,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2, "metadata": "x"},
                        {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""},
                    ],
                }
            ],
        }
    ]
    one.script["offset_commit"] = [
        lambda body: {
            "error_code": 0,
            "topics": [
                {"name": t["name"], "partitions": [{"partition_index": p["partition_index"]} for p in t["partitions"]]}
                for t in body["topics"]
            ],
        }
    ]
    async with admin_for(one) as admin:
        everything = await admin.list_consumer_group_offsets("g")
        chosen = await admin.list_consumer_group_offsets("g", [("t", 1), TP("t", 0)])
        altered = await admin.alter_consumer_group_offsets("g", {("t", 0): 3, TP("t", 1): OffsetAndMetadata(7, "m")})
    assert everything == {TP("t", 0): OffsetAndMetadata(5, "x", 2)}
    assert chosen == {TP("t", 0): OffsetAndMetadata(5, "x", 2), TP("t", 1): None}
    assert [b.get("topics") for b in one.calls("offset_fetch")] == [None, [{"name": "t", "partition_indexes": [0, 1]}]]
    assert all(r.ok for r in altered.values()) and set(altered) == {TP("t", 0), TP("t", 1)}
    commit = one.calls("offset_commit")[0]
    assert (commit["generation_id"], commit["member_id"], commit["group_instance_id"]) == (-1, "", None)
    assert commit["topics"][0]["partitions"][1]["committed_offset"] == 7
    assert commit["topics"][0]["partitions"][1]["committed_metadata"] == "m"


async def test_list_asks_every_broker_and_reports_one_that_fails(brokers) -> None:
    one, two = brokers
    one.script["list_groups"] = [
        {"error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS), "groups": []},
        {"groups": [{"group_id": "a", "protocol_type": "consumer", "group_state": "Stable"}]},
    ]
    two.script["list_groups"] = [{"groups": [{"group_id": "b", "protocol_type": "", "group_state": "Empty"}]}]
    async with admin_for(one) as admin:
        listed = await admin.list_consumer_groups(states=["stable", "Empty"])
        assert [(g.group_id, g.state) for g in listed.all()] == [("a", "Stable"), ("b", "Empty")]
        assert one.calls("list_groups")[0] == {"states_filter": ["stable", "Empty"]}
        two.script["list_groups"] = [{"error_code": int(E.INVALID_REQUEST), "message": "bad state"}]
        partial = await admin.list_consumer_groups()
    assert [g.group_id for g in partial.valid] == ["a"] and partial.errors[2].code is E.INVALID_REQUEST
