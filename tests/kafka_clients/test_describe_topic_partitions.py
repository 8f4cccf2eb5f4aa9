"""DescribeTopicPartitions (KIP-966) from kafka-python 3.x's admin client against a real cluster: pages and ELR."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.integration.test_cluster_support import LocalCluster, wait_for

TOPIC = "kp-dtp"
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def admin(kafka_cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        # min ISR 3 of 3 replicas: losing any one puts the ISR below it, so the lost replica becomes eligible.
        client.create_topics(
            [NewTopic(TOPIC, 3, 3, topic_configs={"min.insync.replicas": "3"})],
            timeout_ms=20_000,
            wait_for_metadata=True,
        )
        yield client
    finally:
        client.close()


def partitions_of(answer: dict) -> list[tuple[str, int]]:
    return [(t["name"], p["partition_index"]) for t in answer["topics"] for p in t["partitions"]]


def test_pages_of_two_partitions_then_the_unknown_topic(admin: KafkaAdminClient) -> None:
    names = [f"{TOPIC}-missing", TOPIC]
    first = admin.describe_topic_partitions(names, response_partition_limit=2)
    assert partitions_of(first) == [(TOPIC, 0), (TOPIC, 1)]
    assert first["next_cursor"] == {"topic_name": TOPIC, "partition_index": 2}
    second = admin.describe_topic_partitions(names, response_partition_limit=2, cursor=first["next_cursor"])
    assert partitions_of(second) == [(TOPIC, 2)]
    assert [(t["name"], t["error_code"]) for t in second["topics"]] == [
        (TOPIC, 0),
        (f"{TOPIC}-missing", UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert second["next_cursor"] is None
    (p, *_) = first["topics"][0]["partitions"]
    assert sorted(p["isr_nodes"]) == sorted(p["replica_nodes"]) == [1, 2, 3]
    assert (p["eligible_leader_replicas"], p["last_known_elr"], p["offline_replicas"]) == (None, None, [])


def test_a_lost_replica_shows_as_eligible_and_offline(admin: KafkaAdminClient, kafka_cluster: LocalCluster) -> None:
    victim = next(n for n in (1, 2, 3) if n != kafka_cluster.controller_id())
    kafka_cluster.kill(victim)
    try:

        def described() -> list[dict] | None:
            (topic,) = admin.describe_topic_partitions([TOPIC])["topics"]
            parts = topic["partitions"]
            return parts if all(victim not in p["isr_nodes"] for p in parts) else None

        parts = wait_for(f"node {victim} out of every ISR", described, timeout_s=60)
        for p in parts:
            assert p["eligible_leader_replicas"] == [victim]
            assert p["offline_replicas"] == [victim]
            assert sorted(p["isr_nodes"]) == sorted(set(p["replica_nodes"]) - {victim})
            assert p["leader_id"] != victim
    finally:
        kafka_cluster.bring_back()
