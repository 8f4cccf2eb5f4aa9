"""An idempotent acks=all librdkafka producer keeps its guarantees while a partition leader is SIGKILLed.

confluent-kafka writes 100,000 keyed records over 6 partitions (RF 3,
min.insync.replicas 2); partway through, the leader of one partition is
killed with SIGKILL and later restarted. Every record the producer saw
acknowledged must be read back exactly once, at the offset it was
acknowledged at, and each partition must hold its records in the order they
were sent (keys carry per-partition sequence numbers).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.integration.test_cluster_support import LocalCluster

TOPIC = "leader-kill"
PARTITIONS = 6
RECORDS = 100_000
KILL_AFTER = 30_000  # records acknowledged before the kill
KILLED_PARTITION = 0
DEADLINE_S = 600


def key(partition: int, seq: int) -> bytes:
    return f"p{partition}-{seq:08d}".encode()


def parse(k: bytes) -> tuple[int, int]:
    p, seq = k.decode()[1:].split("-")
    return int(p), int(seq)


def test_idempotent_producer_survives_a_sigkilled_leader(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok(
        "topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 10,
            "message.timeout.ms": 300_000,
            "queue.buffering.max.messages": 5_000,
        }
    )
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(seq, offset)]
    failed: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))
            return
        p, seq = parse(msg.key())  # type: ignore[attr-defined]
        acked[p].append((seq, msg.offset()))  # type: ignore[attr-defined]
        if killed is not None and p == KILLED_PARTITION:
            after_kill.append(seq)

    killed: int | None = None
    after_kill: list[int] = []  # the killed partition's acknowledgements that came after the kill
    deadline = time.monotonic() + DEADLINE_S

    def kill_once_far_enough() -> None:
        # Killed while acknowledgements stream in (a small local queue paces the producer by them), so
        # batches are in flight to the dying leader: some reached its followers, unacknowledged.
        nonlocal killed
        if killed is None and sum(len(v) for v in acked.values()) >= KILL_AFTER:
            leader = producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[KILLED_PARTITION].leader
            assert leader > 0
            kafka_cluster.kill(leader)
            killed = leader

    try:
        for i in range(RECORDS):
            p = i % PARTITIONS
            while True:
                try:
                    producer.produce(
                        TOPIC, key=key(p, i // PARTITIONS), value=b"v" * 100, partition=p, on_delivery=report
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
                    kill_once_far_enough()
                    assert time.monotonic() < deadline, "the producer made no progress"
            producer.poll(0)
            kill_once_far_enough()
        assert producer.flush(max(1.0, deadline - time.monotonic())) == 0, "records left undelivered"
    finally:
        if killed is not None:
            kafka_cluster.bring_back()  # the killed node, and leadership as it was
    assert killed is not None
    assert failed == [], failed[:5]
    assert sum(len(v) for v in acked.values()) == RECORDS
    # The partition lost its leader mid-run: it was acknowledged on, by a new leader, after the kill.
    assert len(after_kill) > (RECORDS - KILL_AFTER) // PARTITIONS // 2

    # Read everything back, from a fresh consumer, up to each partition's high watermark.
    consumer = Consumer(
        {"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False}
    )
    read: dict[int, list[tuple[int, int]]] = defaultdict(list)
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        remaining = sum(ends.values())
        while remaining > 0 and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                p, seq = parse(m.key())
                assert p == m.partition()
                if m.offset() < ends[p]:
                    read[p].append((seq, m.offset()))
                    remaining -= 1
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        seqs = [seq for seq, _ in read[p]]
        # In order and exactly once: the sequence numbers strictly increase along the log.
        assert all(a < b for a, b in itertools.pairwise(seqs)), f"partition {p} out of order or duplicated"
        at_offset = dict((offset, seq) for seq, offset in read[p])
        for seq, offset in acked[p]:
            assert at_offset.get(offset) == seq, f"acknowledged p{p} seq {seq} at offset {offset} is not there"
