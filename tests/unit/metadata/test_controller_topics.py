"""CreateTopics, DeleteTopics, CreatePartitions and configs, including the uncommitted image."""

from __future__ import annotations

import pytest

from kraftpy.metadata.configs import ConfigResourceType, ConfigSource
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.records import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from kraftpy.protocol.errors import ErrorCode

CONFIG = ControllerConfig(
    cluster_id="test-cluster",
    auto_leader_rebalance_enable=False,
    metadata_max_idle_interval_ms=0,
    max_partitions_per_topic=100,
)


@pytest.fixture
def h() -> ControllerHarness:
    harness = ControllerHarness(CONFIG)
    harness.start_brokers([0, 1, 2])
    return harness


def create(h: ControllerHarness, *topics: CreatableTopic, validate_only: bool = False):
    result = h.send(CreateTopicsRequest(tuple(topics), validate_only))
    return result, result.response.results


def create_error(h: ControllerHarness, topic: CreatableTopic) -> tuple[ErrorCode, str]:
    result, (item,) = create(h, topic)
    assert item.error is not None and result.records == ()
    return item.error.code, item.error.message


# --- CreateTopics -----------------------------------------------------------------------------------


def test_create_topic_writes_topic_partitions_and_configs(h) -> None:
    result, (item,) = create(h, CreatableTopic("orders", 6, 3, configs={"retention.ms": "60000"}))
    assert item.error is None and item.num_partitions == 6 and item.replication_factor == 3
    assert item.configs == {"retention_ms": 60000}
    assert isinstance(result.records[0], TopicRecord) and result.records[0].topic_id == item.topic_id
    assert [type(r) for r in result.records[1:7]] == [PartitionRecord] * 6
    assert result.records[7] == ConfigRecord(2, "orders", "retention_ms", 60000)
    topic = h.committed.topic("orders")
    assert topic.topic_id == item.topic_id and len(topic.partitions) == 6
    for p in topic.partitions:
        assert len(set(p.replicas)) == 3 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert sorted(p.leader for p in topic.partitions) == [0, 0, 1, 1, 2, 2]
    assert h.committed.topic_config("orders")["retention_ms"] == 60000


def test_defaults_come_from_the_controller_config(h) -> None:
    _, (item,) = create(h, CreatableTopic("d"))
    assert (item.num_partitions, item.replication_factor) == (1, 1)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "can't be empty"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * 250, "longer than 249"),
        ("bad name", "character other than"),
        ("bad/name", "character other than"),
        ("ünïcode", "character other than"),
    ],
)
def test_illegal_names_are_invalid_topic_exception(h, name, fragment) -> None:
    code, message = create_error(h, CreatableTopic(name))
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION and fragment in message


def test_name_rules_accept_the_legal_extremes(h) -> None:
    _, results = create(h, CreatableTopic("x" * 249), CreatableTopic("A-z_0.9"), CreatableTopic("..."))
    assert [r.error for r in results] == [None, None, None]


def test_existing_and_colliding_names(h) -> None:
    create(h, CreatableTopic("metrics.cpu"))
    assert create_error(h, CreatableTopic("metrics.cpu"))[0] == ErrorCode.TOPIC_ALREADY_EXISTS
    code, message = create_error(h, CreatableTopic("metrics_cpu"))
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION and "collides with existing topic: metrics.cpu" in message
    # ... also between two topics of one request
    _, (first, second) = create(h, CreatableTopic("a.b"), CreatableTopic("a_b"))
    assert first.error is None and second.error.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_the_metadata_log_name_is_never_a_topic(h) -> None:
    assert create_error(h, CreatableTopic("__cluster_metadata")) == (
        ErrorCode.INVALID_REQUEST,
        "Creation of internal topic __cluster_metadata is prohibited.",
    )


def test_duplicate_names_in_one_request_are_invalid_request(h) -> None:
    _result, results = create(h, CreatableTopic("dup"), CreatableTopic("dup"), CreatableTopic("ok"))
    assert [r.error.code if r.error else None for r in results] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        None,
    ]
    assert h.committed.topic("dup") is None and h.committed.topic("ok") is not None


@pytest.mark.parametrize(
    ("topic", "code", "fragment"),
    [
        (CreatableTopic("t", 0), ErrorCode.INVALID_PARTITIONS, "non-positive"),
        (CreatableTopic("t", -5), ErrorCode.INVALID_PARTITIONS, "non-positive"),
        (CreatableTopic("t", 101), ErrorCode.INVALID_PARTITIONS, "limit of 100 partitions"),
        (CreatableTopic("t", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR, "larger than 0"),
        (CreatableTopic("t", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR, "only 3 broker(s)"),
        (CreatableTopic("t", configs={"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG, "retention_ms"),
        (CreatableTopic("t", configs={"retention.days": 1}), ErrorCode.INVALID_CONFIG, "retention.days"),
        (CreatableTopic("t", configs=[("a", 1)]), ErrorCode.INVALID_REQUEST, "mapping"),
        (CreatableTopic("t", 2, assignments=((0,),)), ErrorCode.INVALID_REQUEST, "Both"),
        (CreatableTopic("t", assignments=()), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "must not be empty"),
        (CreatableTopic("t", assignments=((0, 0),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 0 more than once"),
        (CreatableTopic("t", assignments=((1, 0, 0),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 0 more than"),
        (CreatableTopic("t", assignments=((0, 7),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 7, but no such"),
        (CreatableTopic("t", assignments=((0, 1), (2,))), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "not consistent"),
        (CreatableTopic("t", assignments=((),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "non-empty list"),
        (CreatableTopic("t", assignments=((0,),) * 101), ErrorCode.INVALID_PARTITIONS, "limit of 100"),
    ],
)
def test_create_topic_validation(h, topic, code, fragment) -> None:
    got_code, message = create_error(h, topic)
    assert got_code == code and fragment in message


def test_a_topic_of_exactly_the_partition_limit_is_created(h) -> None:
    _, (item,) = create(h, CreatableTopic("at-limit", 100))
    assert item.error is None and len(h.committed.topic("at-limit").partitions) == 100


def test_replication_factor_counts_only_unfenced_brokers(h) -> None:
    h.register(3)  # registered but fenced
    assert create_error(h, CreatableTopic("t", 1, 4))[0] == ErrorCode.INVALID_REPLICATION_FACTOR


def test_manual_assignment_keeps_fenced_replicas_out_of_the_isr(h) -> None:
    h.register(3)
    _, (item,) = create(h, CreatableTopic("m", assignments=((3, 1), (2, 3))))
    assert item.error is None
    p0, p1 = h.committed.topic("m").partitions
    assert (p0.replicas, p0.isr, p0.leader) == ((3, 1), (1,), 1)
    assert (p1.replicas, p1.isr, p1.leader) == ((2, 3), (2,), 2)
    code, message = create_error(h, CreatableTopic("n", assignments=((3,),)))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "fenced" in message


def test_validate_only_writes_nothing(h) -> None:
    result, (item,) = create(h, CreatableTopic("v", 3, 2), validate_only=True)
    assert item.error is None and item.num_partitions == 3 and item.topic_id is None and result.records == ()
    assert h.committed.topic("v") is None


def test_second_create_sees_the_uncommitted_first() -> None:
    h = ControllerHarness(CONFIG, auto_commit=False)
    h.start_brokers([0])
    before = len(h.released)
    first = h.send(CreateTopicsRequest((CreatableTopic("once"),)))
    second = h.send(CreateTopicsRequest((CreatableTopic("once"),)))
    assert first.response.results[0].error is None and first.records
    assert second.response.results[0].error.code == ErrorCode.TOPIC_ALREADY_EXISTS and second.records == ()
    assert h.committed.topic("once") is None and h.latest.topic("once") is not None
    # Neither answer goes out before the first create commits.
    assert h.commit(0) == [] and len(h.released) == before
    released = h.commit()
    assert first in released and second in released and released.index(first) < released.index(second)


# --- DeleteTopics -----------------------------------------------------------------------------------


def test_delete_topics_by_name_and_id(h) -> None:
    _, (a, b) = create(h, CreatableTopic("a"), CreatableTopic("b", configs={"segment_ms": 5}))
    result = h.send(DeleteTopicsRequest(names=("a", "ghost"), topic_ids=(b.topic_id, a.topic_id)))
    errors = [r.error.code if r.error else None for r in result.response.results]
    assert errors == [None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, ErrorCode.INVALID_REQUEST]
    assert result.records == (RemoveTopicRecord(a.topic_id), RemoveTopicRecord(b.topic_id))
    assert h.committed.topic("a") is None and h.committed.topic_config_overrides("b") == {}
    gone = h.send(DeleteTopicsRequest(topic_ids=(a.topic_id,)))
    assert gone.response.results[0].error.code == ErrorCode.UNKNOWN_TOPIC_ID
    _, (again,) = create(h, CreatableTopic("a"))
    assert again.error is None and again.topic_id != a.topic_id


# --- CreatePartitions -------------------------------------------------------------------------------


def grow(h, *items, validate_only=False):
    result = h.send(CreatePartitionsRequest(tuple(items), validate_only))
    return result, [r.error for r in result.response.results]


def test_create_partitions_adds_placed_partitions(h) -> None:
    create(h, CreatableTopic("g", 2, 2))
    result, errors = grow(h, CreatePartitionsTopic("g", 5))
    assert errors == [None] and [r.partition for r in result.records] == [2, 3, 4]
    parts = h.committed.topic("g").partitions
    assert len(parts) == 5 and all(len(set(p.replicas)) == 2 for p in parts)
    _, errors = grow(h, CreatePartitionsTopic("g", 6, ((2, 0),)))
    assert errors == [None] and h.committed.topic("g").partitions[5].replicas == (2, 0)
    _, errors = grow(h, CreatePartitionsTopic("g", 9), validate_only=True)
    assert errors == [None] and len(h.committed.topic("g").partitions) == 6


@pytest.mark.parametrize(
    ("item", "code", "fragment"),
    [
        (CreatePartitionsTopic("g", 1), ErrorCode.INVALID_PARTITIONS, "higher than the requested 1"),
        (CreatePartitionsTopic("g", 2), ErrorCode.INVALID_PARTITIONS, "already has 2 partitions"),
        (CreatePartitionsTopic("g", 101), ErrorCode.INVALID_PARTITIONS, "limit of 100"),
        (CreatePartitionsTopic("g", "3"), ErrorCode.INVALID_PARTITIONS, "integer"),
        (CreatePartitionsTopic("nope", 3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
        (CreatePartitionsTopic("g", 4, ((0, 1),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "add 2 additional"),
        (CreatePartitionsTopic("g", 3, ((0,),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "not consistent"),
    ],
)
def test_create_partitions_validation(h, item, code, fragment) -> None:
    create(h, CreatableTopic("g", 2, 2))
    result, (error,) = grow(h, item)
    assert error.code == code and fragment in error.message and result.records == ()


def test_create_partitions_needs_enough_unfenced_brokers(h) -> None:
    create(h, CreatableTopic("g", 1, 3))
    h.heartbeat(0, want_shutdown=True)
    _, (error,) = grow(h, CreatePartitionsTopic("g", 2))
    assert error.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_duplicate_topic_in_create_partitions(h) -> None:
    create(h, CreatableTopic("g", 1))
    _, errors = grow(h, CreatePartitionsTopic("g", 2), CreatePartitionsTopic("g", 3))
    assert [e.code for e in errors] == [ErrorCode.INVALID_REQUEST] * 2


# --- configs ----------------------------------------------------------------------------------------


def topic_resource(name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, name)


def broker_resource(name: str = "") -> ConfigResource:
    return ConfigResource(ConfigResourceType.BROKER, name)


def alter(h, resource, *ops, validate_only=False):
    result = h.send(IncrementalAlterConfigsRequest((AlterConfigsResource(resource, tuple(ops)),), validate_only))
    return result, result.response.results[0].error


def describe(h, resource, keys=None):
    (item,) = h.controller.describe_configs(DescribeConfigsRequest((resource,), keys)).results
    return item


def test_alter_and_describe_topic_and_broker_configs(h) -> None:
    create(h, CreatableTopic("c"))
    result, error = alter(
        h,
        topic_resource("c"),
        AlterConfigOp("retention.ms", value="1000"),
        AlterConfigOp("cleanup.policy", value="compact"),
    )
    assert error is None and len(result.records) == 2
    _, error = alter(
        h, broker_resource(""), AlterConfigOp("segment_ms", value=3600000), AlterConfigOp("retention_ms", value=5)
    )
    assert error is None
    entries = {e.name: e for e in describe(h, topic_resource("c")).entries}
    assert (entries["retention_ms"].value, entries["retention_ms"].source) == (1000, ConfigSource.TOPIC)
    assert (entries["segment_ms"].value, entries["segment_ms"].source) == (3600000, ConfigSource.BROKER)
    assert (entries["segment_bytes"].value, entries["segment_bytes"].source) == (1073741824, ConfigSource.DEFAULT)
    assert entries["segment_bytes"].is_default and not entries["segment_ms"].is_default
    assert entries["retention_ms"].type == "long" and entries["retention_ms"].doc
    # Delete an override: the broker default shows through.
    result, error = alter(h, topic_resource("c"), AlterConfigOp("retention_ms", AlterConfigOpType.DELETE))
    assert error is None and result.records == (ConfigRecord(2, "c", "retention_ms", None),)
    assert describe(h, topic_resource("c"), ("retention.ms",)).entries[0].value == 5
    # Per-broker resource sees the cluster default under its own overrides.
    alter(h, broker_resource("1"), AlterConfigOp("segment_ms", value=7))
    entries = {e.name: e for e in describe(h, broker_resource("1")).entries}
    assert entries["segment_ms"].value == 7 and entries["retention_ms"].value == 5
    assert entries["retention_ms"].source == ConfigSource.BROKER


def test_alter_only_writes_real_changes_and_validate_only_writes_nothing(h) -> None:
    create(h, CreatableTopic("c", configs={"retention_ms": 10}))
    result, error = alter(
        h,
        topic_resource("c"),
        AlterConfigOp("retention_ms", value="10"),
        AlterConfigOp("segment_ms", AlterConfigOpType.DELETE),
    )
    assert error is None and result.records == ()
    result, error = alter(h, topic_resource("c"), AlterConfigOp("retention_ms", value=20), validate_only=True)
    assert error is None and result.records == () and h.committed.topic_config("c")["retention_ms"] == 10


@pytest.mark.parametrize(
    ("resource", "ops", "code", "fragment"),
    [
        (
            ConfigResource(ConfigResourceType.TOPIC, "ghost"),
            (AlterConfigOp("retention_ms", value=1),),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "ghost",
        ),
        (
            ConfigResource(ConfigResourceType.BROKER, "b1"),
            (AlterConfigOp("retention_ms", value=1),),
            ErrorCode.INVALID_REQUEST,
            "broker name",
        ),
        (ConfigResource(8, "x"), (AlterConfigOp("retention_ms", value=1),), ErrorCode.INVALID_REQUEST, "resource type"),
        (
            ConfigResource(ConfigResourceType.TOPIC, "c"),
            (AlterConfigOp("retention_ms", value=-7),),
            ErrorCode.INVALID_CONFIG,
            "at least -1",
        ),
        (
            ConfigResource(ConfigResourceType.TOPIC, "c"),
            (AlterConfigOp("nope", value=1),),
            ErrorCode.INVALID_CONFIG,
            "Unknown topic config",
        ),
        (
            ConfigResource(ConfigResourceType.TOPIC, "c"),
            (AlterConfigOp("retention_ms", 2, 1),),
            ErrorCode.INVALID_REQUEST,
            "Unsupported config operation",
        ),
        (
            ConfigResource(ConfigResourceType.TOPIC, "c"),
            (AlterConfigOp("retention.ms", value=1), AlterConfigOp("retention_ms", value=2)),
            ErrorCode.INVALID_REQUEST,
            "more than once",
        ),
        (
            ConfigResource(ConfigResourceType.TOPIC, "c"),
            (AlterConfigOp("min_compaction_lag_ms", value=10), AlterConfigOp("max_compaction_lag_ms", value=5)),
            ErrorCode.INVALID_CONFIG,
            "must not exceed",
        ),
    ],
)
def test_alter_configs_validation(h, resource, ops, code, fragment) -> None:
    create(h, CreatableTopic("c"))
    result, error = alter(h, resource, *ops)
    assert error.code == code and fragment in error.message and result.records == ()


def test_describe_errors(h) -> None:
    assert describe(h, topic_resource("ghost")).error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(h, broker_resource(""), ("bogus",)).error.code == ErrorCode.INVALID_CONFIG
    assert len(describe(h, broker_resource("")).entries) > 20
