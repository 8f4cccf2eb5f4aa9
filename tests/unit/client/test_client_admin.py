"""Admin request bodies, answer parsing and finding the active controller (no network)."""

from __future__ import annotations

import pytest

from kraftpy.client.admin import protocol as proto
from kraftpy.client.admin.types import (
    AdminOperationError,
    AlterConfigOp,
    ConfigResource,
    NewTopic,
    OperationResult,
)
from kraftpy.client.shell.admin import raise_for
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import fresh_metadata, metadata_body


def test_create_topics_body_follows_the_protocol() -> None:
    body = proto.create_topics_request(
        [
            NewTopic("a", 3, 2, configs={"retention_ms": 1000}),
            NewTopic("b", replica_assignments={1: [2, 3], 0: [1, 2]}),
        ],
        validate_only=True,
    )
    assert body == {
        "topics": [
            {
                "name": "a",
                "num_partitions": 3,
                "replication_factor": 2,
                "assignments": [],
                "configs": {"retention_ms": "1000"},
            },
            {
                "name": "b",
                "num_partitions": -1,
                "replication_factor": -1,
                "assignments": [{"partition": 0, "broker_ids": [1, 2]}, {"partition": 1, "broker_ids": [2, 3]}],
                "configs": {},
            },
        ],
        "validate_only": True,
    }


def test_create_topics_answer_keeps_each_topics_outcome() -> None:
    results = proto.parse_create_topics(
        {
            "error_code": 0,
            "topics": [
                {"name": "a", "topic_id": "x", "error_code": 0, "num_partitions": 3, "replication_factor": 2},
                {"name": "b", "error_code": 36, "message": "topic b already exists"},
            ],
        }
    )
    assert results["a"].ok and results["a"].num_partitions == 3 and results["a"].topic_id == "x"
    assert results["b"].error.code == ErrorCode.TOPIC_ALREADY_EXISTS and "already exists" in str(results["b"].error)
    with pytest.raises(AdminOperationError, match="create_topics failed for 1 item") as info:
        raise_for("create_topics", results)
    assert set(info.value.errors) == {"b"}


def test_configs_bodies_and_answers() -> None:
    topic = ConfigResource("topic", "a")
    assert proto.describe_configs_request([topic]) == {"resources": [{"resource_type": "topic", "resource_name": "a"}]}
    described = proto.parse_describe_configs(
        {
            "resources": [
                {
                    "resource_type": "topic",
                    "resource_name": "a",
                    "error_code": 0,
                    "configs": [{"name": "retention_ms", "value": "10", "source": "topic", "is_default": False}],
                }
            ]
        },
        [topic],
    )
    (entry,) = described[topic]
    assert (entry.name, entry.value, entry.source, entry.is_default) == ("retention_ms", "10", "topic", False)
    changes = {topic: [AlterConfigOp("retention_ms", "set", "5"), AlterConfigOp("cleanup_policy", "delete")]}
    assert proto.alter_configs_request(changes, False) == {
        "resources": [
            {
                "resource_type": "topic",
                "resource_name": "a",
                "configs": [
                    {"name": "retention_ms", "op": "set", "value": "5"},
                    {"name": "cleanup_policy", "op": "delete", "value": None},
                ],
            }
        ],
        "validate_only": False,
    }
    altered = proto.parse_alter_configs({"resources": [{"error_code": 40, "message": "bad value"}]}, [topic])
    assert altered[topic].error.code == ErrorCode.INVALID_CONFIG


def test_bad_admin_arguments_are_refused_up_front() -> None:
    with pytest.raises(ValueError, match="resource_type"):
        ConfigResource("group", "g")
    with pytest.raises(ValueError, match="needs a value"):
        AlterConfigOp("retention_ms", "set")
    with pytest.raises(ValueError, match="election_type"):
        proto.elect_leaders_request("random", None)


def test_elect_leaders_bodies_and_answer() -> None:
    assert proto.elect_leaders_request("preferred", None) == {"election_type": "preferred", "topic_partitions": None}
    body = proto.elect_leaders_request("unclean", [TopicPartition("t", 2), TopicPartition("t", 0)])
    assert body["topic_partitions"] == [{"topic": "t", "partitions": [0, 2]}]
    results = proto.parse_elect_leaders(
        {
            "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "error_code": 0}, {"partition": 2, "error_code": 84}]}
            ]
        }
    )
    assert results[TopicPartition("t", 0)].ok
    assert results[TopicPartition("t", 2)].error.code == ErrorCode.ELECTION_NOT_NEEDED


def test_describe_quorum_answer() -> None:
    info = proto.parse_describe_quorum(
        {
            "leader_id": 2,
            "epoch": 7,
            "high_watermark": 120,
            "voters": [{"node_id": 1, "log_end_offset": 120, "lag": 0, "last_fetch_ms_ago": 5}],
            "observers": [],
        }
    )
    assert (info.leader_id, info.epoch, info.high_watermark) == (2, 7, 120)
    assert info.voters[0].node_id == 1 and info.voters[0].lag == 0 and info.observers == ()


def test_the_controller_is_found_from_metadata_and_leader_hints() -> None:
    md = fresh_metadata({("t", 0): (1, 0)})
    locator = proto.ControllerLocator(md)
    assert locator.target(0) == ("b1", 9001), "metadata's controller_id"
    md.update(metadata_body({("t", 0): (1, 0)}, controller_id=3), 1)
    assert locator.target(2) == ("b3", 9003)

    hinted = KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=2, leader_address="b2:9002")
    assert locator.on_not_controller(hinted, ("b3", 9003), 3)
    assert locator.target(3) == ("b2", 9002)

    by_id = KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=1)
    assert locator.on_not_controller(by_id, ("b2", 9002), 4)
    assert locator.target(4) == ("b1", 9001)

    md.update(metadata_body({("t", 0): (1, 0)}, controller_id=3), 5)
    assert not locator.on_not_controller(KafkaError("electing", ErrorCode.NOT_CONTROLLER), ("b1", 9001), 6)
    assert md.update_requested and locator.hint is None
    assert locator.target(7) == ("b3", 9003)


def test_an_unreachable_controller_is_forgotten() -> None:
    md = fresh_metadata({("t", 0): (1, 0)})
    locator = proto.ControllerLocator(md)
    locator.on_success(("b2", 9002))
    assert locator.target(0) == ("b2", 9002)
    locator.on_unreachable(("b2", 9002), 1)
    assert locator.target(2) == ("b1", 9001) and md.update_requested


def test_raise_for_passes_when_all_succeeded() -> None:
    raise_for("delete_topics", {"a": OperationResult("a")})
