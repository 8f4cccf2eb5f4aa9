"""Produce and consume through the Kafka listener with real clients: kafka-python, confluent-kafka, aiokafka, kcat.

Each client writes keyed records with headers and explicit CreateTime timestamps
over 3 partitions (every compression codec from kafka-python, confluent-kafka
and kcat) and reads them back by assigning partitions (no group): keys, values,
headers, timestamps and per-partition order must all come back as written.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.integration.test_cluster_support import LocalCluster

PARTITIONS = 3
RECORDS = 300
# CreateTimes an hour back: explicit, and within segment.ms (older ones roll a segment per batch today).
BASE_TS_MS = int(time.time() * 1000) - 3_600_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENT_TIMEOUT_S = 60


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def records(n: int = RECORDS, tag: str = "") -> list[Rec]:
    """Keyed records with headers and timestamps; the key carries the sequence number within its partition."""
    out = []
    for i in range(n):
        p = i % PARTITIONS
        headers = (("seq", str(i).encode()), ("tag", tag.encode()))
        value = (f"value-{i}-" + "x" * (i % 50)).encode()
        out.append(Rec(p, f"key-{p}-{i // PARTITIONS:06d}".encode(), value, headers, BASE_TS_MS + i))
    return out


def by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for r in recs:
        out[r.partition].append(r)
    return out


def new_topic(cluster: LocalCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.ok("topics", "create", name, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    return name


def assert_same(written: list[Rec], read: list[Rec]) -> None:
    assert by_partition(read) == by_partition(written)


# --- kafka-python ------------------------------------------------------------------------------


def kp_produce(cluster: LocalCluster, topic: str, recs: list[Rec], codec: str | None, **extra: object) -> None:
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        compression_type=codec,
        acks="all",
        linger_ms=5,
        request_timeout_ms=20_000,
        max_block_ms=20_000,
        **extra,
    )
    try:
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp_ms,
            )
            for r in recs
        ]
        offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)
    per_partition: dict[int, list[int]] = {}
    for r, offset in zip(recs, offsets, strict=True):
        per_partition.setdefault(r.partition, []).append(offset)
    for offs in per_partition.values():
        assert offs == list(range(len(offs)))


def kp_consume(cluster: LocalCluster, topic: str, count: int, **extra: object) -> list[Rec]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
        **extra,
    )
    out: list[Rec] = []
    try:
        consumer.assign([KpTopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(out) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                out.extend(
                    Rec(m.partition, m.key, m.value, tuple((k, bytes(v)) for k, v in m.headers), m.timestamp)
                    for m in messages
                )
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_and_consumes_each_codec(kafka_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(kafka_cluster, f"kp-{codec}")
    recs = records(tag=codec)
    kp_produce(kafka_cluster, topic, recs, None if codec == "none" else codec)
    assert_same(recs, kp_consume(kafka_cluster, topic, len(recs)))


def test_kafka_python_read_committed_consumer_reads_everything(kafka_cluster: LocalCluster) -> None:
    topic = new_topic(kafka_cluster, "kp-rc")
    recs = records(60)
    kp_produce(kafka_cluster, topic, recs, None)
    assert_same(recs, kp_consume(kafka_cluster, topic, len(recs), isolation_level="read_committed"))


def test_kafka_python_idempotent_producer(kafka_cluster: LocalCluster) -> None:
    topic = new_topic(kafka_cluster, "kp-idem")
    recs = records(tag="idem")
    kp_produce(kafka_cluster, topic, recs, "lz4", enable_idempotence=True)
    assert_same(recs, kp_consume(kafka_cluster, topic, len(recs)))


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


def ck_produce(cluster: LocalCluster, topic: str, recs: list[Rec], config: dict[str, object]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, **config})
    errors: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for r in recs:
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            partition=r.partition,
            timestamp=r.timestamp_ms,
            on_delivery=report,
        )
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
    assert errors == []


def ck_consume(cluster: LocalCluster, topic: str, count: int) -> list[Rec]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"unused-{uuid.uuid4().hex[:6]}",  # librdkafka wants one; assign() never joins it
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: list[Rec] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.5):
                assert m.error() is None, m.error()
                headers = tuple((k, bytes(v)) for k, v in m.headers() or [])
                out.append(Rec(m.partition(), m.key(), m.value(), headers, m.timestamp()[1]))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_produces_and_consumes_each_codec(kafka_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(kafka_cluster, f"ck-{codec}")
    recs = records(tag=codec)
    ck_produce(kafka_cluster, topic, recs, {"compression.type": codec, "acks": "all"})
    assert_same(recs, ck_consume(kafka_cluster, topic, len(recs)))


def test_cross_client_confluent_writes_kafka_python_reads(kafka_cluster: LocalCluster) -> None:
    topic = new_topic(kafka_cluster, "cross")
    recs = records(tag="cross")
    ck_produce(kafka_cluster, topic, recs, {"compression.type": "zstd", "enable.idempotence": True})
    assert_same(recs, kp_consume(kafka_cluster, topic, len(recs)))


def test_confluent_acks_zero_records_arrive(kafka_cluster: LocalCluster) -> None:
    topic = new_topic(kafka_cluster, "acks0")
    recs = records(90)
    ck_produce(kafka_cluster, topic, recs, {"acks": 0})
    assert_same(recs, ck_consume(kafka_cluster, topic, len(recs)))


# --- aiokafka (old, non-flexible versions) -----------------------------------------------------


async def aio_round_trip(
    cluster: LocalCluster, topic: str, recs: list[Rec], codec: str | None, idempotent: bool = False
) -> list[Rec]:
    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        compression_type=codec,
        acks="all",
        request_timeout_ms=20_000,
        enable_idempotence=idempotent,
    )
    await producer.start()
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            batch = [
                await producer.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    partition=r.partition,
                    timestamp_ms=r.timestamp_ms,
                )
                for r in recs
            ]
            await asyncio.gather(*batch)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    out: list[Rec] = []
    try:
        consumer.assign([AioTopicPartition(topic, p) for p in range(PARTITIONS)])
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            while len(out) < len(recs):
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(
                        Rec(m.partition, m.key, m.value, tuple((k, bytes(v)) for k, v in m.headers), m.timestamp)
                        for m in messages
                    )
    finally:
        await consumer.stop()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_produces_and_consumes(kafka_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(kafka_cluster, f"aio-{codec}")
    recs = records(tag=codec)
    assert_same(recs, asyncio.run(aio_round_trip(kafka_cluster, topic, recs, None if codec == "none" else codec)))


# --- kcat -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_and_consumes_keys_headers_and_each_codec(
    kafka_cluster: LocalCluster, kcat: str, codec: str
) -> None:
    topic = new_topic(kafka_cluster, f"kcat-{codec}")
    lines = [f"key-{i:04d}\tvalue-{i}" for i in range(100)]
    produced = subprocess.run(
        [kcat, "-b", kafka_cluster.bootstrap_servers, "-P", "-t", topic, "-p", "1", "-K", "\t", "-z", codec,
         "-H", "origin=kcat", "-H", f"codec={codec}", "-X", "acks=all"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [kcat, "-b", kafka_cluster.bootstrap_servers, "-C", "-t", topic, "-p", "1", "-o", "beginning", "-e",
         "-c", str(len(lines)), "-f", "%k\t%s\t%h\t%o\n"],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines() if line]
    assert [(k, v) for k, v, _, _ in rows] == [tuple(line.split("\t")) for line in lines]
    assert {h for _, _, h, _ in rows} == {f"origin=kcat,codec={codec}"}
    assert [int(o) for _, _, _, o in rows] == list(range(len(lines)))


def test_aiokafka_idempotent_producer(kafka_cluster: LocalCluster) -> None:
    topic = new_topic(kafka_cluster, "aio-idem")
    recs = records(tag="idem")
    assert_same(recs, asyncio.run(aio_round_trip(kafka_cluster, topic, recs, "gzip", idempotent=True)))
