"""Admin requests no client library sends this way, framed by hand: hostile items, the default broker resource."""

from __future__ import annotations

from kafka.protocol.admin.configs import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.topics import CreateTopicsRequest, DeleteRecordsRequest

from kraftpy.broker.kafka.shell import admin_apis
from kraftpy.protocol.errors import ErrorCode
from tests.integration.test_cluster_support import LocalCluster
from tests.kafka_clients.raw import call

TIMEOUT_S = 30


def test_create_topics_v7_returns_the_topics_configs_and_id(kafka_cluster: LocalCluster) -> None:
    T = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            T(
                name="wire-created",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[],
                configs=[T.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            )
        ],
        timeout_ms=20_000,
        validate_only=False,
    )
    (topic,) = call(kafka_cluster, 2, admin_apis.CREATE_TOPICS, 7, request).topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (0, 1, 3)
    assert topic.topic_id is not None
    configs = {c.name: (c.value, c.config_source) for c in topic.configs}
    assert configs["cleanup.policy"] == ("compact", 1)
    assert configs["retention.ms"] == ("604800000", 5)


def test_delete_records_refuses_bad_partitions_per_item(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok("topics", "create", "wire-records", "--partitions", "1", "--replication-factor", "3")
    leader = kafka_cluster.describe("wire-records")["partitions"][0]["leader"]
    follower = next(n for n in (1, 2, 3) if n != leader)
    T = DeleteRecordsRequest.DeleteRecordsTopic
    P = T.DeleteRecordsPartition
    request = DeleteRecordsRequest(
        topics=[
            T(name="wire-records", partitions=[P(partition_index=-1, offset=0), P(partition_index=0, offset=0)]),
            T(name="wire-nope", partitions=[P(partition_index=0, offset=0)]),
        ],
        timeout_ms=5_000,
    )
    topics = call(kafka_cluster, follower, admin_apis.DELETE_RECORDS, 2, request).topics
    assert [[(p.partition_index, p.error_code) for p in t.partitions] for t in topics] == [
        [(-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (0, ErrorCode.NOT_LEADER_OR_FOLLOWER)],
        [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
    ]
    # The leader takes it: the log start of an empty log stays 0.
    (topic,) = call(kafka_cluster, leader, admin_apis.DELETE_RECORDS, 0, DeleteRecordsRequest(
        topics=[T(name="wire-records", partitions=[P(partition_index=0, offset=-1)])], timeout_ms=5_000
    )).topics  # fmt: skip
    assert [(p.error_code, p.low_watermark) for p in topic.partitions] == [(0, 0)]


def test_the_cluster_wide_broker_default_applies_to_topics(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok("topics", "create", "wire-defaults", "--partitions", "1", "--replication-factor", "1")
    R = IncrementalAlterConfigsRequest.AlterConfigsResource

    def alter(op: int, value: str | None) -> None:
        config = R.AlterableConfig(name="log.segment.bytes", config_operation=op, value=value)
        request = IncrementalAlterConfigsRequest(
            resources=[R(resource_type=4, resource_name="", configs=[config])], validate_only=False
        )
        (result,) = call(kafka_cluster, 1, admin_apis.INCREMENTAL_ALTER_CONFIGS, 1, request).responses
        assert result.error_code == 0, result.error_message

    D = DescribeConfigsRequest.DescribeConfigsResource
    describe = DescribeConfigsRequest(
        resources=[
            D(resource_type=2, resource_name="wire-defaults", configuration_keys=["segment.bytes"]),
            D(resource_type=4, resource_name="", configuration_keys=None),
        ],
        include_synonyms=True,
        include_documentation=False,
    )
    alter(0, "2000000")
    try:
        topic, default = call(kafka_cluster, 3, admin_apis.DESCRIBE_CONFIGS, 4, describe).results
        (segment,) = topic.configs
        assert (segment.name, segment.value, segment.config_source) == ("segment.bytes", "2000000", 3)
        assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
            ("log.segment.bytes", "2000000", 3),
            ("log.segment.bytes", "1073741824", 5),
        ]
        assert [(c.name, c.value, c.config_source) for c in default.configs] == [("log.segment.bytes", "2000000", 3)]
    finally:
        alter(1, None)
    topic, default = call(kafka_cluster, 3, admin_apis.DESCRIBE_CONFIGS, 4, describe).results
    assert (topic.configs[0].value, topic.configs[0].config_source) == ("1073741824", 5)
    assert default.configs == []
