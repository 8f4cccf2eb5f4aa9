"""kafka-python 3.x's KafkaAdminClient against the Kafka listener: topics, configs, records, cluster, log dirs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidReplicationFactorError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from kraftpy.storage.checkpoints import OffsetCheckpoint
from tests.integration.test_cluster_support import LocalCluster, wait_for

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def admin(kafka_cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        yield client
    finally:
        client.close()


def _produce(cluster: LocalCluster, topic: str, count: int) -> None:
    """`count` records into partition 0 of `topic`, acks=all, through kraftpy's CLI."""
    lines = "".join(f"record-{i}\n" for i in range(count))
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "produce", topic, "-p", "0"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        env=cluster.env,
    )
    assert proc.returncode == 0, proc.stderr


def _topic_configs(admin: KafkaAdminClient, topic: str) -> dict[str, dict]:
    answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return answer["topic"][topic]


def test_create_describe_alter_delete(admin: KafkaAdminClient) -> None:
    admin.create_topics(
        [NewTopic("kp-topic", 2, 2, topic_configs={"retention.ms": "3600000"})],
        timeout_ms=20_000,
        wait_for_metadata=True,
    )
    assert "kp-topic" in admin.list_topics()
    (described,) = admin.describe_topics(["kp-topic"])
    assert len(described["partitions"]) == 2

    configs = _topic_configs(admin, "kp-topic")
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == (
        "3600000",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert configs["segment.bytes"]["value"] == "1073741824"
    assert (configs["cleanup.policy"]["config_type"], configs["retention.ms"]["config_type"]) == ("LIST", "LONG")

    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-topic", configs={"retention.ms": "60000"})])
    assert _topic_configs(admin, "kp-topic")["retention.ms"]["value"] == "60000"
    # Legacy AlterConfigs (a full replace) where the client is told to use it.
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kp-topic", configs={"segment.ms": "3600000"})], incremental=False
    )
    configs = _topic_configs(admin, "kp-topic")
    assert configs["segment.ms"]["value"] == "3600000"
    # kafka-python re-sends the other modified keys itself (AlterConfigs replaces the whole set).
    assert configs["retention.ms"]["value"] == "60000"

    admin.create_partitions({"kp-topic": NewPartitions(3)})
    wait_for("3 partitions", lambda: len(admin.describe_topics(["kp-topic"])[0]["partitions"]) == 3)

    admin.delete_topics(["kp-topic"], timeout_ms=20_000)
    wait_for("the topic to go", lambda: "kp-topic" not in admin.list_topics())


def test_errors_are_kafkas(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("kp-errors", 1, 1)], timeout_ms=20_000)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-errors", 1, 1)], timeout_ms=20_000)
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic("kp-rf", 1, 9)], timeout_ms=20_000)
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics([NewTopic("kp-conf", 1, 1, topic_configs={"no.such.config": "1"})], timeout_ms=20_000)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-never-was"], timeout_ms=20_000)


def test_describe_cluster(admin: KafkaAdminClient, kafka_cluster: LocalCluster) -> None:
    cluster = admin.describe_cluster()
    ports = sorted(int(a.rsplit(":", 1)[1]) for a in kafka_cluster.bootstrap_servers.split(","))
    assert sorted(b["port"] for b in cluster["brokers"]) == ports
    assert cluster["cluster_id"]
    assert cluster["controller_id"] in (1, 2, 3)


def test_elect_leaders_preferred(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("kp-elect", 1, 3)], timeout_ms=20_000, wait_for_metadata=True)
    # The preferred replica already leads: ELECTION_NOT_NEEDED, which the client takes as success.
    response = admin.elect_leaders(0, {"kp-elect": [0]}, timeout_ms=20_000)
    (result,) = response.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 84)]


def test_delete_records_and_log_dirs(admin: KafkaAdminClient, kafka_cluster: LocalCluster) -> None:
    admin.create_topics([NewTopic("kp-records", 1, 3)], timeout_ms=20_000, wait_for_metadata=True)
    _produce(kafka_cluster, "kp-records", 10)
    tp = TopicPartition("kp-records", 0)
    answer = admin.delete_records({tp: 4}, timeout_ms=20_000)
    assert answer[tp]["low_watermark"] == 4
    # The answer waited for the followers: every replica's log start checkpoint says 4 already.
    checkpoints = sorted(kafka_cluster.dir.glob("node-*/**/kp-records-0*/log-start-offset-checkpoint"))
    assert len(checkpoints) == 3, checkpoints
    assert [OffsetCheckpoint(path).read() for path in checkpoints] == [4, 4, 4]
    # Beyond the high watermark: Kafka's OFFSET_OUT_OF_RANGE.
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 1_000}, timeout_ms=20_000)
    # Every replica holds the partition in its one log dir, with its bytes counted.
    dirs = admin.describe_log_dirs({"kp-records": [0]})
    sizes = []
    for broker in dirs:
        for log_dir in broker["log_dirs"] if "log_dirs" in broker else broker.get("results", []):
            for topic in log_dir["topics"]:
                if topic["name"] == "kp-records":
                    sizes += [p["partition_size"] for p in topic["partitions"]]
    assert len(sizes) == 3 and all(s > 0 for s in sizes), dirs
