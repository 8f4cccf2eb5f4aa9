"""A fault run's librdkafka poll returns once records are there, as Java's poll does (clients.consume_ready).

confluent-kafka's `consume(n, timeout)` returns only with n messages or when the timeout passes, so the
queue workload's librdkafka workers did about one poll per timeout: a 240 s overlapping fault run invoked
2,559-2,909 operations through them against 19,000-57,000 through kraftpy's client (docs/jepsen.md).
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kraftpy.tools.faults.workloads.clients import consume_ready
from tests.integration.test_cluster_support import LocalCluster, wait_for

RECORDS = 5
WAIT_S = 60.0  # the poll's timeout: a poll that waits for a full batch takes all of it


def test_a_poll_returns_the_records_there_without_waiting_for_a_full_batch(kafka_cluster: LocalCluster) -> None:
    topic = "confluent-poll-ready"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    wait_for(f"{topic} led", lambda: all(p["leader"] >= 0 for p in kafka_cluster.describe(topic)["partitions"]))
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": "confluent-poll-ready",
        "enable.auto.commit": False, "log_level": 2,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        started = time.monotonic()
        first = consume_ready(consumer, 100, WAIT_S)
        waited_s = time.monotonic() - started
        # Far from the timeout: the records were there (a poll that waits for 100 returns after 60 s).
        assert first and waited_s < WAIT_S / 2, (len(first), waited_s)
        read = [m.value().decode() for m in first]
        while len(read) < RECORDS:  # what one fetch did not bring, the next polls do
            more = consume_ready(consumer, 100, WAIT_S)
            assert more, f"no more records after {read}"
            read += [m.value().decode() for m in more]
        assert read == [f"v{i}" for i in range(RECORDS)]
        consumer.seek(TopicPartition(topic, 0, 0))
        assert len(consume_ready(consumer, 2, WAIT_S)) <= 2  # never more than asked for
    finally:
        consumer.close()
