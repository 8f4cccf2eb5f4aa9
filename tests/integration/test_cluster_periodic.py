"""What a real cluster does on its own timers: retention by size and by time, compaction, every codec end to end.

One `kraftpy cluster start` cluster for the module, its nodes restarted once
with the periodic tasks at intervals a test can wait for
(`log_retention_check_interval_ms`, `log_cleaner_backoff_ms`); everything
else at the settings a user has. Nothing here calls retention or the cleaner
directly: the log manager's own timers must do the work, on every replica.
The codec test ends with `kraftpy audit` reading the compressed batches from
every replica's files.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftpy.broker.shell.log_manager import PARTITIONS_DIR
from kraftpy.client import Consumer, Producer, TopicPartition
from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow

PERIODIC = {"log_retention_check_interval_ms": 500, "log_cleaner_backoff_ms": 500}
CODECS = ("gzip", "snappy", "lz4", "zstd")
AUDIT_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("periodic") / "cluster")
    try:
        c.start_with(PERIODIC)
        yield c
    finally:
        c.stop()


def create(cluster: LocalCluster, topic: str, **configs: object) -> None:
    flags = [arg for key, value in configs.items() for arg in ("--config", f"{key}={value}")]
    cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3", *flags)


async def produce(cluster: LocalCluster, topic: str, records: list[tuple[bytes | None, bytes]], **config) -> None:
    async with Producer(cluster.layout().kafka_bootstrap_servers, acks="all", **config) as producer:
        for key, value in records:
            await producer.send(topic, value, key=key, partition=0)
        await producer.flush()


async def read_all(cluster: LocalCluster, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    tp = TopicPartition(topic, 0)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    async with Consumer(cluster.layout().kafka_bootstrap_servers, auto_offset_reset="earliest") as consumer:
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.assign([tp])
        for _ in range(200):
            if (out and out[-1][0] >= end - 1) or end == 0:
                break
            out.extend((r.offset, r.key, r.value) for r in await consumer.poll(timeout_ms=200))
    return out


async def log_start(cluster: LocalCluster, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    async with Consumer(cluster.layout().kafka_bootstrap_servers) as consumer:
        return (await consumer.beginning_offsets([tp]))[tp]


def segment_sizes(cluster: LocalCluster, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Per node, (base offset, bytes) of the segment files its replica still has (deleted ones are renamed)."""
    layout = cluster.layout()
    return {
        n.node_id: sorted(
            (int(p.stem), p.stat().st_size) for p in (layout.data_dir(n) / PARTITIONS_DIR / f"{topic}-0").glob("*.log")
        )
        for n in layout.nodes
    }


def segment_bases(cluster: LocalCluster, topic: str) -> dict[int, list[int]]:
    return {node: [base for base, _ in segments] for node, segments in segment_sizes(cluster, topic).items()}


def test_retention_by_size_runs_on_the_log_managers_timer(cluster: LocalCluster) -> None:
    create(cluster, "by-size", segment_bytes=2048, retention_bytes=4096)
    asyncio.run(produce(cluster, "by-size", [(None, b"x" * 100)] * 200, linger_ms=0, batch_size=200))

    # Every replica deletes its oldest segments on its own timer, and a check that ran while the
    # records were arriving deleted only part of what it will: wait until no replica has a segment
    # left that retention would still delete, so the log start no longer moves.
    def settled(segments: list[tuple[int, int]]) -> bool:
        sizes = [size for _, size in segments]
        return bool(segments) and segments[0][0] > 0 and sum(sizes) - sizes[0] < 4096

    wait_for(
        "every replica of by-size deleted the segments above the size limit",
        lambda: all(settled(segments) for segments in segment_sizes(cluster, "by-size").values()),
        timeout_s=60,
    )
    start = asyncio.run(log_start(cluster, "by-size"))
    assert start > 0
    records = asyncio.run(read_all(cluster, "by-size"))
    assert records[0][0] == start and records[-1][0] == 199


def test_retention_by_time_runs_on_the_log_managers_timer(cluster: LocalCluster) -> None:
    create(cluster, "by-time", retention_ms=1500, segment_ms=500)
    asyncio.run(produce(cluster, "by-time", [(None, b"old-%d" % i) for i in range(50)]))
    before = asyncio.run(log_start(cluster, "by-time"))
    assert before == 0

    def expired() -> bool:
        # a later append rolls the aged segment (segment_ms), which retention then deletes (retention_ms)
        asyncio.run(produce(cluster, "by-time", [(None, b"new")]))
        return asyncio.run(log_start(cluster, "by-time")) >= 50

    wait_for("segments older than retention_ms deleted", expired, timeout_s=60, interval_s=0.5)
    wait_for(
        "every replica of by-time deleted the expired segment",
        lambda: all(bases and bases[0] >= 50 for bases in segment_bases(cluster, "by-time").values()),
        timeout_s=60,
    )
    assert all(value == b"new" for _, _, value in asyncio.run(read_all(cluster, "by-time")))


def test_a_real_compacted_topic_keeps_the_latest_value_per_key(cluster: LocalCluster) -> None:
    create(cluster, "compacted", cleanup_policy="compact", segment_bytes=1024, min_cleanable_dirty_ratio=0.01)
    keys = [b"k%d" % i for i in range(10)]
    written = [(keys[i % 10], b"v%d" % i) for i in range(300)]
    asyncio.run(produce(cluster, "compacted", written, linger_ms=0, batch_size=100))
    latest = {key: value for key, value in written}

    def compacted() -> list | None:
        records = asyncio.run(read_all(cluster, "compacted"))
        return records if len(records) < len(written) // 2 else None

    records = wait_for("the cleaner thread compacted the topic", compacted, timeout_s=60, interval_s=0.5)
    seen: dict[bytes | None, bytes | None] = {}
    for _, key, value in records:
        seen[key] = value
    assert seen == latest  # the latest value of every key survives
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == len(written) - 1  # original offsets, the head untouched


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_replicate_and_read_back(cluster: LocalCluster, codec: str) -> None:
    topic = f"codec-{codec}"
    create(cluster, topic, min_insync_replicas=2)
    written = [(b"key-%d" % i, (b"%s record %d " % (codec.encode(), i)) * 20) for i in range(500)]
    asyncio.run(produce(cluster, topic, written, compression_type=codec, linger_ms=5, batch_size=16384))
    assert [(k, v) for _, k, v in asyncio.run(read_all(cluster, topic))] == written


def test_the_audit_reads_every_codec_from_every_replica(cluster: LocalCluster, tmp_path: Path) -> None:
    """After the codec tests: every replica's files hold the compressed batches, identical across replicas."""
    topics = [f"codec-{codec}" for codec in CODECS]
    described = {t: cluster.describe(t) for t in topics}  # raises if a codec test did not create its topic
    wait_for(
        "every codec topic fully in sync",
        lambda: all(len(cluster.describe(t)["partitions"][0]["isr"]) == 3 for t in topics),
        timeout_s=60,
    )
    cluster.ok("cluster", "stop", "--dir", str(cluster.dir))
    try:
        audit = cluster.cli("audit", "--cluster-dir", str(cluster.dir), "--json", timeout_s=AUDIT_TIMEOUT_S)
    finally:
        cluster.start()
    assert audit.code == 0, str(audit)
    report = json.loads(audit.stdout)
    assert report["ok"] and report["findings"] == []
    replicas = {(r["topic"], r["node"]): r["records"] for r in report["replicas"] if r["topic"] in described}
    assert replicas == {(t, n): 500 for t in topics for n in (1, 2, 3)}
