"""aiokafka's AIOKafkaAdminClient (old, non-flexible versions) against the Kafka listener."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.integration.test_cluster_support import LocalCluster

TIMEOUT_S = 30


def run_admin(cluster: LocalCluster, body: Callable[[AIOKafkaAdminClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
        await admin.start()
        try:
            return await asyncio.wait_for(body(admin), TIMEOUT_S)
        finally:
            await admin.close()

    return asyncio.run(main())


def _configs(response: Any) -> dict[str, tuple[str, int]]:
    (resource,) = response.to_object()["resources"]
    assert resource["error_code"] == 0, resource
    return {c["config_names"]: (c["config_value"], c["config_source"]) for c in resource["config_entries"]}


def test_create_describe_alter_delete_topics(kafka_cluster: LocalCluster) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        created = await admin.create_topics([NewTopic("aio-topic", 2, 1, topic_configs={"retention.ms": "1000000"})])
        assert [(t[0], t[1]) for t in created.topic_errors] == [("aio-topic", 0)]
        (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-topic")])
        configs = _configs(described)
        assert configs["retention.ms"] == ("1000000", 1)  # DYNAMIC_TOPIC_CONFIG
        assert configs["segment.bytes"] == ("1073741824", 5)  # DEFAULT_CONFIG

        (altered,) = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "aio-topic", configs={"segment.ms": "600000"})]
        )
        assert [r[0] for r in altered.resources] == [0]
        (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-topic")])
        configs = _configs(described)
        # aiokafka sends legacy AlterConfigs: the given set replaces the old one.
        assert configs["segment.ms"] == ("600000", 1)
        assert configs["retention.ms"] == ("604800000", 5)

        grown = await admin.create_partitions({"aio-topic": NewPartitions(3)})
        assert [r[1] for r in grown.topic_errors] == [0]
        assert "aio-topic" in await admin.list_topics()

        deleted = await admin.delete_topics(["aio-topic"])
        assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [("aio-topic", 0)]

    run_admin(kafka_cluster, body)


def test_errors_are_kafkas(kafka_cluster: LocalCluster) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic("aio-errors", 1, 1)])
        again = await admin.create_topics([NewTopic("aio-errors", 1, 1)])
        assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS
        assert "already exists" in again.topic_errors[0][2]
        bad_rf = await admin.create_topics([NewTopic("aio-rf", 1, 9)])
        assert bad_rf.topic_errors[0][1] == 38  # INVALID_REPLICATION_FACTOR
        bad_conf = await admin.create_topics([NewTopic("aio-conf", 1, 1, topic_configs={"no.such": "1"})])
        assert bad_conf.topic_errors[0][1] == 40  # INVALID_CONFIG
        (missing,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-never-was")])
        assert missing.to_object()["resources"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION

    run_admin(kafka_cluster, body)
