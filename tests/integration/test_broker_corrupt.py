"""A byte flipped below the recovery point: never served, the replica gives up, is repaired, rejoins the ISR.

Real ReplicaManagers over loopback (test_broker_fixtures.BrokerCluster) with
the real controller decisions; the byte is flipped in a flushed segment file
while the broker runs, as rot under a clean log would be. Heartbeats are the
fixture's to send: `report` sends one with the broker's offline replicas, as
the broker component does every heartbeat interval.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.metadata.controller.requests import BrokerHeartbeatRequest
from kraftpy.protocol.access import REPLICA_FETCH_PATH
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import decode_batches
from kraftpy.protocol.records.header import parse_header
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes, part_of, wait_until

TOPIC = "rot"
RECORDS = 300


async def fill(cluster: BrokerCluster) -> list[bytes]:
    values = [f"value-{i:04d}".encode() for i in range(RECORDS)]
    # One millisecond apart: batches sent within the same millisecond would share timestamps, and a
    # lookup by one batch's max timestamp could be answered from an earlier batch without reading it.
    first_ms = int(time.time() * 1000) - RECORDS
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:
        for i in range(0, RECORDS, 10):  # many small batches
            for n, value in enumerate(values[i : i + 10], i):
                await producer.send(TOPIC, value, timestamp_ms=first_ms + n)
            await producer.flush()
    await cluster.wait_for_replicas_caught_up(TOPIC)
    for b in cluster.partition(TOPIC).replicas:
        cluster.hosted(b, TOPIC).log.flush()  # below the recovery point: recovery would never look again
    return values


def flip_payload_byte(segment: Path, offset: int) -> tuple[int, int]:
    """Flip one payload byte (fsynced) of the batch holding `offset`; returns (its position, its base offset).

    A file the running broker has open is changed in place, as rot under a flushed log would be.
    """
    data = segment.read_bytes()
    pos = 0
    for batch in decode_batches(data):
        if batch.base_offset <= offset <= batch.last_offset:
            break
        pos += batch.header.size
    victim = pos + batch.header.size - 2
    fd = os.open(segment, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes([data[victim] ^ 0x40]), victim)
        os.fsync(fd)
    finally:
        os.close(fd)
    return pos, batch.base_offset


def flip_byte_in_middle_batch(cluster: BrokerCluster, broker_id: int) -> int:
    """Flip one payload byte of the batch holding offset RECORDS // 2 of a replica; returns its base offset."""
    (segment,) = sorted(cluster.hosted(broker_id, TOPIC).log.directory.glob("*.log"))
    return flip_payload_byte(segment, RECORDS // 2)[1]


def report(cluster: BrokerCluster, broker_id: int) -> None:
    """One heartbeat of `broker_id` naming its offline replicas; the controller's records are published."""
    rm = cluster.rm(broker_id)
    request = BrokerHeartbeatRequest(
        broker_id, cluster.brokers[broker_id].epoch, cluster.harness.committed.offset, False, rm.offline_replicas()
    )
    cluster.harness.send(request)
    cluster.publish()


def consumer_fetch(offset: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 10 << 20,
        "topics": [
            {"name": TOPIC, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 10 << 20}]}
        ],
    }


async def consume_all(cluster: BrokerCluster) -> list[bytes]:
    got: list[bytes] = []
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        for _ in range(100):
            got += [r.value for r in await consumer.poll(timeout_ms=500)]
            if len(got) >= RECORDS:
                break
    return got


async def repaired_everywhere(cluster: BrokerCluster, values: list[bytes]) -> None:
    await cluster.wait_for_isr(TOPIC, 0, {1, 2, 3}, timeout_s=20)
    await cluster.wait_for_replicas_caught_up(TOPIC, timeout_s=20)
    copies = {log_bytes(cluster.hosted(b, TOPIC)) for b in (1, 2, 3)}
    assert len(copies) == 1
    (copy,) = copies
    assert [r.value for b in decode_batches(copy) for r in b.records] == values  # every CRC checked


async def test_a_leader_never_serves_a_corrupt_batch_and_is_repaired_from_the_isr(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, log_scrub_bytes_per_second=0) as cluster:
        topic_id = cluster.create_topic(TOPIC, assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        values = await fill(cluster)
        bad_offset = flip_byte_in_middle_batch(cluster, 1)

        # Below the damage the leader still serves; the fetch that would carry the bad batch gets
        # KAFKA_STORAGE_ERROR and no bytes, and the replica goes offline at once.
        answer = part_of(await cluster.call(1, "/kafka/fetch", consumer_fetch(bad_offset)))
        assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR and answer["records"] == b""
        assert cluster.rm(1).offline_replicas() == ((topic_id, 0),)
        answer = part_of(await cluster.call(1, "/kafka/fetch", consumer_fetch(0)))
        assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR and answer["records"] == b""

        # The heartbeat tells the controller: leadership moves to an ISR member, broker 1 leaves the ISR.
        report(cluster, 1)
        part = cluster.partition(TOPIC)
        assert part.leader in (2, 3) and 1 not in part.isr
        # Broker 1 cuts its log at the bad batch, follows the new leader, catches up and rejoins the ISR.
        await repaired_everywhere(cluster, values)
        assert cluster.rm(1).offline_replicas() == () and cluster.rm(1).repairs_done == 1
        assert await consume_all(cluster) == values


async def test_the_scrubber_finds_a_flipped_byte_in_a_follower_and_the_replica_is_repaired(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, log_scrub_bytes_per_second=0) as cluster:
        cluster.create_topic(TOPIC, assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        values = await fill(cluster)
        flip_byte_in_middle_batch(cluster, 3)
        # Broker 3 restarts with a scrubber (pass after pass): nothing reads the damaged batch but it.
        await cluster.stop_broker(3)
        await cluster.start_broker(3, log_scrub_bytes_per_second=10 << 20, log_scrub_interval_ms=100)
        await wait_until(lambda: cluster.rm(3).offline_replicas() != (), timeout_s=20, what="the scrubber to find it")
        assert cluster.rm(3).status()["scrub"]["corrupt_found"] == 1
        report(cluster, 3)
        assert 3 not in cluster.partition(TOPIC).isr
        await repaired_everywhere(cluster, values)
        assert cluster.rm(3).repairs_done == 1


async def test_a_follower_refuses_a_corrupt_fetched_batch_and_fetches_it_again(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, log_scrub_bytes_per_second=0) as cluster:
        cluster.create_topic(TOPIC, assignments=[(1, 2)], configs={"min_insync_replicas": 1})
        values = await fill(cluster)
        await cluster.rm(2).fetchers.pause()
        answer = await cluster.call(1, "/kafka/produce", produce_body([b"late-1", b"late-2"]))
        assert part_of(answer)["error_code"] == 0
        follower = cluster.hosted(2, TOPIC)
        end = follower.log.log_end_offset
        assert end == RECORDS
        # The leader's answer, damaged on the way (one bit of the payload), handed to broker 2's fetcher.
        fetched = await cluster.call_internal(1, REPLICA_FETCH_PATH, follower_fetch(end, cluster.brokers[2].epoch))
        part = dict(part_of(fetched))
        records = bytearray(part["records"])
        assert records
        records[-1] ^= 0x01
        part["records"] = bytes(records)
        fetcher = cluster.rm(2).fetchers.fetchers[1]
        # (pausing released the fetch in flight and set a backoff: build the next fetch once it ends)
        request = follower.core.build_fetch(follower.log_state(), follower.core.follower.retry_at_ms)
        assert request is not None and request.fetch_offset == end
        fetcher._process(follower, request, part)
        assert follower.log.log_end_offset == end  # nothing appended
        assert fetcher.corrupt_answers == 1
        assert cluster.rm(2).status()["fetchers"]["1"]["corrupt_answers"] == 1
        # Fetching resumes at the same offset and gets the sound batch.
        cluster.rm(2).fetchers.resume()
        await cluster.wait_for_replicas_caught_up(TOPIC)
        got = [r.value for b in decode_batches(log_bytes(follower, follower.log.log_end_offset)) for r in b.records]
        assert got == [*values, b"late-1", b"late-2"]


def produce_body(values: list[bytes]) -> dict[str, Any]:
    from kraftpy.protocol.records.batch import build_batch

    records = build_batch([(None, v) for v in values])
    return {
        "acks": 1,
        "timeout_ms": 5000,
        "topics": [{"name": TOPIC, "partitions": [{"partition": 0, "records": records}]}],
    }


def follower_fetch(offset: int, broker_epoch: int) -> dict[str, Any]:
    body = consumer_fetch(offset)
    body["replica_id"] = 2
    body["replica_epoch"] = broker_epoch
    return body


async def test_list_offsets_by_timestamp_on_a_corrupt_batch_gives_up_the_replica_too(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, log_scrub_bytes_per_second=0) as cluster:
        topic_id = cluster.create_topic(TOPIC, assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        await fill(cluster)
        (segment,) = sorted(cluster.hosted(1, TOPIC).log.directory.glob("*.log"))
        position, _ = flip_payload_byte(segment, RECORDS // 2)
        max_timestamp = parse_header(segment.read_bytes(), position).max_timestamp  # (no CRC check)
        body = {"topics": [{"name": TOPIC, "partitions": [{"partition": 0, "timestamp": max_timestamp}]}]}
        answer = part_of(await cluster.call(1, "/kafka/list_offsets", body))
        assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert cluster.rm(1).offline_replicas() == ((topic_id, 0),)
