"""The client's Kafka wire cores: version choice, reconnect backoff, and each API's request and answer.

Requests are built at every version the client speaks, encoded and decoded by the
codec the broker uses (as the broker's listener reads them); answers are encoded by
the codec as a broker would and read back into the shapes the client cores read.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from kraftpy.client.wire import admin, data, groups
from kraftpy.client.wire.reconnect import ReconnectBackoff
from kraftpy.client.wire.routes import ROUTES
from kraftpy.client.wire.versions import (
    choose_version,
    client_range,
    negotiate,
    retry_api_versions_at,
    version_for,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    message_classes,
)
from tests.unit.client.test_client_txn_wire import TXN_BODIES

# Versions ------------------------------------------------------------------------------


def test_the_highest_version_both_sides_speak_is_chosen() -> None:
    assert choose_version(3, 0, 13) == 13  # Metadata: ours and theirs agree on the top
    assert choose_version(3, 0, 9) == 9  # an older broker: its highest
    assert choose_version(0, 3, 13) == 12  # Produce v13 names topics by id: the client stops at v12
    assert choose_version(0, 0, 2) is None  # only below Kafka 4's floor: no common version
    assert choose_version(1, 13, 18) is None  # a broker that only takes topic ids
    assert choose_version(9999, 0, 5) is None  # an API the client does not know
    assert choose_version(15, 0, 6) == 5  # DescribeGroups v6 would make an unknown group an error


def test_negotiation_keeps_only_apis_with_a_common_version_and_a_missing_one_is_unsupported() -> None:
    chosen = negotiate([(0, 0, 11), (1, 4, 18), (3, 0, 12), (18, 0, 4), (9999, 0, 1)])
    assert chosen == {0: 11, 1: 12, 3: 12, 18: 4}
    with pytest.raises(KafkaError) as err:
        version_for(chosen, 19, "127.0.0.1:9092")
    assert err.value.code == ErrorCode.UNSUPPORTED_VERSION and "CreateTopics" in err.value.message


def test_client_ranges_stay_inside_what_the_codec_and_broker_serve() -> None:
    for api_key, api in SUPPORTED_APIS.items():
        ours = client_range(api_key)
        assert ours is not None and api.min_version <= ours[0] <= ours[1] <= api.max_version


def test_a_refused_api_versions_is_asked_again_in_a_version_the_broker_lists() -> None:
    assert retry_api_versions_at(int(ErrorCode.UNSUPPORTED_VERSION), [(18, 0, 2)]) == 2
    assert retry_api_versions_at(int(ErrorCode.UNSUPPORTED_VERSION), []) == 0
    assert retry_api_versions_at(int(ErrorCode.UNKNOWN_SERVER_ERROR), [(18, 0, 2)]) is None


def test_reconnect_backoff_doubles_to_its_cap_and_resets_on_success() -> None:
    backoff = ReconnectBackoff(50, 1_000, random.Random(7))
    address = ("127.0.0.1", 9092)
    assert backoff.wait_ms(address, 0) == 0
    waits = [backoff.failed(address, 0) for _ in range(8)]
    assert 40 <= waits[0] <= 60 and 80 <= waits[1] <= 120 and all(w <= 1_200 for w in waits) and waits[-1] >= 800
    assert backoff.wait_ms(address, 0) == waits[-1] and backoff.wait_ms(address, waits[-1]) == 0
    backoff.connected(address)
    assert backoff.wait_ms(address, 0) == 0 and 40 <= backoff.failed(address, 0) <= 60


# Requests: built at every version, read by the broker's codec ------------------------------

BODIES: dict[str, dict[str, Any]] = {
    "/kafka/metadata": {"topics": ["a", "b"]},
    "/kafka/produce": {
        "acks": -1,
        "timeout_ms": 30_000,
        "topics": [{"name": "a", "partitions": [{"partition": 1, "records": b"batch"}]}],
    },
    "/kafka/init_producer_id": {"transactional_id": None, "producer_id": -1, "producer_epoch": -1},
    "/kafka/fetch": {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": 7,
                        "current_leader_epoch": 3,
                        "last_fetched_epoch": 2,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1024,
                    },
                ],
            }
        ],
    },
    "/kafka/list_offsets": {
        "replica_id": -1,
        "topics": [{"name": "a", "partitions": [{"partition": 0, "current_leader_epoch": 3, "timestamp": -2}]}],
    },
    "/kafka/offsets_for_leader_epoch": {
        "topics": [{"name": "a", "partitions": [{"partition": 0, "current_leader_epoch": 3, "leader_epoch": 2}]}]
    },
    "/kafka/find_coordinator": {"key": "g", "key_type": 0},
    "/kafka/join_group": {
        "group_id": "g",
        "session_timeout_ms": 45_000,
        "rebalance_timeout_ms": 300_000,
        "member_id": "",
        "group_instance_id": "static-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta"}],
        "reason": "joining",
    },
    "/kafka/sync_group": {
        "group_id": "g",
        "generation_id": 4,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": "m", "assignment": b"a"}],
    },
    "/kafka/heartbeat": {"group_id": "g", "generation_id": 4, "member_id": "m", "group_instance_id": None},
    "/kafka/leave_group": {
        "group_id": "g",
        "members": [{"member_id": "m", "group_instance_id": None, "reason": "bye"}],
    },
    "/kafka/offset_commit": {
        "group_id": "g",
        "generation_id": 4,
        "member_id": "m",
        "group_instance_id": None,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 42,
                        "committed_leader_epoch": 3,
                        "committed_metadata": "x",
                    },
                ],
            }
        ],
    },
    "/kafka/offset_fetch": {
        "group_id": "g",
        "topics": [{"name": "a", "partition_indexes": [0, 1]}],
        "require_stable": True,
    },
    "/kafka/list_groups": {"states_filter": ["Stable"]},
    "/kafka/describe_groups": {"groups": ["g"]},
    "/kafka/delete_groups": {"groups_names": ["g"]},
    "/kafka/offset_delete": {"group_id": "g", "topics": [{"name": "a", "partitions": [{"partition_index": 0}]}]},
    "/controller/create_topics": {
        "topics": [
            {
                "name": "a",
                "num_partitions": 3,
                "replication_factor": 2,
                "assignments": [],
                "configs": {"retention_ms": 1000, "cleanup_policy": "compact"},
            }
        ],
        "validate_only": False,
    },
    "/controller/delete_topics": {"topic_names": ["a"]},
    "/controller/create_partitions": {"topics": [{"name": "a", "count": 6}], "validate_only": False},
    "/controller/describe_configs": {"resources": [{"resource_type": "topic", "resource_name": "a"}]},
    "/controller/incremental_alter_configs": {
        "resources": [
            {
                "resource_type": "broker",
                "resource_name": "",
                "configs": [
                    {"name": "retention_ms", "op": "set", "value": "1000"},
                    {"name": "segment_ms", "op": "delete", "value": None},
                ],
            }
        ],
        "validate_only": False,
    },
    "/controller/elect_leaders": {
        "election_type": "preferred",
        "topic_partitions": [{"topic": "a", "partitions": [0]}],
    },
    "/kafka/describe_topic_partitions": {
        "topics": ["a", "b"],
        "response_partition_limit": 2000,
        "cursor": {"topic_name": "a", "partition_index": 3},
    },
    **TXN_BODIES,
}


def _versions(api_key: int) -> range:
    low, high = client_range(api_key) or (0, -1)
    return range(low, high + 1)


def _through_the_wire(api_key: int, version: int, message: Any) -> Any:
    frame = encode_request(RequestHeader(api_key, version, 7, "kraftpy-test"), message)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 7)
    return decoded


def test_every_client_request_has_a_route_and_a_body_here() -> None:
    assert set(BODIES) == set(ROUTES)


@pytest.mark.parametrize("path", sorted(BODIES))
def test_each_request_encodes_at_every_version_the_client_speaks(path: str) -> None:
    route = ROUTES[path]
    for version in _versions(route.api_key):
        _through_the_wire(route.api_key, version, route.build(BODIES[path], version))


def test_produce_and_fetch_carry_the_cores_fields_as_kafkas() -> None:
    produce = _through_the_wire(0, 12, data.build_produce(BODIES["/kafka/produce"], 12))
    assert (produce.acks, produce.timeout_ms) == (-1, 30_000)
    [topic] = produce.topic_data
    assert topic.name == "a" and [(p.index, bytes(p.records)) for p in topic.partition_data] == [(1, b"batch")]

    fetch = _through_the_wire(1, 12, data.build_fetch(BODIES["/kafka/fetch"], 12))
    assert (fetch.replica_id, fetch.session_id, fetch.session_epoch) == (-1, 0, -1)  # a full fetch, no session
    [part] = fetch.topics[0].partitions
    assert (part.partition, part.fetch_offset, part.current_leader_epoch, part.last_fetched_epoch) == (0, 7, 3, 2)


def test_metadata_v0_asks_for_every_topic_with_an_empty_list_and_later_versions_with_null() -> None:
    assert _through_the_wire(3, 0, data.build_metadata({"topics": None}, 0)).topics == []
    assert _through_the_wire(3, 12, data.build_metadata({"topics": None}, 12)).topics is None
    assert [t.name for t in _through_the_wire(3, 12, data.build_metadata({"topics": ["x"]}, 12)).topics] == ["x"]


def test_leave_group_below_v3_names_its_one_member_at_the_top() -> None:
    old = _through_the_wire(13, 2, groups.build_leave_group(BODIES["/kafka/leave_group"], 2))
    assert old.member_id == "m"
    new = _through_the_wire(13, 5, groups.build_leave_group(BODIES["/kafka/leave_group"], 5))
    assert [(m.member_id, m.reason) for m in new.members] == [("m", "bye")]


def test_admin_config_names_travel_as_kafkas() -> None:
    create = _through_the_wire(19, 7, admin.build_create_topics(BODIES["/controller/create_topics"], 7))
    assert {(c.name, c.value) for c in create.topics[0].configs} == {
        ("retention.ms", "1000"),
        ("cleanup.policy", "compact"),
    }
    alter = _through_the_wire(
        44, 1, admin.build_incremental_alter_configs(BODIES["/controller/incremental_alter_configs"], 1)
    )
    [resource] = alter.resources
    assert resource.resource_type == 4
    assert [(c.name, c.config_operation) for c in resource.configs] == [("log.retention.ms", 0), ("log.roll.ms", 1)]


# Answers: encoded as a broker does, read into the cores' shapes -------------------------------


def _answer(api_key: int, version: int, response: Any) -> Any:
    header = RequestHeader(api_key, version, 9, None)
    correlation_id, decoded = decode_response(header, encode_response(header, response)[4:])
    assert correlation_id == 9
    return decoded


def test_a_metadata_answer_reads_into_the_metadata_cores_shape() -> None:
    cls = message_classes(3)[1]
    topic_id = uuid.uuid4()
    response = cls(
        brokers=[cls.MetadataResponseBroker(node_id=1, host="h", port=9092, rack=None)],
        cluster_id="c",
        controller_id=1,
        topics=[
            cls.MetadataResponseTopic(
                error_code=0,
                name="a",
                topic_id=topic_id,
                is_internal=False,
                partitions=[
                    cls.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=5,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
            ),
            cls.MetadataResponseTopic(
                error_code=3, name="gone", topic_id=uuid.UUID(int=0), is_internal=False, partitions=[]
            ),
        ],
    )
    answer = data.read_metadata(_answer(3, 12, response), 12)
    assert answer["brokers"] == [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    assert answer["cluster_id"] == "c" and answer["controller_id"] == 1
    ok, gone = answer["topics"]
    assert ok["topic_id"] == str(topic_id) and ok["partitions"][0]["partition"] == 0
    assert ok["partitions"][0]["leader_epoch"] == 5
    assert gone["error_code"] == 3 and gone["topic_id"] is None and gone["message"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_produce_answer_keeps_its_error_message_and_leader_hint() -> None:
    cls = message_classes(0)[1]
    part_cls = cls.TopicProduceResponse.PartitionProduceResponse
    response = cls(
        responses=[
            cls.TopicProduceResponse(
                name="a",
                partition_responses=[
                    part_cls(
                        index=0,
                        error_code=0,
                        base_offset=10,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                        record_errors=[],
                    ),
                    part_cls(
                        index=1,
                        error_code=6,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[],
                        error_message="not the leader",
                        current_leader=part_cls.LeaderIdAndEpoch(leader_id=2, leader_epoch=8),
                    ),
                ],
            )
        ],
        throttle_time_ms=0,
        node_endpoints=[cls.NodeEndpoint(node_id=2, host="127.0.0.1", port=9093, rack=None)],
    )
    ok, moved = data.read_produce(_answer(0, 12, response), 12)["topics"][0]["partitions"]
    assert ok == {"error_code": 0, "partition": 0, "base_offset": 10, "log_append_time_ms": -1, "log_start_offset": 0}
    assert moved["error_code"] == 6 and moved["message"] == "not the leader"
    assert moved["details"] == {"leader_id": 2, "leader_epoch": 8, "leader_address": "127.0.0.1:9093"}


def test_a_fetch_answer_carries_the_diverging_epoch_only_when_there_is_one() -> None:
    cls = message_classes(1)[1]
    part_cls = cls.FetchableTopicResponse.PartitionData
    response = cls(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            cls.FetchableTopicResponse(
                topic="a",
                partitions=[
                    part_cls(
                        partition_index=0,
                        error_code=0,
                        high_watermark=9,
                        last_stable_offset=9,
                        log_start_offset=0,
                        records=b"abc",
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                    ),
                    part_cls(
                        partition_index=1,
                        error_code=0,
                        high_watermark=9,
                        last_stable_offset=9,
                        log_start_offset=0,
                        records=None,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        diverging_epoch=part_cls.EpochEndOffset(epoch=2, end_offset=5),
                    ),
                ],
            )
        ],
    )
    plain, diverged = data.read_fetch(_answer(1, 12, response), 12)["topics"][0]["partitions"]
    assert plain["diverging_epoch"] is None and plain["records"] == b"abc" and plain["high_watermark"] == 9
    assert diverged["diverging_epoch"] == {"epoch": 2, "end_offset": 5} and diverged["records"] == b""


def test_find_coordinator_reads_the_batched_answer_of_v4_and_later() -> None:
    cls = message_classes(10)[1]
    response = cls(
        coordinators=[cls.Coordinator(key="g", node_id=2, host="h", port=9093, error_code=0, error_message=None)]
    )
    assert groups.read_find_coordinator(_answer(10, 6, response), 6) == {
        "error_code": 0,
        "node_id": 2,
        "host": "h",
        "port": 9093,
    }
    old = cls(error_code=15, error_message="loading", node_id=-1, host="", port=-1)
    assert groups.read_find_coordinator(_answer(10, 3, old), 3)["error_code"] == 15


def test_describe_configs_answers_come_back_under_kraftpy_names_and_sources() -> None:
    cls = message_classes(32)[1]
    result_cls = cls.DescribeConfigsResult
    entry = result_cls.DescribeConfigsResourceResult
    response = cls(throttle_time_ms=0, results=[result_cls(
        error_code=0, error_message=None, resource_type=4, resource_name="1", configs=[
            entry(name="log.retention.ms", value="1000", read_only=False, config_source=2, is_default=False,
                  is_sensitive=False, synonyms=[], config_type=5, documentation=None),
            entry(name="log.roll.ms", value="604800000", read_only=False, config_source=5, is_default=True,
                  is_sensitive=False, synonyms=[], config_type=5, documentation=None),
        ])])  # fmt: skip
    [resource] = admin.read_describe_configs(_answer(32, 4, response), 4)["resources"]
    assert resource["resource_type"] == "broker" and resource["resource_name"] == "1"
    assert [(c["name"], c["value"], c["source"], c["is_default"]) for c in resource["configs"]] == [
        ("retention_ms", 1000, "broker", False),  # typed by Kafka's config_type, as kraftpy's answers were
        ("segment_ms", 604800000, "default", True),
    ]


def test_describe_topic_partitions_carries_the_cursor_and_reads_back_the_elr() -> None:
    request = _through_the_wire(
        75, 0, admin.build_describe_topic_partitions(BODIES["/kafka/describe_topic_partitions"], 0)
    )
    assert [t.name for t in request.topics] == ["a", "b"] and request.response_partition_limit == 2000
    assert (request.cursor.topic_name, request.cursor.partition_index) == ("a", 3)
    first = admin.build_describe_topic_partitions({"topics": ["a"], "response_partition_limit": 5, "cursor": None}, 0)
    assert _through_the_wire(75, 0, first).cursor is None

    cls = message_classes(75)[1]
    topic_cls = cls.DescribeTopicPartitionsResponseTopic
    topic_id = uuid.uuid4()
    response = cls(
        throttle_time_ms=0,
        topics=[
            topic_cls(
                error_code=0,
                name="a",
                topic_id=topic_id,
                is_internal=False,
                partitions=[
                    topic_cls.DescribeTopicPartitionsResponsePartition(
                        error_code=0,
                        partition_index=3,
                        leader_id=-1,
                        leader_epoch=4,
                        replica_nodes=[1, 2, 3],
                        isr_nodes=[],
                        eligible_leader_replicas=[2],
                        last_known_elr=[1],
                        offline_replicas=[1],
                    )
                ],
                topic_authorized_operations=-(2**31),
            ),
            topic_cls(error_code=3, name="b", topic_id=uuid.UUID(int=0), is_internal=False, partitions=[]),
        ],
        next_cursor=cls.Cursor(topic_name="a", partition_index=4),
    )
    answer = admin.read_describe_topic_partitions(_answer(75, 0, response), 0)
    a, b = answer["topics"]
    assert a["topic_id"] == str(topic_id) and a["partitions"] == [
        {
            "error_code": 0,
            "partition": 3,
            "leader_id": -1,
            "leader_epoch": 4,
            "replica_nodes": [1, 2, 3],
            "isr_nodes": [],
            "elr": [2],
            "last_known_elr": [1],
        }
    ]
    assert b["error_code"] == 3 and b["topic_id"] is None
    assert answer["next_cursor"] == {"topic_name": "a", "partition_index": 4}
