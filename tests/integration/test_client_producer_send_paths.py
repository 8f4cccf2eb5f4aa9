"""The producer's send() shortcuts against three real brokers: flush() over batches, the topic view.

send() keeps one view of each topic per metadata snapshot (partition count,
available partitions, TopicPartitions) and flush() waits for each incomplete
batch's last record instead of a set of every record's future
(docs/perf-kafka-clients.md). These tests catch either shortcut going stale.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraftpy.client import Producer
from kraftpy.metadata.controller.requests import CreatePartitionsRequest, CreatePartitionsTopic
from tests.integration.test_broker_fixtures import BrokerCluster


async def test_flush_waits_for_every_record_of_every_batch(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("many", partitions=3)
        # Lingering a minute with 1 KiB batches: nothing is sent until flush(), and the records fill
        # dozens of batches in each partition, so a flush that waited for fewer batches leaves some pending.
        async with Producer(cluster.bootstrap, acks="all", linger_ms=60_000, batch_size=1024) as producer:
            futures = [
                await producer.send("many", b"v" * 100, key=f"k{i % 7}".encode(), callback=None) for i in range(600)
            ]
            assert not any(f.done() for f in futures)
            await producer.flush()
            assert all(f.done() for f in futures)
            offsets = {(md.partition, md.offset) for md in (f.result() for f in futures)}
        assert len(offsets) == 600 and all(offset >= 0 for _, offset in offsets)


async def test_send_sees_partitions_added_after_its_first_send(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("grows", partitions=1)
        async with Producer(cluster.bootstrap, acks="all", linger_ms=0, metadata_max_age_ms=100) as producer:
            first = await (await producer.send("grows", b"a", partition=0))
            assert first.partition == 0
            cluster.harness.send(CreatePartitionsRequest((CreatePartitionsTopic("grows", 3),)))
            cluster.publish()
            for _ in range(100):  # the producer's metadata refreshes every 100 ms
                if len(await producer.partitions_for("grows")) == 3:
                    break
                await asyncio.sleep(0.05)
            # The view built from the one-partition snapshot is stale: keys now spread over all three.
            spread = {(await (await producer.send("grows", b"c", key=f"k{i}".encode()))).partition for i in range(60)}
            assert spread == {0, 1, 2}
            later = await (await producer.send("grows", b"b", partition=2))
            assert (later.topic, later.partition) == ("grows", 2)


async def test_send_to_a_partition_beyond_the_view_waits_for_metadata_that_has_it(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("later", partitions=1)
        async with Producer(cluster.bootstrap, acks="all", linger_ms=0, metadata_max_age_ms=60_000) as producer:
            await (await producer.send("later", b"a", partition=0))
            # A send to a known partition brings the view up to date without yielding to the loop, so
            # no refresh lands between it and the send below: the view, not a new snapshot, is tested.
            await producer.send("later", b"b", partition=0)
            cluster.harness.send(CreatePartitionsRequest((CreatePartitionsTopic("later", 2),)))
            cluster.publish()
            assert producer._topic_views["later"][0] is producer._metadata.cluster
            md = await asyncio.wait_for(await producer.send("later", b"b", partition=1), 10)
            assert (md.partition, md.offset) == (1, 0)
            assert producer._metadata.cluster.num_partitions("later") == 2
