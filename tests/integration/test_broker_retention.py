"""Retention, compaction, config changes and topic deletion on every replica, per the topic's configs.

Retention (retention_bytes here) runs on leaders and followers alike and
moves the log start, which consumers see through ListOffsets(earliest);
a compacted topic keeps the latest record per key once the cleaner thread
passed; deleting a topic stops and removes its replicas on every broker.
"""

from __future__ import annotations

from pathlib import Path

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.protocol.records.batch import decode_batches
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes, wait_until


async def test_retention_by_size_moves_the_log_start_on_every_replica(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        configs = {"segment_bytes": 2048, "retention_bytes": 4096}
        cluster.create_topic("trim", assignments=[(1, 2, 3)], configs=configs)
        async with Producer(cluster.bootstrap, linger_ms=0, batch_size=200) as producer:
            for i in range(120):
                await producer.send_and_wait("trim", f"record-{i:04d}".encode() * 4)
        await cluster.wait_for_replicas_caught_up("trim")
        for b in (1, 2, 3):
            await cluster.rm(b).logs.retention_once()
        starts = {b: cluster.hosted(b, "trim").log.log_start_offset for b in (1, 2, 3)}
        assert min(starts.values()) > 0
        for b in (1, 2, 3):
            assert cluster.hosted(b, "trim").log.size_bytes <= 4096 + 2048
        tp = TopicPartition("trim", 0)
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            assert (await consumer.beginning_offsets([tp]))[tp] == starts[1]
            consumer.assign([tp])
            records = []
            for _ in range(100):
                records += await consumer.poll(timeout_ms=50)
                if records and records[-1].offset == 119:
                    break
        assert records[0].offset == starts[1] and records[-1].offset == 119


async def test_a_compacted_topic_keeps_the_latest_record_per_key(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        configs = {"cleanup_policy": "compact", "segment_bytes": 1024, "min_cleanable_dirty_ratio": 0.01}
        cluster.create_topic("table", assignments=[(1, 2, 3)], configs=configs)
        async with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for i in range(200):
                await producer.send_and_wait("table", f"v{i}".encode(), key=f"k{i % 5}".encode())
        await cluster.wait_for_replicas_caught_up("table")
        leader = cluster.hosted(1, "table")

        def compacted() -> bool:
            records = [r for b in decode_batches(log_bytes(leader)) for r in b.records]
            return len(records) < 60

        await wait_until(compacted, timeout_s=20, what="the cleaner to compact the leader's log")
        latest = {}
        for batch in decode_batches(log_bytes(leader)):
            for record in batch.records:
                latest[record.key] = record.value
        assert latest == {f"k{k}".encode(): f"v{195 + k}".encode() for k in range(5)}


async def test_config_changes_reach_the_logs_and_deleted_topics_leave_every_broker(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("gone", partitions=2)
        async with Producer(cluster.bootstrap, linger_ms=0) as producer:
            await producer.send_and_wait("gone", b"x", partition=0)
        resource = ConfigResource(ConfigResourceType.TOPIC, "gone")
        request = IncrementalAlterConfigsRequest(
            (
                AlterConfigsResource(
                    resource, (AlterConfigOp("retention_ms", value=1234), AlterConfigOp("min_insync_replicas", value=2))
                ),
            )
        )
        cluster.harness.send(request)
        cluster.publish()
        for b in (1, 2, 3):
            hosted = cluster.hosted(b, "gone")
            assert hosted.log.config.retention_ms == 1234 and hosted.core.config.min_insync_replicas == 2
        dirs = [cluster.brokers[b].data_dir / "partitions" / f"gone-{p}" for b in (1, 2, 3) for p in (0, 1)]
        assert all(d.is_dir() for d in dirs)
        cluster.delete_topic("gone")
        for b in (1, 2, 3):
            assert ("gone", 0) not in cluster.rm(b).partitions
        await wait_until(lambda: not any(d.exists() for d in dirs), what="partition directories removed")
        await wait_until(
            lambda: (
                not any(
                    p.name.endswith("-delete")
                    for b in (1, 2, 3)
                    for p in (cluster.brokers[b].data_dir / "partitions").iterdir()
                )
            ),
            what="deleted directories removed",
        )
        cluster.create_topic("gone", partitions=1)  # the same name again: a new, empty log
        await cluster.settled()
        leader = cluster.leader("gone")
        assert cluster.hosted(leader, "gone").log.log_end_offset == 0


async def test_a_replica_of_a_topic_deleted_while_its_broker_was_down_is_set_aside_as_stray(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("old", assignments=[(1, 2, 3)])
        await cluster.stop_broker(3)
        cluster.delete_topic("old")
        cluster.create_topic("new", assignments=[(1, 2, 3)])
        await cluster.start_broker(3)
        names = sorted(p.name for p in (cluster.brokers[3].data_dir / "partitions").iterdir())
        assert names[0] == "new-0"
        assert names[1].startswith("old-0.") and names[1].endswith("-stray")  # renamed, never deleted
