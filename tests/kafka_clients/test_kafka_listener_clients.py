"""Each client's first contact with the listener: ApiVersions (with its software name) then Metadata.

librdkafka (confluent-kafka) sends ApiVersions v3+ with KIP-511 software names,
aiokafka old non-flexible versions, kafkajs its own choice; each must list the
cluster's brokers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

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


KAFKAJS_BROKERS = """
const { Kafka, logLevel } = require("kafkajs");
const brokers = process.env.KAFKA_BROKERS.split(",");
const kafka = new Kafka({ clientId: "kraftpy-test", brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
(async () => {
  await admin.connect();
  const cluster = await admin.describeCluster();
  console.log(JSON.stringify(cluster.brokers.map((b) => b.port).sort()));
  await admin.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_kafkajs_lists_the_brokers(kafka_cluster: LocalCluster, kafkajs_dir: Path) -> None:
    out = subprocess.run(
        ["node", "-e", KAFKAJS_BROKERS],
        cwd=kafkajs_dir,
        env={**os.environ, "KAFKA_BROKERS": kafka_cluster.bootstrap_servers},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(out.stdout)) == _ports(kafka_cluster)
