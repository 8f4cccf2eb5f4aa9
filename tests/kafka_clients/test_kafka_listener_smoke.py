"""The first hour of a Kafka user: kcat and kafka-python list the cluster's brokers and topics."""

from __future__ import annotations

import subprocess

from kafka import KafkaAdminClient

from tests.integration.test_cluster_support import LocalCluster


def test_kcat_lists_brokers_topics_leaders_and_isrs(kafka_cluster: LocalCluster, kcat: str) -> None:
    kafka_cluster.ok("topics", "create", "smoke", "--partitions", "3", "--replication-factor", "3")
    out = subprocess.run(
        [kcat, "-b", kafka_cluster.bootstrap_servers, "-L", "-t", "smoke", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    ports = [address.rsplit(":", 1)[1] for address in kafka_cluster.bootstrap_servers.split(",")]
    assert " 3 brokers:" in out.stdout
    for node_id, port in enumerate(ports, start=1):
        assert f"broker {node_id} at 127.0.0.1:{port}" in out.stdout
    assert 'topic "smoke" with 3 partitions:' in out.stdout
    for partition in range(3):
        line = next(x for x in out.stdout.splitlines() if f"partition {partition}," in x)
        assert "isrs: " in line and "leader -1" not in line, line


def test_kafka_python_sees_the_brokers_of_the_kafka_listeners(kafka_cluster: LocalCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    ports = sorted(int(a.rsplit(":", 1)[1]) for a in kafka_cluster.bootstrap_servers.split(","))
    assert sorted(b["port"] for b in cluster["brokers"]) == ports
