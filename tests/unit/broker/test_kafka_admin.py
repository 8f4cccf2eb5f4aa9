"""The admin APIs' pure translation: every version through the codec, answers from the real controller decisions.

Requests are encoded and decoded at each version, as a client would send
them; the controller's answers come from its real decisions
(replication_control, config_control) over a real image, through the
`/controller/*` wire format.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeLogDirsRequest
from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
)

from kraftpy.broker.kafka import admin_cluster, admin_configs, admin_topics
from kraftpy.broker.kafka.admin_configs import BROKER, TOPIC, ConfigSource
from kraftpy.broker.kafka.shell import admin_apis
from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.metadata.controller import config_control, replication_control, wire
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import (
    ConfigRecord,
    Listener,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, decode_response, encode_request, encode_response
from kraftpy.protocol.kafka.shell.listener import RequestContext
from kraftpy.protocol.shell.rpc import RpcClient, make_app

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def versions(api_key: int) -> list[int]:
    r = SUPPORTED_APIS[api_key]
    return list(range(r.min_version, r.max_version + 1))


def through_codec(api_key: int, version: int, request: Any) -> Any:
    """The request as the broker decodes it from a client's frame of this version."""
    frame = encode_request(RequestHeader(api_key, version, 1, "test"), request)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version) == (api_key, version)
    return decoded


def response_through_codec(api_key: int, version: int, response: Any) -> Any:
    """The response as a client decodes it at this version."""
    header = RequestHeader(api_key, version, 9, "test")
    frame = encode_response(header, response)
    correlation_id, decoded = decode_response(header, frame[4:])
    assert correlation_id == 9
    return decoded


def image(*extra: Any) -> MetadataImage:
    records: list[Any] = []
    for broker_id in (1, 2, 3):
        listeners = (
            Listener("PLAINTEXT", "127.0.0.1", 9091 + broker_id),
            Listener("OTHER", "10.0.0.1", 19090 + broker_id),
        )
        records.append(RegisterBrokerRecord(broker_id, f"inc-{broker_id}", broker_id, listeners, None))
        if broker_id != 3:  # broker 3 stays fenced
            records.append(UnfenceBrokerRecord(broker_id, broker_id))
    records += [TopicRecord("orders", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1, 2), (1, 2), 1)]
    return apply_records(MetadataImage.EMPTY, [*records, *extra])


def controller(route: str, body: dict[str, Any] | None, img: MetadataImage) -> dict[str, Any] | None:
    """The controller's real answer to `body` on `route`, through the /controller wire format."""
    if body is None:
        return None
    request = wire.decode_request(route, body)
    config = ControllerConfig(cluster_id="c", num_partitions=1, default_replication_factor=2)
    rng = random.Random(7)
    decide = {
        "create_topics": lambda: replication_control.create_topics(img, request, config, rng).response,
        "delete_topics": lambda: replication_control.delete_topics(img, request).response,
        "create_partitions": lambda: replication_control.create_partitions(img, request, config, rng).response,
        "elect_leaders": lambda: replication_control.elect_leaders(img, request, config.min_insync_replicas).response,
        "describe_configs": lambda: config_control.describe_configs(img, request),
        "incremental_alter_configs": lambda: config_control.incremental_alter_configs(img, request).response,
    }
    return wire.encode_response(route, decide[route]())


# --- CreateTopics -------------------------------------------------------------------------------------


def create_request() -> CreateTopicsRequest:
    T = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(
        topics=[
            T(
                name="payments",
                num_partitions=3,
                replication_factor=2,
                assignments=[],
                configs=[
                    T.CreatableTopicConfig(name="retention.ms", value="3600000"),
                    T.CreatableTopicConfig(name="cleanup.policy", value=None),  # null: no override
                ],
            ),
            T(name="orders", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            T(name="typo", num_partitions=1, replication_factor=1, assignments=[],
              configs=[T.CreatableTopicConfig(name="retention_ms", value="1")]),
            T(name="too-many", num_partitions=1, replication_factor=5, assignments=[], configs=[]),
            T(name="placed", num_partitions=-1, replication_factor=-1,
              assignments=[T.CreatableReplicaAssignment(partition_index=0, broker_ids=[2, 1])], configs=[]),
        ],
        timeout_ms=5000,
        validate_only=False,
    )  # fmt: skip


@pytest.mark.parametrize("version", versions(admin_apis.CREATE_TOPICS))
def test_create_topics_every_version(version: int) -> None:
    img = image(ConfigRecord(BROKER, "", "segment_ms", 1000))
    request = through_codec(admin_apis.CREATE_TOPICS, version, create_request())
    plan = admin_topics.create_topics_plan(request)
    assert plan.body is not None
    sent = {t["name"]: t for t in plan.body["topics"]}
    assert sent["payments"]["configs"] == {"retention_ms": "3600000"}
    assert sent["placed"]["assignments"] == [{"partition": 0, "broker_ids": [2, 1]}]
    assert "typo" not in sent and plan.errors[2].code == ErrorCode.INVALID_CONFIG  # Kafka's names only

    answer = controller("create_topics", plan.body, img)
    defaults = admin_configs.cluster_defaults(controller("describe_configs", admin_configs.CLUSTER_DEFAULTS_BODY, img))
    assert defaults == {"segment_ms": 1000}
    response = admin_topics.create_topics_response(request, version, plan, answer, defaults)
    got = {t.name: t for t in response_through_codec(admin_apis.CREATE_TOPICS, version, response).topics}
    assert [t.name for t in response.topics] == ["payments", "orders", "typo", "too-many", "placed"]
    assert got["payments"].error_code == 0
    assert got["orders"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert got["typo"].error_code == ErrorCode.INVALID_CONFIG
    assert got["too-many"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert got["placed"].error_code == 0
    if version >= 1:
        assert got["orders"].error_message == "Topic 'orders' already exists."
        assert "retention_ms" in got["typo"].error_message
    if version >= 5:
        payments = got["payments"]
        assert (payments.num_partitions, payments.replication_factor) == (3, 2)
        assert (got["placed"].num_partitions, got["placed"].replication_factor) == (1, 2)
        configs = {c.name: (c.value, c.config_source) for c in payments.configs}
        assert configs["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert configs["segment.ms"] == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert configs["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)
        assert configs["unclean.leader.election.enable"] == ("false", ConfigSource.DEFAULT_CONFIG)
        assert len(configs) == 23
    else:
        assert not got["payments"].configs
    if version >= 7:
        assert got["payments"].topic_id not in (None, admin_topics.ZERO_UUID)


@pytest.mark.parametrize("version", versions(admin_apis.CREATE_TOPICS))
def test_create_topics_error_response_names_every_topic(version: int) -> None:
    request = through_codec(admin_apis.CREATE_TOPICS, version, create_request())
    error = KafkaError("the active controller is not known yet", ErrorCode.NOT_CONTROLLER)
    got = response_through_codec(
        admin_apis.CREATE_TOPICS, version, admin_topics.create_topics_error(request, version, error)
    )
    assert [(t.name, t.error_code) for t in got.topics] == [(t.name, 41) for t in request.topics]


# --- DeleteTopics -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(admin_apis.DELETE_TOPICS))
def test_delete_topics_every_version(version: int) -> None:
    img = image()
    missing_id = uuid.UUID(int=5)
    if version >= 6:
        S = DeleteTopicsRequest.DeleteTopicState
        raw = DeleteTopicsRequest(
            topics=[S(name=None, topic_id=TOPIC_ID), S(name="nope", topic_id=admin_topics.ZERO_UUID),
                    S(name=None, topic_id=missing_id)],
            timeout_ms=5000,
        )  # fmt: skip
    else:
        raw = DeleteTopicsRequest(topic_names=["orders", "nope"], timeout_ms=5000)
    request = through_codec(admin_apis.DELETE_TOPICS, version, raw)
    plan = admin_topics.delete_topics_plan(request, version)
    answer = controller("delete_topics", plan.body, img)
    response = admin_topics.delete_topics_response(request, version, plan, answer)
    got = response_through_codec(admin_apis.DELETE_TOPICS, version, response).responses
    if version >= 6:
        assert [(r.name, r.topic_id, r.error_code) for r in got] == [
            ("orders", TOPIC_ID, 0),
            ("nope", None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # the codec reads the zero id as None
            (None, missing_id, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
    else:
        assert [(r.name, r.error_code) for r in got] == [("orders", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    if version >= 5:
        assert got[1].error_message == "Topic 'nope' does not exist"
        assert got[0].error_message is None


# --- CreatePartitions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(admin_apis.CREATE_PARTITIONS))
def test_create_partitions_every_version(version: int) -> None:
    img = image()
    T = CreatePartitionsRequest.CreatePartitionsTopic
    raw = CreatePartitionsRequest(
        topics=[
            T(name="orders", count=3, assignments=[T.CreatePartitionsAssignment(broker_ids=[2, 1]),
                                                   T.CreatePartitionsAssignment(broker_ids=[1, 2])]),
            T(name="nope", count=2, assignments=None),
        ],
        timeout_ms=5000,
        validate_only=True,
    )  # fmt: skip
    request = through_codec(admin_apis.CREATE_PARTITIONS, version, raw)
    body = admin_topics.create_partitions_body(request)
    assert body["topics"][0]["assignments"] == [
        {"partition": 0, "broker_ids": [2, 1]},
        {"partition": 1, "broker_ids": [1, 2]},
    ]
    assert "assignments" not in body["topics"][1] and body["validate_only"] is True
    response = admin_topics.create_partitions_response(request, controller("create_partitions", body, img))
    got = response_through_codec(admin_apis.CREATE_PARTITIONS, version, response).results
    assert [(r.name, r.error_code) for r in got] == [("orders", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # Shrinking is INVALID_PARTITIONS, as Kafka.
    body["topics"] = [{"name": "orders", "count": 1}]
    answer = controller("create_partitions", body, img)
    assert answer is not None and answer["topics"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS


# --- DeleteRecords --------------------------------------------------------------------------------------


def test_delete_records_target_is_kafkas_decision() -> None:
    assert admin_topics.delete_records_target(5, log_start_offset=0, high_watermark=10) == 5
    assert admin_topics.delete_records_target(-1, log_start_offset=0, high_watermark=10) == 10  # -1: the HW
    assert admin_topics.delete_records_target(3, log_start_offset=4, high_watermark=10) == 4  # already gone
    for offset in (11, -2):
        with pytest.raises(KafkaError) as info:
            admin_topics.delete_records_target(offset, log_start_offset=0, high_watermark=10)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_low_watermark_waits_for_every_live_replica() -> None:
    assert admin_topics.low_watermark(10, {2: 10, 3: 4}, alive={2, 3}) == 4
    assert admin_topics.low_watermark(10, {2: 10, 3: 4}, alive={2}) == 10  # broker 3 is fenced: not waited for
    assert admin_topics.low_watermark(10, {2: -1}, alive={2}) == -1  # not fetched yet
    assert admin_topics.low_watermark(7, {}, alive=set()) == 7


@pytest.mark.parametrize("version", versions(admin_apis.DELETE_RECORDS))
def test_delete_records_every_version(version: int) -> None:
    T = DeleteRecordsRequest.DeleteRecordsTopic
    raw = DeleteRecordsRequest(
        topics=[T(name="orders", partitions=[T.DeleteRecordsPartition(partition_index=0, offset=4)])], timeout_ms=100
    )
    request = through_codec(admin_apis.DELETE_RECORDS, version, raw)
    response = admin_topics.delete_records_response([("orders", [(0, 4, 0)])])
    (topic,) = response_through_codec(admin_apis.DELETE_RECORDS, version, response).topics
    assert (topic.name, [(p.partition_index, p.low_watermark, p.error_code) for p in topic.partitions]) == (
        "orders",
        [(0, 4, 0)],
    )
    error = admin_topics.delete_records_error(request, version, KafkaError("x", ErrorCode.NOT_LEADER_OR_FOLLOWER))
    (topic,) = response_through_codec(admin_apis.DELETE_RECORDS, version, error).topics
    assert [(p.low_watermark, p.error_code) for p in topic.partitions] == [(-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)]


# --- DescribeConfigs ------------------------------------------------------------------------------------


def describe_request(*resources: tuple[int, str, list[str] | None], synonyms: bool = True, docs: bool = True) -> Any:
    R = DescribeConfigsRequest.DescribeConfigsResource
    return DescribeConfigsRequest(
        resources=[R(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources],
        include_synonyms=synonyms,
        include_documentation=docs,
    )


def describe(version: int, img: MetadataImage, raw: Any, broker_id: int = 1, stale: bool = False) -> list[Any]:
    """DescribeConfigs answered from `img` (the controller's); `stale`: this broker's image has none of it yet."""
    request = through_codec(admin_apis.DESCRIBE_CONFIGS, version, raw)
    plan = admin_configs.describe_configs_plan(request, broker_id)
    answer = controller("describe_configs", plan.body, img)
    local = image() if stale else img
    overrides = {
        (r.resource_type, r.resource_name): local.configs.get(r.resource_type, r.resource_name)
        for r in request.resources
    }
    response = admin_configs.describe_configs_response(request, version, plan, answer, overrides)
    return response_through_codec(admin_apis.DESCRIBE_CONFIGS, version, response).results


@pytest.mark.parametrize("stale", [False, True])
@pytest.mark.parametrize("version", versions(admin_apis.DESCRIBE_CONFIGS))
def test_describe_topic_configs_every_version(version: int, stale: bool) -> None:
    img = image(
        ConfigRecord(TOPIC, "orders", "retention_ms", 3_600_000),
        ConfigRecord(TOPIC, "orders", "cleanup_policy", "compact,delete"),
        ConfigRecord(BROKER, "", "segment_ms", 1000),
        ConfigRecord(TOPIC, "orders", "segment_ms", 2000),
    )
    (result,) = describe(version, img, describe_request((TOPIC, "orders", None)), stale=stale)
    assert (result.error_code, result.resource_type, result.resource_name) == (0, TOPIC, "orders")
    configs = {c.name: c for c in result.configs}
    assert len(configs) == 23 and all("_" not in name for name in configs)
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("3600000", 1)
    assert configs["cleanup.policy"].value == "compact,delete"
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == ("1073741824", 5)
    assert configs["preallocate"].value == "false"
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"
    assert not any(c.read_only or c.is_sensitive for c in result.configs)
    # Synonyms, in Kafka's precedence: the topic's own, the cluster-wide broker default, Kafka's default.
    assert [(s.name, s.value, s.source) for s in configs["segment.ms"].synonyms] == [
        ("segment.ms", "2000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.roll.ms", "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.roll.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    if version >= 3:
        assert configs["retention.ms"].config_type == 5  # LONG
        assert configs["cleanup.policy"].config_type == 7  # LIST
        assert configs["preallocate"].config_type == 1  # BOOLEAN
        assert configs["retention.ms"].documentation


@pytest.mark.parametrize("stale", [False, True])
@pytest.mark.parametrize("version", versions(admin_apis.DESCRIBE_CONFIGS))
def test_describe_configs_keys_synonyms_and_errors(version: int, stale: bool) -> None:
    img = image(ConfigRecord(BROKER, "1", "retention_ms", 5), ConfigRecord(BROKER, "", "segment_ms", 9))
    results = describe(
        version,
        img,
        describe_request(
            (TOPIC, "orders", ["retention.ms", "no.such.config"]),  # an unknown key is left out, as Kafka
            (TOPIC, "nope", None),
            (BROKER, "1", None),
            (BROKER, "", None),
            (BROKER, "2", None),  # another broker's: Kafka's INVALID_REQUEST
            (8, "kafka.server", None),  # BROKER_LOGGER: not served
            synonyms=False,
            docs=False,
        ),
        stale=stale,
    )
    orders, nope, me, default, other, logger = results
    assert [c.name for c in orders.configs] == ["retention.ms"] and orders.configs[0].synonyms == []
    if version >= 3:
        assert orders.configs[0].documentation is None  # not asked for
    assert nope.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and nope.error_message
    broker = {c.name: (c.value, c.config_source) for c in me.configs}
    assert broker["log.retention.ms"] == ("5", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert broker["log.roll.ms"] == ("9", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert broker["message.max.bytes"] == ("1048588", ConfigSource.DEFAULT_CONFIG)
    assert "retention.ms" not in broker
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [
        ("log.roll.ms", "9", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]
    assert other.error_code == ErrorCode.INVALID_REQUEST and "expected 1" in other.error_message
    assert logger.error_code == ErrorCode.INVALID_REQUEST


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------------------


def incremental_request(resource_type: int, name: str, *ops: tuple[str, int, str | None]) -> Any:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    return IncrementalAlterConfigsRequest(
        resources=[R(resource_type=resource_type, resource_name=name,
                     configs=[C(name=n, config_operation=op, value=v) for n, op, v in ops])],
        validate_only=False,
    )  # fmt: skip


def incremental(version: int, img: MetadataImage, raw: Any) -> tuple[Any, dict[str, Any] | None]:
    request = through_codec(admin_apis.INCREMENTAL_ALTER_CONFIGS, version, raw)
    current = None
    if admin_configs.needs_current_values(request):
        current = admin_configs.current_values(
            controller("describe_configs", admin_configs.current_values_body(request), img)
        )
    plan = admin_configs.incremental_alter_plan(request, 1, current)
    answer = controller("incremental_alter_configs", plan.body, img)
    response = admin_configs.incremental_alter_response(request, plan, answer)
    return response_through_codec(admin_apis.INCREMENTAL_ALTER_CONFIGS, version, response).responses, plan.body


@pytest.mark.parametrize("version", versions(admin_apis.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_ops_every_version(version: int) -> None:
    img = image(ConfigRecord(TOPIC, "orders", "retention_ms", 5))
    raw = incremental_request(
        TOPIC, "orders", ("retention.ms", 1, None), ("segment.ms", 0, "1000"), ("cleanup.policy", 2, "compact")
    )
    (result,), body = incremental(version, img, raw)
    assert (result.error_code, result.error_message, result.resource_name) == (0, None, "orders")
    assert body is not None
    assert body["resources"][0]["configs"] == [
        {"name": "retention_ms", "op": "delete"},
        {"name": "segment_ms", "op": "set", "value": "1000"},
        {"name": "cleanup_policy", "op": "set", "value": "delete,compact"},  # APPEND to the default
    ]
    img = image(ConfigRecord(TOPIC, "orders", "cleanup_policy", "compact,delete"))
    (result,), body = incremental(version, img, incremental_request(TOPIC, "orders", ("cleanup.policy", 3, "delete")))
    assert result.error_code == 0
    assert body is not None and body["resources"][0]["configs"] == [
        {"name": "cleanup_policy", "op": "set", "value": "compact"}
    ]


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ((("no.such.config", 0, "1"),), ErrorCode.INVALID_CONFIG),
        ((("retention.ms", 0, "soon"),), ErrorCode.INVALID_CONFIG),
        ((("retention.ms", 2, "1"),), ErrorCode.INVALID_CONFIG),  # APPEND to a scalar
        ((("retention.ms", 0, None),), ErrorCode.INVALID_REQUEST),  # SET null
        ((("retention.ms", 0, "1"), ("retention.ms", 1, None)), ErrorCode.INVALID_REQUEST),  # twice
        ((("retention.ms", 9, "1"),), ErrorCode.INVALID_REQUEST),  # no such operation
    ],
)
def test_incremental_alter_errors_are_per_resource(
    ops: tuple[tuple[str, int, str | None], ...], code: ErrorCode
) -> None:
    img = image()
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    raw = IncrementalAlterConfigsRequest(
        resources=[
            R(resource_type=TOPIC, resource_name="orders",
              configs=[C(name=n, config_operation=o, value=v) for n, o, v in ops]),
            R(resource_type=BROKER, resource_name="",
              configs=[C(name="log.retention.ms", config_operation=0, value="7")]),
        ],
        validate_only=True,
    )  # fmt: skip
    results, _ = incremental(1, img, raw)
    assert [r.error_code for r in results] == [code, 0]
    assert results[0].error_message


@pytest.mark.parametrize("version", versions(admin_apis.ALTER_CONFIGS))
def test_legacy_alter_configs_replaces_every_version(version: int) -> None:
    img = image(ConfigRecord(TOPIC, "orders", "retention_ms", 5))
    R = AlterConfigsRequest.AlterConfigsResource
    raw = AlterConfigsRequest(
        resources=[
            R(
                resource_type=TOPIC,
                resource_name="orders",
                configs=[R.AlterableConfig(name="segment.ms", value="1000")],
            ),
            R(resource_type=TOPIC, resource_name="nope", configs=[]),
        ],
        validate_only=False,
    )
    request = through_codec(admin_apis.ALTER_CONFIGS, version, raw)
    plan = admin_configs.legacy_alter_plan(request, 1)
    assert plan.body is not None
    ops = plan.body["resources"][0]["configs"]
    assert ops[0] == {"name": "segment_ms", "op": "set", "value": "1000"}
    assert {"name": "retention_ms", "op": "delete"} in ops and len(ops) == 23
    answer = controller("incremental_alter_configs", plan.body, img)
    response = admin_configs.legacy_alter_response(request, plan, answer)
    got = response_through_codec(admin_apis.ALTER_CONFIGS, version, response).responses
    assert [(r.resource_name, r.error_code) for r in got] == [
        ("orders", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]


# --- DescribeCluster, ElectLeaders, DescribeLogDirs -------------------------------------------------------


@pytest.mark.parametrize("version", versions(admin_apis.DESCRIBE_CLUSTER))
def test_describe_cluster_every_version(version: int) -> None:
    raw = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
    )
    request = through_codec(admin_apis.DESCRIBE_CLUSTER, version, raw)
    response = admin_cluster.describe_cluster_response(
        request, version, image(), listener_name="PLAINTEXT", cluster_id="cid", controller_id=2
    )
    got = response_through_codec(admin_apis.DESCRIBE_CLUSTER, version, response)
    assert (got.error_code, got.cluster_id, got.controller_id) == (0, "cid", 2)
    brokers = [(b.broker_id, b.host, b.port) for b in got.brokers]
    if version >= 2:  # fenced brokers only when asked (v2)
        assert brokers == [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093), (3, "127.0.0.1", 9094)]
        assert [b.is_fenced for b in got.brokers] == [False, False, True]
    else:
        assert brokers == [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093)]
    if version >= 1:
        assert got.endpoint_type == 1
        raw = DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=False
        )
        request = through_codec(admin_apis.DESCRIBE_CLUSTER, version, raw)
        response = admin_cluster.describe_cluster_response(
            request, version, image(), listener_name="PLAINTEXT", cluster_id="cid", controller_id=2
        )
        assert response_through_codec(admin_apis.DESCRIBE_CLUSTER, version, response).error_code == 114


def test_describe_cluster_lists_the_requests_listener() -> None:
    request = DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
    response = admin_cluster.describe_cluster_response(
        request, 1, image(), listener_name="OTHER", cluster_id="cid", controller_id=1
    )
    assert [(b.host, b.port) for b in response.brokers] == [("10.0.0.1", 19091), ("10.0.0.1", 19092)]


@pytest.mark.parametrize("version", versions(admin_apis.ELECT_LEADERS))
def test_elect_leaders_every_version(version: int) -> None:
    T = ElectLeadersRequest.TopicPartitions
    raw = ElectLeadersRequest(election_type=1, topic_partitions=[T(topic="orders", partitions=[0, 7])], timeout_ms=5000)
    request = through_codec(admin_apis.ELECT_LEADERS, version, raw)
    body = admin_cluster.elect_leaders_body(request, version)
    assert body == {
        "election_type": "unclean" if version >= 1 else "preferred",  # v0 has no type: preferred
        "topic_partitions": [{"topic": "orders", "partitions": [0, 7]}],
    }
    response = admin_cluster.elect_leaders_response(controller("elect_leaders", body, image()))
    got = response_through_codec(admin_apis.ELECT_LEADERS, version, response)
    (result,) = got.replica_election_results
    codes = {p.partition_id: p.error_code for p in result.partition_result}
    assert codes == {0: ErrorCode.ELECTION_NOT_NEEDED, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert all(p.error_message for p in result.partition_result)
    everything = through_codec(
        admin_apis.ELECT_LEADERS, version, ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1)
    )
    assert admin_cluster.elect_leaders_body(everything, version)["topic_partitions"] is None
    error = admin_cluster.elect_leaders_error(request, version, KafkaError("slow", ErrorCode.REQUEST_TIMED_OUT))
    got = response_through_codec(admin_apis.ELECT_LEADERS, version, error)
    assert [p.error_code for p in got.replica_election_results[0].partition_result] == [7, 7]


@pytest.mark.parametrize("version", versions(admin_apis.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs_every_version(version: int) -> None:
    T = DescribeLogDirsRequest.DescribableLogDirTopic
    hosted = [
        admin_cluster.HostedLog("orders", 0, 1234, 0),
        admin_cluster.HostedLog("orders", 1, 99, 0),
        admin_cluster.HostedLog("other", 0, 5, 0),
    ]
    for topics, expected in (
        (None, {"orders": [(0, 1234), (1, 99)], "other": [(0, 5)]}),
        ([T(topic="orders", partitions=[1])], {"orders": [(1, 99)]}),
    ):
        request = through_codec(admin_apis.DESCRIBE_LOG_DIRS, version, DescribeLogDirsRequest(topics=topics))
        response = admin_cluster.describe_log_dirs_response(
            request, "/data/node-1/partitions", hosted, total_bytes=1000, usable_bytes=400
        )
        got = response_through_codec(admin_apis.DESCRIBE_LOG_DIRS, version, response)
        (result,) = got.results
        assert (result.error_code, result.log_dir) == (0, "/data/node-1/partitions")
        assert {
            t.name: [(p.partition_index, p.partition_size) for p in t.partitions] for t in result.topics
        } == expected
        if version >= 4:
            assert (result.total_bytes, result.usable_bytes) == (1000, 400)


@pytest.mark.parametrize("api_key", sorted(admin_apis.HANDLERS))
def test_every_error_response_encodes_at_every_version(api_key: int) -> None:
    """The dispatcher sends these when a handler fails: each must encode, at every version we advertise."""
    samples = {
        admin_apis.CREATE_TOPICS: create_request(),
        admin_apis.DELETE_TOPICS: DeleteTopicsRequest(topic_names=["a"], topics=[], timeout_ms=1),
        admin_apis.DELETE_RECORDS: DeleteRecordsRequest(topics=[], timeout_ms=1),
        admin_apis.CREATE_PARTITIONS: CreatePartitionsRequest(topics=[], timeout_ms=1, validate_only=False),
        admin_apis.DESCRIBE_CONFIGS: describe_request((TOPIC, "orders", None)),
        admin_apis.ALTER_CONFIGS: AlterConfigsRequest(resources=[], validate_only=False),
        admin_apis.INCREMENTAL_ALTER_CONFIGS: incremental_request(TOPIC, "orders", ("retention.ms", 0, "1")),
        admin_apis.DESCRIBE_CLUSTER: DescribeClusterRequest(include_cluster_authorized_operations=False),
        admin_apis.ELECT_LEADERS: ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1),
        admin_apis.DESCRIBE_LOG_DIRS: DescribeLogDirsRequest(topics=None),
    }
    for version in versions(api_key):
        request = through_codec(api_key, version, samples[api_key])
        response = admin_apis.HANDLERS[api_key].error_response(
            request, version, KafkaError("no", ErrorCode.NOT_CONTROLLER)
        )
        response_through_codec(api_key, version, response)


def _broker_apis_forwarding_to(controller: tuple[str, int], rpc: RpcClient) -> BrokerApis:
    """The dispatcher of a broker whose controller channel leads to `controller` over a real RPC client,
    with a channel request timeout far longer than any test: only the request's own deadline can end a wait."""
    channel = ControllerChannel(rpc, lambda: controller, request_timeout_ms=600_000)
    replica_manager = SimpleNamespace(settings=ReplicaManagerSettings(), controller_channel=channel)
    broker = SimpleNamespace(
        node=SimpleNamespace(config=SimpleNamespace(node_id=1), cluster_id="c"),
        metadata=SimpleNamespace(image=image()),
        replica_manager=replica_manager,
    )
    return BrokerApis(broker)


async def test_the_requests_timeout_bounds_the_wait_for_a_controller_that_never_answers() -> None:
    """A partitioned controller: CreateTopics with timeout_ms 50 is REQUEST_TIMED_OUT, through the real
    dispatcher, channel and RPC (the outer wait_for only turns a hang into a failure)."""
    released = asyncio.Event()

    async def hang(body: dict[str, Any]) -> dict[str, Any]:
        await released.wait()
        return {}

    runner = web.AppRunner(make_app({"/controller/create_topics": hang}), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rpc = RpcClient(request_timeout_ms=600_000)
    try:
        apis = _broker_apis_forwarding_to(("127.0.0.1", site._server.sockets[0].getsockname()[1]), rpc)
        request = through_codec(admin_apis.CREATE_TOPICS, 7, create_request())
        request.timeout_ms = 50
        ctx = RequestContext(RequestHeader(admin_apis.CREATE_TOPICS, 7, 1, "t"), "PLAINTEXT", "127.0.0.1", 1)
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(admin_apis.handle_create_topics(apis, ctx, request), 30)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    finally:
        released.set()
        await rpc.close()
        await runner.cleanup()
