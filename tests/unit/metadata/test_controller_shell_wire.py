"""The /controller/* wire codec: AdminClient bodies decode, answers encode, malformed bodies name the field."""

from __future__ import annotations

import uuid

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.client.admin import protocol as proto
from kraftpy.client.admin.types import AlterConfigOp as ClientAlterOp
from kraftpy.client.admin.types import ConfigResource as ClientResource
from kraftpy.client.admin.types import NewTopic
from kraftpy.metadata.configs import ConfigResourceType, ConfigSource
from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AlterConfigOpType,
    AlterPartitionItemResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigEntry,
    ConfigResource,
    CreatePartitionsRequest,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResult,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition


def wire_trip(body: dict) -> dict:
    """What a handler sees: the body after a CBOR round trip."""
    return cbor2.loads(cbor2.dumps(body))


# --- the AdminClient's bodies decode into the controller's requests ----------------------------------


def test_create_topics_body_from_the_admin_client() -> None:
    body = proto.create_topics_request(
        [
            NewTopic("a", 3, 2, configs={"retention.ms": "1000"}),
            NewTopic("b", replica_assignments={0: [1, 2], 1: [2, 3]}),
        ],
        validate_only=True,
    )
    request = wire.decode_request("create_topics", wire_trip(body))
    assert isinstance(request, CreateTopicsRequest) and request.validate_only
    a, b = request.topics
    assert (a.name, a.num_partitions, a.replication_factor, a.assignments) == ("a", 3, 2, None)
    assert a.configs == {"retention.ms": "1000"}
    assert b.assignments == ((1, 2), (2, 3)) and b.num_partitions == -1


def test_delete_create_partitions_configs_and_elections_from_the_admin_client() -> None:
    assert wire.decode_request("delete_topics", {"topic_names": ["x", "y"]}) == DeleteTopicsRequest(("x", "y"))
    partitions = wire.decode_request("create_partitions", {"topics": [{"name": "x", "count": 4}]})
    assert isinstance(partitions, CreatePartitionsRequest) and partitions.topics[0].count == 4
    describe = wire.decode_request(
        "describe_configs", proto.describe_configs_request([ClientResource("topic", "x"), ClientResource("broker", "")])
    )
    assert describe == DescribeConfigsRequest(
        (ConfigResource(ConfigResourceType.TOPIC, "x"), ConfigResource(ConfigResourceType.BROKER, ""))
    )
    alter = wire.decode_request(
        "incremental_alter_configs",
        proto.alter_configs_request(
            {
                ClientResource("topic", "x"): [
                    ClientAlterOp("retention.ms", "set", "5"),
                    ClientAlterOp("segment_ms", "delete"),
                ]
            },
            validate_only=False,
        ),
    )
    assert isinstance(alter, IncrementalAlterConfigsRequest)
    ops = alter.resources[0].ops
    assert [(o.key, o.op, o.value) for o in ops] == [
        ("retention.ms", AlterConfigOpType.SET, "5"),
        ("segment_ms", AlterConfigOpType.DELETE, None),
    ]
    elect = wire.decode_request("elect_leaders", proto.elect_leaders_request("unclean", [TopicPartition("x", 1)]))
    assert elect == ElectLeadersRequest(ElectionType.UNCLEAN, (("x", 1),))
    everything = wire.decode_request("elect_leaders", proto.elect_leaders_request("preferred", None))
    assert everything == ElectLeadersRequest(ElectionType.PREFERRED, None)


def test_lifecycle_bodies_round_trip() -> None:
    registration = BrokerRegistrationRequest(3, "c1", "inc", (Listener("PLAINTEXT", "127.0.0.1", 9092),), "r1")
    assert wire.decode_request("broker_registration", wire_trip(wire.broker_registration_body(registration))) == (
        registration
    )
    clean = BrokerRegistrationRequest(3, "c1", "inc", (), None, previous_broker_epoch=12)
    assert wire.decode_request("broker_registration", wire_trip(wire.broker_registration_body(clean))) == clean
    # A broker from before KIP-966 sends no previous epoch: its restart counts as unclean (-1).
    old = {k: v for k, v in wire.broker_registration_body(clean).items() if k != "previous_broker_epoch"}
    assert wire.decode_request("broker_registration", old).previous_broker_epoch == -1
    heartbeat = BrokerHeartbeatRequest(3, 7, 120, want_shutdown=True)
    assert wire.decode_request("broker_heartbeat", wire_trip(wire.broker_heartbeat_body(heartbeat))) == heartbeat
    answer = wire.encode_response("broker_heartbeat", BrokerHeartbeatResponse(True, False, True))
    assert wire.parse_heartbeat_answer(wire_trip(answer)) == BrokerHeartbeatResponse(True, False, True)
    epoch = wire.encode_response("broker_registration", BrokerRegistrationResponse(9))
    assert wire.parse_registration_answer(wire_trip(epoch)).broker_epoch == 9
    assert wire.decode_request("allocate_producer_ids", {"broker_id": 1, "broker_epoch": 2}) == (
        AllocateProducerIdsRequest(1, 2)
    )


@pytest.mark.parametrize("form", ["text", "bytes"])
def test_alter_partition_takes_topic_ids_as_text_or_bytes(form: str) -> None:
    topic_id = uuid.uuid4()
    raw = str(topic_id) if form == "text" else topic_id.bytes
    body = {
        "broker_id": 1,
        "broker_epoch": 4,
        "topics": [
            {
                "topic_id": raw,
                "partitions": [{"partition": 0, "leader_epoch": 2, "new_isr": [1, 2], "partition_epoch": 5}],
            }
        ],
    }
    request = wire.decode_request("alter_partition", wire_trip(body))
    assert isinstance(request, AlterPartitionRequest)
    (item,) = request.partitions
    assert (item.topic_id, item.partition, item.new_isr, item.partition_epoch) == (topic_id, 0, (1, 2), 5)
    response = AlterPartitionResponse(
        (
            AlterPartitionItemResult(topic_id, 0, None, 1, 2, (1, 2), 6),
            AlterPartitionItemResult(topic_id, 1, KafkaError("old", ErrorCode.INVALID_UPDATE_VERSION)),
        )
    )
    answer = wire_trip(wire.encode_response("alter_partition", response))
    (topic,) = answer["topics"]
    assert topic["topic_id"] == str(topic_id)
    ok, failed = topic["partitions"]
    assert ok == {
        "partition": 0,
        "error_code": 0,
        "leader_id": 1,
        "leader_epoch": 2,
        "isr": [1, 2],
        "partition_epoch": 6,
    }
    assert failed["error"] == "INVALID_UPDATE_VERSION" and failed["error_code"] == 95


# --- answers parse with the AdminClient's parsers ------------------------------------------------------


def test_create_topics_answer_parses_in_the_admin_client() -> None:
    topic_id = uuid.uuid4()
    response = CreateTopicsResponse(
        (
            CreateTopicResult("a", None, topic_id, 3, 2),
            CreateTopicResult("a", KafkaError("Topic 'a' already exists.", ErrorCode.TOPIC_ALREADY_EXISTS)),
        )
    )
    answer = wire_trip(wire.encode_response("create_topics", response))
    assert answer["topics"][0]["topic_id"] == str(topic_id)
    parsed = proto.parse_create_topics({"topics": answer["topics"][1:]})
    assert parsed["a"].error.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert "already exists" in parsed["a"].error.message
    ok = proto.parse_create_topics({"topics": answer["topics"][:1]})["a"]
    assert ok.error is None and ok.num_partitions == 3 and ok.replication_factor == 2


def test_describe_configs_and_elections_answers_parse_in_the_admin_client() -> None:
    resource = ConfigResource(ConfigResourceType.TOPIC, "x")
    entry = ConfigEntry("retention_ms", 1000, ConfigSource.TOPIC, False, "long", "doc")
    answer = wire_trip(
        wire.encode_response(
            "describe_configs", DescribeConfigsResponse((DescribeConfigsResult(resource, None, (entry,)),))
        )
    )
    parsed = proto.parse_describe_configs(answer, [ClientResource("topic", "x")])
    (entries,) = parsed.values()
    assert entries[0].name == "retention_ms" and entries[0].value == 1000 and entries[0].source == "topic"
    elections = ElectLeadersResponse(
        (
            ElectLeadersResult("x", 0, None, 2),
            ElectLeadersResult("x", 1, KafkaError("no", ErrorCode.ELECTION_NOT_NEEDED)),
        )
    )
    parsed_elections = proto.parse_elect_leaders(wire_trip(wire.encode_response("elect_leaders", elections)))
    assert parsed_elections[TopicPartition("x", 0)].error is None
    assert parsed_elections[TopicPartition("x", 1)].error.code == ErrorCode.ELECTION_NOT_NEEDED


def test_a_whole_request_error_is_raised_not_encoded() -> None:
    with pytest.raises(KafkaError) as info:
        wire.encode_response("create_topics", KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=2))
    assert info.value.code == ErrorCode.NOT_CONTROLLER and info.value.details == {"leader_id": 2}
    with pytest.raises(KafkaError) as wrong:
        wire.encode_response("create_topics", BrokerRegistrationResponse(1))
    assert wrong.value.code == ErrorCode.UNKNOWN_SERVER_ERROR


# --- malformed bodies --------------------------------------------------------------------------------

MALFORMED = [
    ("create_topics", {}, "missing required field 'topics'"),
    ("create_topics", {"topics": "x"}, "field 'topics' must be a list"),
    ("create_topics", {"topics": [7]}, "topics[0] must be a map"),
    ("create_topics", {"topics": [{"name": 5}]}, "topics[0]: field 'name' must be a string"),
    ("create_topics", {"topics": [{"name": "a", "num_partitions": "3"}]}, "topics[0]: field 'num_partitions'"),
    (
        "create_topics",
        {"topics": [{"name": "a", "replication_factor": True}]},
        "'replication_factor' must be an integer",
    ),
    ("create_topics", {"topics": [{"name": "a", "configs": []}]}, "topics[0].configs must be a map"),
    ("create_topics", {"topics": [{"name": "a", "configs": {"x": [1]}}]}, "topics[0].configs.x must be"),
    (
        "create_topics",
        {"topics": [{"name": "a", "assignments": [{"partition": 0, "broker_ids": ["1"]}]}]},
        "'topics[0].assignments[0].broker_ids' must be an integer",
    ),
    (
        "create_topics",
        {"topics": [{"name": "a", "assignments": [{"partition": 0, "broker_ids": [1]}] * 2}]},
        "partition 0 is assigned twice",
    ),
    ("create_topics", {"topics": [], "validate_only": "yes"}, "field 'validate_only' must be a boolean"),
    ("delete_topics", {}, "name at least one topic"),
    ("delete_topics", {"topic_names": [1]}, "'topic_names[0]' must be a string"),
    ("delete_topics", {"topic_ids": ["nope"]}, "topic_ids[0] must be a topic id"),
    ("create_partitions", {"topics": [{"name": "a"}]}, "topics[0]: missing required field 'count'"),
    ("describe_configs", {"resources": [{"resource_type": "group", "resource_name": "g"}]}, "resource_type must be"),
    ("describe_configs", {"resources": [{"resource_type": "topic"}]}, "missing required field 'resource_name'"),
    (
        "incremental_alter_configs",
        {"resources": [{"resource_type": "topic", "resource_name": "a", "configs": [{"name": "x", "op": "append"}]}]},
        "resources[0].configs[0].op must be",
    ),
    (
        "incremental_alter_configs",
        {"resources": [{"resource_type": "topic", "resource_name": "a", "configs": [{"name": "x", "op": "set"}]}]},
        "value must be a string, number or boolean",
    ),
    ("elect_leaders", {"election_type": "random"}, "election_type must be"),
    ("elect_leaders", {"topic_partitions": [{"topic": "a", "partitions": "0"}]}, "partitions must be a list"),
    ("broker_registration", {"broker_id": -1}, "'broker_id' must be >= 0"),
    # Kafka's broker ids are int32; a 20,001-bit one was stored (issue 11) and crashed the message too.
    ("broker_registration", {"broker_id": 2**20000}, "'broker_id' must be <= 2147483647, got a 20001-bit integer"),
    ("broker_heartbeat", {"broker_id": 2**31}, "'broker_id' must be <= 2147483647, got 2147483648"),
    (
        "broker_registration",
        {"broker_id": 1, "cluster_id": "c", "incarnation_id": "i", "listeners": [], "previous_broker_epoch": -2},
        "'previous_broker_epoch' must be >= -1",
    ),
    ("allocate_producer_ids", {"broker_id": 2**31, "broker_epoch": 1}, "'broker_id' must be <= 2147483647"),
    (
        "create_topics",
        {"topics": [{"name": "a", "assignments": [{"partition": 0, "broker_ids": [2**40]}]}]},
        "broker_ids' must be <= 2147483647, got 1099511627776",
    ),
    (
        "broker_registration",
        {
            "broker_id": 1,
            "cluster_id": "c",
            "incarnation_id": "i",
            "listeners": [{"name": "P", "host": "h", "port": 0}],
        },
        "listeners[0]: field 'port' must be >= 1",
    ),
    ("broker_heartbeat", {"broker_id": 1, "broker_epoch": 1}, "missing required field 'current_metadata_offset'"),
    (
        "broker_heartbeat",
        {"broker_id": 1, "broker_epoch": 1, "current_metadata_offset": 3, "want_shut_down": 1},
        "'want_shut_down' must be a boolean",
    ),
    ("alter_partition", {"broker_id": 1, "broker_epoch": 1, "topics": [{"topic_id": 3}]}, "topics[0].topic_id"),
    ("nonsense", {}, "unknown controller request"),
]


@pytest.mark.parametrize(
    ("route", "body", "expected"), MALFORMED, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(MALFORMED)]
)
def test_malformed_bodies_are_invalid_request_naming_the_field(route: str, body: dict, expected: str) -> None:
    with pytest.raises(KafkaError) as info:
        wire.decode_request(route, body)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert expected in info.value.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    route=st.sampled_from(sorted(wire.ROUTES)),
    body=st.dictionaries(
        st.sampled_from(
            [
                "topics",
                "name",
                "resources",
                "topic_names",
                "broker_id",
                "broker_epoch",
                "listeners",
                "election_type",
                "topic_partitions",
                "current_metadata_offset",
                "cluster_id",
                "incarnation_id",
                "validate_only",
                "topic_ids",
            ]
        ),
        json_values,
        max_size=5,
    ),
)
def test_any_body_decodes_or_is_invalid_request(route: str, body: dict) -> None:
    """Fuzz: nothing but a request object or INVALID_REQUEST ever comes out of the decoder."""
    try:
        wire.decode_request(route, body)
    except KafkaError as e:
        assert e.code == ErrorCode.INVALID_REQUEST, e
