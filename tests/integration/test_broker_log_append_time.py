"""message.timestamp.type end to end: kraftpy's Producer and Consumer against three in-process brokers.

LogAppendTime: the leader stamps each batch with its clock; the producer is told
that time, every replica holds the same stamped bytes, and consumers read every
record at it. CreateTime keeps the producer's timestamps and answers -1.
"""

from __future__ import annotations

import time
from pathlib import Path

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.protocol.records.batch import CREATE_TIME, LOG_APPEND_TIME, decode_batches
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes

CREATED_MS = 1_000_000  # a create time far in the past, unmistakable for a broker's clock


async def _consume(bootstrap: str, topic: str, count: int) -> list:
    records: list = []
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        for _ in range(300):
            records += await consumer.poll(timeout_ms=100)
            if len(records) >= count:
                break
    return records


async def test_log_append_time_stamps_batches_on_every_replica_and_for_consumers(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("stamped", partitions=1, configs={"message_timestamp_type": "LogAppendTime"})
        before_ms = int(time.time() * 1000)
        async with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
            futures = [
                await producer.send("stamped", f"v{i}".encode(), key=b"k", timestamp_ms=CREATED_MS) for i in range(50)
            ]
            mds = [await f for f in futures]
        after_ms = int(time.time() * 1000)
        append_times = {md.timestamp for md in mds}
        assert all(before_ms <= t <= after_ms for t in append_times), (before_ms, append_times, after_ms)

        records = await _consume(cluster.bootstrap, "stamped", 50)
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(50)]
        assert {r.offset: r.timestamp for r in records} == {md.offset: md.timestamp for md in mds}

        await cluster.wait_for_replicas_caught_up("stamped", 0)
        copies = {log_bytes(cluster.hosted(b, "stamped", 0)) for b in (1, 2, 3)}
        assert len(copies) == 1  # the followers hold the leader's stamped bytes
        batches = list(decode_batches(copies.pop()))  # CRCs checked
        assert {b.header.timestamp_type for b in batches} == {LOG_APPEND_TIME}
        assert {b.header.max_timestamp for b in batches} == append_times


async def test_create_time_keeps_the_producers_timestamps(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("created", partitions=1)
        async with Producer(cluster.bootstrap, acks="all") as producer:
            md = await (await producer.send("created", b"v", timestamp_ms=CREATED_MS))
        assert md.timestamp == CREATED_MS
        [record] = await _consume(cluster.bootstrap, "created", 1)
        assert record.timestamp == CREATED_MS
        await cluster.wait_for_replicas_caught_up("created", 0)
        [batch] = list(decode_batches(log_bytes(cluster.hosted(2, "created", 0))))
        assert batch.header.timestamp_type == CREATE_TIME


def _set_config(cluster: BrokerCluster, resource: ConfigResource, key: str, value: str) -> None:
    request = IncrementalAlterConfigsRequest((AlterConfigsResource(resource, (AlterConfigOp(key, value=value),)),))
    assert cluster.harness.send(request).response.results[0].error is None
    cluster.publish()


async def test_the_broker_default_and_a_topic_change_apply_to_the_next_append(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        # The broker-wide default (Kafka's log.message.timestamp.type) makes a topic without its own LogAppendTime.
        _set_config(cluster, ConfigResource(ConfigResourceType.BROKER, ""), "message_timestamp_type", "LogAppendTime")
        cluster.create_topic("t", partitions=1)
        async with Producer(cluster.bootstrap, acks="all") as producer:
            stamped = await (await producer.send("t", b"a", timestamp_ms=CREATED_MS))
            assert stamped.timestamp > CREATED_MS
            # The topic's own setting wins, from the next append on.
            _set_config(cluster, ConfigResource(ConfigResourceType.TOPIC, "t"), "message_timestamp_type", "CreateTime")
            created = await (await producer.send("t", b"b", timestamp_ms=CREATED_MS))
            assert created.timestamp == CREATED_MS
        records = await _consume(cluster.bootstrap, "t", 2)
        assert [(r.value, r.timestamp) for r in records] == [(b"a", stamped.timestamp), (b"b", CREATED_MS)]
