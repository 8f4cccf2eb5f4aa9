"""confluent-kafka's (librdkafka's) AdminClient against the Kafka listener: topics, configs, partitions, cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.integration.test_cluster_support import LocalCluster, wait_for

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def admin(kafka_cluster: LocalCluster) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers, "socket.timeout.ms": 10_000})


def _result(futures: dict, key: object) -> object:
    return futures[key].result(timeout=TIMEOUT_S)


def _error_code(futures: dict, key: object) -> int:
    with pytest.raises(Exception) as info:
        futures[key].result(timeout=TIMEOUT_S)
    return info.value.args[0].code()


def _partitions(cluster: LocalCluster, topic: str) -> list[dict] | None:
    """The topic's partitions as the controller's metadata has them (kraftpy's CLI, a second opinion beside
    the client under test), None when it does not exist."""
    result = cluster.cli("topics", "describe", topic, "--json")
    return result.json()["partitions"] if result.code == 0 else None


def _describe_topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return _result(admin.describe_configs([resource]), resource)


def test_create_topic_with_configs_is_listed_and_described(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    futures = admin.create_topics(
        [NewTopic("cfk-created", num_partitions=3, replication_factor=2, config={"retention.ms": "3600000"})],
        operation_timeout=20,
    )
    assert _result(futures, "cfk-created") is None
    partitions = wait_for("the topic in metadata", lambda: _partitions(kafka_cluster, "cfk-created"))
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert all(len(p["replicas"]) == 2 for p in partitions)

    configs = _describe_topic_configs(admin, "cfk-created")
    retention = configs["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["unclean.leader.election.enable"].value == "false"
    assert not any("_" in name for name in configs)


def test_create_topic_defaults_minus_one_use_the_cluster_defaults(
    admin: AdminClient, kafka_cluster: LocalCluster
) -> None:
    futures = admin.create_topics([NewTopic("cfk-defaults")], operation_timeout=20)
    assert _result(futures, "cfk-defaults") is None
    partitions = wait_for("the topic in metadata", lambda: _partitions(kafka_cluster, "cfk-defaults"))
    # `cluster start` writes num_partitions = 1 and default_replication_factor = 3 to every node.toml.
    assert len(partitions) == 1 and len(partitions[0]["replicas"]) == 3


def test_create_existing_topic_is_topic_already_exists(admin: AdminClient) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-twice", 1, 1)]), "cfk-twice") is None
    code = _error_code(admin.create_topics([NewTopic("cfk-twice", 1, 1)]), "cfk-twice")
    assert code == KafkaError.TOPIC_ALREADY_EXISTS


def test_invalid_replication_factor_is_refused(admin: AdminClient) -> None:
    code = _error_code(admin.create_topics([NewTopic("cfk-rf", 1, 7)]), "cfk-rf")
    assert code == KafkaError.INVALID_REPLICATION_FACTOR


def test_unknown_config_name_is_invalid_config(admin: AdminClient) -> None:
    futures = admin.create_topics([NewTopic("cfk-badconf", 1, 1, config={"no.such.config": "1"})])
    assert _error_code(futures, "cfk-badconf") == KafkaError.INVALID_CONFIG
    # kraftpy's own underscore spelling is not a Kafka name either.
    futures = admin.create_topics([NewTopic("cfk-badconf", 1, 1, config={"retention_ms": "1"})])
    assert _error_code(futures, "cfk-badconf") == KafkaError.INVALID_CONFIG


def test_validate_only_creates_nothing(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-dry", 2, 1)], validate_only=True), "cfk-dry") is None
    assert _partitions(kafka_cluster, "cfk-dry") is None
    # validate_only still answers the real errors.
    code = _error_code(admin.create_topics([NewTopic("cfk-dry", 2, 9)], validate_only=True), "cfk-dry")
    assert code == KafkaError.INVALID_REPLICATION_FACTOR


def test_incremental_alter_set_delete_append_subtract(admin: AdminClient) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-alter", 1, 1)]), "cfk-alter") is None
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-alter",
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    assert _result(admin.incremental_alter_configs([resource]), resource) is None
    configs = _describe_topic_configs(admin, "cfk-alter")
    assert configs["retention.ms"].value == "7200000"
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-alter",
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ],
    )
    assert _result(admin.incremental_alter_configs([resource]), resource) is None
    configs = _describe_topic_configs(admin, "cfk-alter")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "604800000",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_incremental_alter_errors_are_kafkas(admin: AdminClient) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-alter-bad", 1, 1)]), "cfk-alter-bad") is None
    unknown = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-alter-bad",
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    assert _error_code(admin.incremental_alter_configs([unknown]), unknown) == KafkaError.INVALID_CONFIG
    bad_value = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-alter-bad",
        incremental_configs=[ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)],
    )
    assert _error_code(admin.incremental_alter_configs([bad_value]), bad_value) == KafkaError.INVALID_CONFIG
    append_scalar = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-alter-bad",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)],
    )
    assert _error_code(admin.incremental_alter_configs([append_scalar]), append_scalar) == KafkaError.INVALID_CONFIG
    missing = ConfigResource(
        ConfigResource.Type.TOPIC,
        "cfk-no-such-topic",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    assert _error_code(admin.incremental_alter_configs([missing]), missing) == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_the_whole_set(admin: AdminClient) -> None:
    created = NewTopic("cfk-legacy", 1, 1, config={"retention.ms": "3600000", "segment.ms": "600000"})
    assert _result(admin.create_topics([created]), "cfk-legacy") is None
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfk-legacy", set_config={"max.message.bytes": "2000000"})
    assert _result(admin.alter_configs([resource]), resource) is None
    configs = _describe_topic_configs(admin, "cfk-legacy")
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Everything not given went back to its default (legacy AlterConfigs is a full replace).
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_describe_broker_configs(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = _result(admin.describe_configs([resource]), resource)
    assert configs["log.retention.ms"].value == "604800000"
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["message.max.bytes"].value == "1048588"
    assert "retention.ms" not in configs


def test_create_partitions_grows_the_topic(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-grow", 1, 1)]), "cfk-grow") is None
    assert _result(admin.create_partitions([NewPartitions("cfk-grow", 4)]), "cfk-grow") is None
    wait_for("4 partitions in metadata", lambda: len(_partitions(kafka_cluster, "cfk-grow") or []) == 4)
    code = _error_code(admin.create_partitions([NewPartitions("cfk-grow", 2)]), "cfk-grow")
    assert code == KafkaError.INVALID_PARTITIONS


def test_delete_topics(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-doomed", 1, 1)]), "cfk-doomed") is None
    assert _result(admin.delete_topics(["cfk-doomed"], operation_timeout=20), "cfk-doomed") is None
    assert _partitions(kafka_cluster, "cfk-doomed") is None
    code = _error_code(admin.delete_topics(["cfk-doomed"]), "cfk-doomed")
    assert code == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    ports = sorted(int(a.rsplit(":", 1)[1]) for a in kafka_cluster.bootstrap_servers.split(","))
    assert sorted(n.port for n in cluster.nodes) == ports
    assert sorted(n.id for n in cluster.nodes) == [1, 2, 3]
    assert cluster.controller.id in (1, 2, 3)
    assert cluster.cluster_id


def test_elect_preferred_leaders(admin: AdminClient, kafka_cluster: LocalCluster) -> None:
    assert _result(admin.create_topics([NewTopic("cfk-elect", 2, 3)]), "cfk-elect") is None
    wait_for("the topic in metadata", lambda: _partitions(kafka_cluster, "cfk-elect"))
    partitions = [TopicPartition("cfk-elect", 0), TopicPartition("cfk-elect", 1)]
    result = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=TIMEOUT_S)
    # A fresh topic is led by its preferred replicas: Kafka's answer is ELECTION_NOT_NEEDED for each.
    assert {tp.partition: err.code() for tp, err in result.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED,
        1: KafkaError.ELECTION_NOT_NEEDED,
    }
    result = admin.elect_leaders(ElectionType.UNCLEAN, partitions).result(timeout=TIMEOUT_S)
    assert {tp.partition: err.code() for tp, err in result.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED,
        1: KafkaError.ELECTION_NOT_NEEDED,
    }


def test_alter_this_brokers_config(admin: AdminClient) -> None:
    def set_or_delete(op: AlterConfigOpType, value: str | None) -> None:
        entry = ConfigEntry("log.retention.ms", value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[entry])
        assert _result(admin.incremental_alter_configs([resource]), resource) is None

    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    set_or_delete(AlterConfigOpType.SET, "7200000")
    try:
        entry = _result(admin.describe_configs([broker]), broker)["log.retention.ms"]
        assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # kraftpy's topics take only the cluster-wide broker default, so a topic still reports Kafka's default.
        assert _result(admin.create_topics([NewTopic("cfk-broker-cfg", 1, 1)]), "cfk-broker-cfg") is None
        retention = _describe_topic_configs(admin, "cfk-broker-cfg")["retention.ms"]
        assert (retention.value, retention.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
        assert [(s.name, s.source) for s in retention.synonyms.values()] == [
            ("log.retention.ms", ConfigSource.DEFAULT_CONFIG.value)
        ]
    finally:
        set_or_delete(AlterConfigOpType.DELETE, None)
    entry = _result(admin.describe_configs([broker]), broker)["log.retention.ms"]
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value
    # A broker describes only itself (librdkafka routes a broker resource to that broker).
    other = ConfigResource(ConfigResource.Type.BROKER, "2")
    assert _result(admin.describe_configs([other]), other)["log.retention.ms"].value == "604800000"


def test_list_offsets_earliest_latest_by_time_and_max_timestamp(
    admin: AdminClient, kafka_cluster: LocalCluster
) -> None:
    """AdminClient.list_offsets with each OffsetSpec; max_timestamp is KIP-734's ListOffsets -3: the
    first record holding the partition's largest timestamp, wherever it is in the log."""
    topic = "cfk-list-offsets"
    assert _result(admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=20), topic) is None
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
    stamps = [1_000, 5_000, 3_000, 5_000, 2_000]  # the largest twice: offsets 1 and 3
    try:
        for i, ts in enumerate(stamps):
            producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=ts)
            assert producer.flush(TIMEOUT_S) == 0  # one batch per record: ties across batches
    finally:
        del producer
    tp = TopicPartition(topic, 0)

    def offset_of(spec: OffsetSpec) -> tuple[int, int]:
        info = _result(admin.list_offsets({tp: spec}), tp)
        return info.offset, info.timestamp

    assert offset_of(OffsetSpec.earliest())[0] == 0
    assert offset_of(OffsetSpec.latest())[0] == 5
    assert offset_of(OffsetSpec.for_timestamp(2_500)) == (1, 5_000)  # the first record at or after 2,500
    assert offset_of(OffsetSpec.max_timestamp()) == (1, 5_000)
