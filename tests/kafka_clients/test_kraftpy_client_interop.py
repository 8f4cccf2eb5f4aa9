"""kraftpy's own client beside librdkafka (confluent-kafka) on one cluster, over Kafka's protocol.

What one client writes the other reads (keys, values, headers, compression,
order per partition), and one consumer group holds a member of each: the
partitions are shared, every record is consumed once, and the offsets one
member commits are where the other resumes.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdTopicPartition

from kraftpy.client import Consumer, Producer
from kraftpy.protocol.types import TopicPartition
from tests.integration.test_cluster_support import LocalCluster

PARTITIONS = 4
COUNT = 400
TIMEOUT_S = 60


def create(cluster: LocalCluster, topic: str) -> None:
    cluster.ok("topics", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "3")


def rd_produce(bootstrap: str, topic: str, count: int, compression: str) -> None:
    producer = RdProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": compression}
    )
    failures: list[str] = []
    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            partition=i % PARTITIONS,
            on_delivery=lambda err, _msg: failures.append(str(err)) if err is not None else None,
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not failures, failures


def test_records_librdkafka_writes_are_read_by_kraftpys_consumer(kafka_cluster: LocalCluster) -> None:
    topic = "interop-rd-to-kraftpy"
    create(kafka_cluster, topic)
    rd_produce(kafka_cluster.bootstrap_servers, topic, COUNT, "lz4")

    async def consume() -> list:
        got: list = []
        async with Consumer(kafka_cluster.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < COUNT and time.monotonic() < deadline:
                got += await c.poll(timeout_ms=500)
        return got

    records = asyncio.run(consume())
    assert len(records) == COUNT
    for p in range(PARTITIONS):
        mine = [r for r in records if r.partition == p]
        assert [r.offset for r in mine] == list(range(len(mine)))
        assert [int(r.key[1:]) for r in mine] == list(range(p, COUNT, PARTITIONS))  # order kept per partition
    first = min(records, key=lambda r: int(r.key[1:]))
    assert (first.key, first.value) == (b"k0", b"v0") and dict(first.headers)["n"] == b"0"


def test_records_kraftpys_idempotent_producer_writes_are_read_by_librdkafka(kafka_cluster: LocalCluster) -> None:
    topic = "interop-kraftpy-to-rd"
    create(kafka_cluster, topic)

    async def produce() -> None:
        async with Producer(
            kafka_cluster.bootstrap_servers, acks="all", enable_idempotence=True, compression_type="zstd", linger_ms=5
        ) as producer:
            futures = [
                await producer.send(
                    topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS,
                    headers=[("n", str(i).encode())],
                )
                for i in range(COUNT)
            ]  # fmt: skip
            await producer.flush()
            for f in futures:
                await f

    asyncio.run(produce())
    consumer = RdConsumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": "interop-rd-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([RdTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    assert len(got) == COUNT
    for p in range(PARTITIONS):
        mine = [m for m in got if m.partition() == p]
        assert [int(m.key()[1:]) for m in mine] == list(range(p, COUNT, PARTITIONS))
    assert {(m.key(), m.value(), dict(m.headers())["n"]) for m in got} == {
        (f"k{i}".encode(), f"v{i}".encode(), str(i).encode()) for i in range(COUNT)
    }


def test_one_group_with_a_kraftpy_member_and_a_librdkafka_member(kafka_cluster: LocalCluster) -> None:
    topic, group = "interop-group", "interop-mixed"
    create(kafka_cluster, topic)
    rd_produce(kafka_cluster.bootstrap_servers, topic, COUNT, "none")
    rd = RdConsumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": group,
            "client.id": "rd-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )
    rd.subscribe([topic])

    async def run() -> tuple[set[int], set[int], list, list]:
        rd_got: list = []
        mine: list = []
        async with Consumer(
            kafka_cluster.bootstrap_servers,
            group_id=group,
            client_id="kraftpy-member",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            partition_assignment_strategy=["range"],
            fetch_max_wait_ms=100,
        ) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + TIMEOUT_S

            def owned() -> tuple[set[int], set[int]]:
                return {tp.partition for tp in consumer.assignment()}, {tp.partition for tp in rd.assignment()}

            def done() -> bool:
                # Done once the group has settled on a split and each partition's final owner read all of it
                # (nobody commits before the end, so a partition that changed hands is read from the start).
                ours, theirs = owned()
                if not ours or not theirs or ours & theirs or ours | theirs != set(range(PARTITIONS)):
                    return False
                keys = {r.key for r in mine if r.partition in ours} | {
                    m.key() for m in rd_got if m.partition() in theirs
                }
                return len(keys) == COUNT

            while not done() and time.monotonic() < deadline:
                mine += await consumer.poll(timeout_ms=200)
                msg = await asyncio.to_thread(rd.poll, 0.2)
                if msg is not None and msg.error() is None:
                    rd_got.append(msg)
            kraftpy_parts, rd_parts = owned()
            mine = [r for r in mine if r.partition in kraftpy_parts]
            rd_got = [m for m in rd_got if m.partition() in rd_parts]
            # Both members commit what they read; each committed offset is that partition's end.
            await consumer.commit()
            await asyncio.to_thread(rd.commit, asynchronous=False)
        return kraftpy_parts, rd_parts, mine, rd_got

    try:
        kraftpy_parts, rd_parts, mine, rd_got = asyncio.run(run())
        committed = rd.committed([RdTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        rd.close()
    assert kraftpy_parts and rd_parts, "each member owns partitions"
    assert kraftpy_parts | rd_parts == set(range(PARTITIONS)) and not kraftpy_parts & rd_parts
    assert {r.partition for r in mine} <= kraftpy_parts and {m.partition() for m in rd_got} <= rd_parts
    # Every record read (a partition that changed hands before a commit may be read twice, as in Kafka).
    assert {r.key for r in mine} | {m.key() for m in rd_got} == {f"k{i}".encode() for i in range(COUNT)}
    assert {c.partition: c.offset for c in committed} == {p: COUNT // PARTITIONS for p in range(PARTITIONS)}
