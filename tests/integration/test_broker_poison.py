"""Poison pills on produce: the leader validates every batch's records once, and the partition keeps serving.

Each hostile batch has a valid CRC32C, so a header-only check took it; once
stored it broke every consumer of the partition. Now each gets Kafka's code
(CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TOPIC_EXCEPTION) and a readable
message, nothing reaches the log, and the same broker still takes and serves
good batches. A request too large to check on the event loop is checked in a
worker thread without reordering appends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraftpy.broker.api.produce import INLINE_MAX_RECORDS, check_producer_batch
from kraftpy.broker.groups import PartitionStatus, partition_for
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import CompressionType, build_batch, decode_batches
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.topics import CLUSTER_METADATA_TOPIC, OFFSETS_TOPIC
from tests.integration.test_broker_errors import fetch, produce
from tests.integration.test_broker_fixtures import BrokerCluster, error_of, part_of, wait_for, wait_until
from tests.integration.test_groups_broker_leadership import FETCH, GROUP, RETRIABLE, commit_body, committed
from tests.unit.protocol.test_records_validation import GARBAGE, _zeros_zstd, forge


async def test_poison_batches_are_refused_and_the_partition_keeps_serving(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("poison", assignments=[(1, 2, 3)])
        cluster.create_topic("compacted", assignments=[(1, 2, 3)], configs={"cleanup_policy": "compact"})
        good = build_batch([(b"k", b"good")])
        cases = {f"garbage {codec.name}": (forge(good, section=data, attributes=codec), ErrorCode.CORRUPT_MESSAGE)
                 for codec, data in GARBAGE.items()}  # fmt: skip
        cases["a 200 MB zstd bomb"] = (
            forge(good, section=_zeros_zstd(200 << 20), attributes=CompressionType.ZSTD),
            ErrorCode.CORRUPT_MESSAGE,
        )
        three = build_batch([(b"k", b"v")] * 3, compression=CompressionType.LZ4)
        cases["a record count of 4 over 3 records"] = (
            forge(three, records_count=4, last_offset_delta=3),
            ErrorCode.INVALID_RECORD,
        )
        for what, (batch, expected) in cases.items():
            answer = part_of(await cluster.call(1, "/kafka/produce", produce("poison", batch)))
            assert (answer["error_code"], what) == (expected, what), answer
            assert answer["message"], what
        follower = next(b for b in (1, 2, 3) if b != cluster.leader("poison"))
        answer = part_of(await cluster.call(follower, "/kafka/produce", produce("poison", cases["garbage ZSTD"][0])))
        assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # only the leader looks at records
        keyless = build_batch([(b"k", b"v"), (None, b"no key")])
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("compacted", keyless)))
        assert answer["error_code"] == ErrorCode.INVALID_RECORD
        assert "cannot accept message without key" in answer["message"]
        assert cluster.hosted(1, "poison").log.log_end_offset == 0
        assert cluster.hosted(1, "compacted").log.log_end_offset == 0

        answer = part_of(await cluster.call(1, "/kafka/produce", produce("poison", good)))
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)
        served = part_of(await cluster.call(1, "/kafka/fetch", fetch("poison", 0)))
        assert [r.value for b in decode_batches(served["records"]) for r in b.records] == [b"good"]


async def test_clients_may_not_write_internal_topics(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic(OFFSETS_TOPIC, assignments=[(1, 2, 3)], configs={"cleanup_policy": "compact"})
        for topic in (OFFSETS_TOPIC, CLUSTER_METADATA_TOPIC, "__transaction_state"):
            answer = part_of(await cluster.call(1, "/kafka/produce", produce(topic, build_batch([(b"k", b"v")]))))
            assert answer["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, answer
            assert answer["message"] == f"Cannot append to internal topic {topic}"
        assert cluster.hosted(1, OFFSETS_TOPIC).log.log_end_offset == 0


async def test_large_batches_are_checked_off_the_loop_and_appended_in_arrival_order(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("big", assignments=[(1, 2, 3)])
        await cluster.settled()
        handler = cluster.rm(1).handlers()["produce"]
        n = INLINE_MAX_RECORDS + 1_000  # more than the event loop checks: the worker thread does
        heavy = build_batch([(b"k%d" % i, b"v" * 50) for i in range(n)], compression=CompressionType.LZ4)
        light = build_batch([(b"after", b"the heavy one")])
        # Both start before either appends: the heavy one goes to the worker, the light one must wait for it.
        first = asyncio.create_task(handler(produce("big", heavy, acks=1)))
        second = asyncio.create_task(handler(produce("big", light, acks=1)))
        answers = await asyncio.gather(first, second)
        assert [error_of(a) for a in answers] == [0, 0], answers
        assert [part_of(a)["base_offset"] for a in answers] == [0, n]
        # A request cancelled while it waits behind the worker does not let the next one overtake.
        first = asyncio.create_task(handler(produce("big", heavy, acks=1)))
        cancelled = asyncio.create_task(handler(produce("big", light, acks=1)))
        third = asyncio.create_task(handler(produce("big", light, acks=1)))
        await asyncio.sleep(0)  # all three have begun: the first is in the worker, the others wait
        cancelled.cancel()
        answers = await asyncio.gather(first, third)
        assert [part_of(a)["base_offset"] for a in answers] == [n + 1, 2 * n + 1]
        assert cancelled.cancelled()
        bomb = forge(light, section=_zeros_zstd(200 << 20), attributes=CompressionType.ZSTD)
        answer = part_of(await handler(produce("big", bomb, acks=1)))  # inflates past 1 MiB: the worker refuses it
        assert answer["error_code"] == ErrorCode.CORRUPT_MESSAGE and "inflates beyond" in answer["message"]
        assert cluster.hosted(1, "big").log.log_end_offset == 2 * n + 2


async def test_a_load_of_the_offsets_partition_skips_records_it_cannot_use(tmp_path: Path) -> None:
    """Records that predate produce's refusal (appended here through the coordinator's own path) never block a load."""
    async with BrokerCluster(tmp_path) as c:
        c.create_topic(OFFSETS_TOPIC, 50, 3, configs={"cleanup_policy": "compact"})
        c.create_topic("orders")  # Kafka answers UNKNOWN_TOPIC_OR_PARTITION to a commit for a missing topic
        partition = partition_for(GROUP, 50)
        leader = c.leader(OFFSETS_TOPIC, partition)
        shell = c.rm(leader).groups
        led = [p for p in range(50) if c.leader(OFFSETS_TOPIC, p) == leader]
        await wait_until(
            lambda: all(shell.coordinator.partition_status(p) is PartitionStatus.ACTIVE for p in led),
            what="the partitions loaded",
        )
        address = c.brokers[leader].kafka_address
        answer = await c.kafka.call(address, "/kafka/offset_commit", commit_body("", -1, 42), raise_errors=False)
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer

        hosted = c.hosted(leader, OFFSETS_TOPIC, partition)
        handler = c.rm(leader).handlers()["produce"]
        garbage = forge(build_batch([(b"k", b"v")]), section=GARBAGE[CompressionType.ZSTD], attributes=4)
        for batch in (build_batch([(None, b"keyless")]), build_batch([(b"\xff\xfe", b"not cbor")]), garbage):
            header = check_producer_batch(batch, hosted.log.config.max_message_bytes, hosted.log.config.segment_bytes)
            now = monotonic_ms()
            rid, future = handler.begin_append(hosted, header, batch, -1, 5_000, now)
            await handler.await_appends({rid: ((OFFSETS_TOPIC, partition), hosted, future)}, now + 5_000)
            assert future.result().error == ErrorCode.NONE

        loads = shell.loader.loads_completed
        shell.loader.reload(partition)
        answer = await wait_for(
            lambda: c.kafka.call(address, "/kafka/offset_fetch", FETCH, raise_errors=False),
            lambda a: a["error_code"] not in RETRIABLE,
        )
        assert committed(answer) == 42, answer
        assert shell.loader.loads_completed == loads + 1
