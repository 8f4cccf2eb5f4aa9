"""Each client's first contact with the listener: ApiVersions (with its software name) then Metadata.

librdkafka (confluent-kafka) sends ApiVersions v3+ with KIP-511 software names,
aiokafka old non-flexible versions; both must list the cluster's brokers.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaClient
from confluent_kafka.admin import AdminClient

from tests.integration.test_cluster_support import LocalCluster


def _ports(cluster: LocalCluster) -> list[int]:
    return sorted(int(a.rsplit(":", 1)[1]) for a in cluster.bootstrap_servers.split(","))


def test_librdkafka_lists_the_brokers(kafka_cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    metadata = admin.list_topics(timeout=20)
    assert sorted(b.port for b in metadata.brokers.values()) == _ports(kafka_cluster)


def test_aiokafka_lists_the_brokers(kafka_cluster: LocalCluster) -> None:
    async def brokers() -> list[int]:
        client = AIOKafkaClient(bootstrap_servers=kafka_cluster.bootstrap_servers, request_timeout_ms=20_000)
        try:
            await asyncio.wait_for(client.bootstrap(), 30)
            return sorted(b.port for b in client.cluster.brokers())
        finally:
            await client.close()

    assert asyncio.run(brokers()) == _ports(kafka_cluster)
