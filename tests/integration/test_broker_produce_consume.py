"""Data flows end to end: the real Producer and Consumer against three ReplicaManagers over loopback HTTP.

acks=all with min ISR 2 on RF 3, acks 0 and 1, every record read back once
and in order, replicas byte-identical below the high watermark, ListOffsets
(earliest, latest, by timestamp), OffsetsForLeaderEpoch, the fetch long
poll woken by an append, and the fetch rounds one acks=all produce costs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes, part_of, wait_until


async def consume_all(bootstrap: str, partitions: list[TopicPartition], count: int) -> list:
    records = []
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign(partitions)
        for _ in range(500):
            records += await consumer.poll(timeout_ms=100)
            if len(records) >= count:
                break
    return records


async def test_acks_all_with_min_isr_2_every_record_read_back_once_in_order(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("orders", partitions=3, configs={"min_insync_replicas": 2})
        sent = {}
        async with Producer(cluster.bootstrap, acks="all", linger_ms=2) as producer:
            futures = [
                await producer.send("orders", f"value-{i}".encode(), key=f"key-{i % 17}".encode()) for i in range(600)
            ]
            for i, future in enumerate(futures):
                md = await future
                sent[(md.partition, md.offset)] = f"value-{i}".encode()
        assert len(sent) == 600
        tps = [TopicPartition("orders", p) for p in range(3)]
        records = await consume_all(cluster.bootstrap, tps, 600)
        got = {(r.partition, r.offset): r.value for r in records}
        assert got == sent  # each exactly once, at the offset its producer was told
        for p in range(3):
            offsets = [r.offset for r in records if r.partition == p]
            assert offsets == sorted(offsets) == list(range(len(offsets)))
            await cluster.wait_for_replicas_caught_up("orders", p)
            copies = {log_bytes(cluster.hosted(b, "orders", p)) for b in (1, 2, 3)}
            assert len(copies) == 1  # the same bytes on every replica below the HW


async def test_acks_0_and_1_are_appended_and_readable(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("events", partitions=1)
        async with Producer(cluster.bootstrap, acks=1) as producer:
            mds = [await (await producer.send("events", f"one-{i}".encode())) for i in range(20)]
        assert [md.offset for md in mds] == list(range(20))
        async with Producer(cluster.bootstrap, acks=0) as producer:
            mds = [await (await producer.send("events", f"zero-{i}".encode())) for i in range(20)]
        assert {md.offset for md in mds} == {-1}  # acks=0: nothing comes back
        records = await consume_all(cluster.bootstrap, [TopicPartition("events", 0)], 40)
        values = [r.value for r in records]
        assert values == [f"one-{i}".encode() for i in range(20)] + [f"zero-{i}".encode() for i in range(20)]


async def test_list_offsets_earliest_latest_by_timestamp_and_offsets_for_leader_epoch(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("clock", partitions=1)
        async with Producer(cluster.bootstrap, linger_ms=0) as producer:
            for i in range(10):
                await producer.send_and_wait("clock", f"t{i}".encode(), timestamp_ms=1_000_000 + i * 1000)
        tp = TopicPartition("clock", 0)
        async with Consumer(cluster.bootstrap) as consumer:
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 10}
            found = await consumer.offsets_for_times({tp: 1_004_500})
            assert found[tp] is not None and found[tp].offset == 5 and found[tp].timestamp == 1_005_000
            assert (await consumer.offsets_for_times({tp: 9_999_999}))[tp] is None
        leader = cluster.leader("clock")
        epoch = cluster.partition("clock").leader_epoch
        body = {
            "topics": [
                {
                    "name": "clock",
                    "partitions": [{"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}],
                }
            ]
        }
        answer = part_of(await cluster.call(leader, "/kafka/offsets_for_leader_epoch", body))
        assert (answer["error_code"], answer["leader_epoch"], answer["end_offset"]) == (0, epoch, 10)


def consumer_fetch_from_start(
    topic: str, epoch: int, *, max_wait_ms: int, min_bytes: int = 1, partitions: int = 1
) -> dict:
    """A consumer's Fetch body for partitions 0..partitions-1 of `topic` from offset 0, long-polling up to
    `max_wait_ms` for `min_bytes`."""
    parts = [
        {"partition": p, "fetch_offset": 0, "current_leader_epoch": epoch, "partition_max_bytes": 1 << 20}
        for p in range(partitions)
    ]
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "topics": [{"name": topic, "partitions": parts}],
    }


async def test_a_parked_fetch_is_answered_by_the_next_append(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("poll", partitions=1)
        leader = cluster.leader("poll")
        epoch = cluster.partition("poll").leader_epoch
        fetch = consumer_fetch_from_start("poll", epoch, max_wait_ms=120_000)
        parked = asyncio.create_task(cluster.call(leader, "/kafka/fetch", fetch, timeout_ms=150_000))
        await asyncio.sleep(0.05)
        assert not parked.done()  # nothing to read: the fetch waits in the purgatory
        produce = {
            "acks": -1,
            "timeout_ms": 5000,
            "topics": [{"name": "poll", "partitions": [{"partition": 0, "records": build_batch([(None, b"wake")])}]}],
        }
        assert part_of(await cluster.call(leader, "/kafka/produce", produce))["error_code"] == 0
        # Woken by the append (once committed), not by max_wait_ms: a missed wake-up would take 120 s.
        answer = part_of(await asyncio.wait_for(parked, 30))
        assert answer["error_code"] == ErrorCode.NONE
        assert [r.value for b in decode_batches(answer["records"]) for r in b.records] == [b"wake"]
        assert answer["high_watermark"] == 1


async def test_a_parked_fetch_with_nothing_to_read_is_answered_at_max_wait_ms(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("quiet", partitions=1)
        leader = cluster.leader("quiet")
        epoch = cluster.partition("quiet").leader_epoch
        fetch = consumer_fetch_from_start("quiet", epoch, max_wait_ms=400)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = part_of(await asyncio.wait_for(cluster.call(leader, "/kafka/fetch", fetch, timeout_ms=30_000), 20))
        waited = loop.time() - started
        # The purgatory's deadline answers it: not at once, and not never.
        assert waited >= 0.35
        assert answer["error_code"] == ErrorCode.NONE and answer["records"] == b""


async def test_a_parked_fetch_rechecks_only_the_partitions_that_changed(tmp_path: Path) -> None:
    """A follower's fetch holds every partition it follows from the leader, most of them idle: a wake
    re-checks the partitions that told of a change, not all of them. Bytes still add up across
    partitions: one batch is below min_bytes, a second on another partition completes the fetch."""
    async with BrokerCluster(tmp_path, replica_fetch_wait_max_ms=120_000) as cluster:
        cluster.create_topic("many", assignments=[(1, 2, 3)] * 4)
        epoch = cluster.partition("many").leader_epoch
        handler = cluster.rm(1).fetch_handler
        checked: list[int] = []
        status = handler._status

        def counting_status(entry, min_bytes):
            checked.append(entry[1])
            return status(entry, min_bytes)

        handler._status = counting_status
        batch = build_batch([(None, b"x" * 100)])
        fetch = consumer_fetch_from_start("many", epoch, max_wait_ms=120_000, min_bytes=len(batch) + 1, partitions=4)
        parked = asyncio.create_task(cluster.call(1, "/kafka/fetch", fetch, timeout_ms=150_000))

        async def produce(partition: int) -> None:
            body = {"acks": -1, "timeout_ms": 5000, "topics": [{"name": "many", "partitions": [
                {"partition": partition, "records": batch}]}]}  # fmt: skip
            # To the handler itself: on the test's connection the answer would queue behind the parked fetch.
            answer = await cluster.rm(1).handlers()["produce"](body)
            assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer

        def follower_requests(broker: int) -> list[list[int]]:
            fetcher = cluster.rm(broker).fetchers.fetchers.get(1)
            return (
                [[hosted.partition for hosted, _ in batch] for batch in fetcher._requests.values()] if fetcher else []
            )

        def all_parked() -> bool:
            """Both followers fetch all four partitions, and every fetch they have in flight is parked with
            the consumer's. A follower that began following partition 0 a turn before the others fetches
            them in two requests (its fetcher keeps up to three in flight), so the count is not always 3."""
            requests = {b: follower_requests(b) for b in (2, 3)}
            covered = all(
                sorted(p for batch in batches for p in batch) == [0, 1, 2, 3] for batches in requests.values()
            )
            return covered and handler.waiting == 1 + sum(len(batches) for batches in requests.values())

        await wait_until(lambda: all_parked() or parked.done(), what="the followers' fetches and the consumer's parked")
        assert not parked.done(), f"the consumer's fetch was answered at once: {parked.result()}"
        await produce(0)
        await asyncio.sleep(0.2)
        assert not parked.done()  # one batch is below min_bytes
        assert checked and set(checked) == {0}, checked  # partitions 1-3 did not change: not looked at
        await produce(2)
        answer = await asyncio.wait_for(parked, 30)
        by_partition = {p["partition"]: p for t in answer["topics"] for p in t["partitions"]}
        assert [p for p in range(4) if by_partition[p]["records"]] == [0, 2]
        assert set(checked) == {0, 2}, checked


async def test_a_fetch_below_min_bytes_from_an_older_segment_is_answered_at_once(tmp_path: Path) -> None:
    """Kafka's DelayedFetch case F: data readable from a segment older than the active one answers the
    fetch whatever min_bytes asks, instead of holding it until max_wait_ms or the next append."""
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("rolled", assignments=[(1, 2, 3)], configs={"segment_bytes": 1024})
        epoch = cluster.partition("rolled").leader_epoch
        for i in range(12):
            part = {"partition": 0, "records": build_batch([(None, b"%03d" % i * 40)])}
            body = {"acks": -1, "timeout_ms": 5000, "topics": [{"name": "rolled", "partitions": [part]}]}
            assert part_of(await cluster.call(1, "/kafka/produce", body))["error_code"] == 0
        assert cluster.rm(1).partitions[("rolled", 0)].log.active_segment_base_offset > 0  # it rolled
        fetch = consumer_fetch_from_start("rolled", epoch, max_wait_ms=120_000, min_bytes=1 << 20)
        answer = part_of(await asyncio.wait_for(cluster.call(1, "/kafka/fetch", fetch, timeout_ms=150_000), 20))
        assert answer["error_code"] == ErrorCode.NONE and answer["records"]


async def test_an_acks_all_produce_costs_each_follower_exactly_one_more_fetch(tmp_path: Path) -> None:
    """The acks=all chain on an idle partition: the append wakes each follower's parked fetch, the follower's
    next fetch (carrying its new log end) moves the HW, and that answers the produce. Long polls of 120 s mean
    any fetch answered here was completed by an event, never by max_wait_ms; a follower not woken, or a
    follower that fetches more than once per append, changes the counts."""
    async with BrokerCluster(tmp_path, replica_fetch_wait_max_ms=120_000) as cluster:
        cluster.create_topic("rounds", assignments=[(1, 2, 3)])
        followers = (2, 3)
        for i in range(3):
            # Both followers' fetches are parked at the leader before the produce arrives.
            await wait_until(lambda: cluster.rm(1).fetch_handler.waiting == 2, what="follower fetches parked")
            sent = {b: cluster.rm(b).fetchers.fetchers[1].requests_sent for b in followers}
            part = {"partition": 0, "records": build_batch([(None, b"r")])}
            produce = {"acks": -1, "timeout_ms": 30_000, "topics": [{"name": "rounds", "partitions": [part]}]}
            answer = part_of(await cluster.call(1, "/kafka/produce", produce, timeout_ms=40_000))
            assert answer["error_code"] == ErrorCode.NONE and answer["base_offset"] == i
            assert cluster.hosted(1, "rounds").log.high_watermark == i + 1
            for b in followers:
                fetcher = cluster.rm(b).fetchers.fetchers[1]
                assert fetcher.requests_sent - sent[b] == 1, f"broker {b} fetched {fetcher.requests_sent - sent[b]}x"
                assert fetcher.failures == 0


async def test_a_follower_sends_its_next_fetch_from_the_task_that_processed_the_answer(tmp_path: Path) -> None:
    """The fetch that reports a follower's append (and so moves the HW) leaves right after the append, from
    the request's own task, as Kafka's fetcher thread loops, not after a round through the fetcher's
    scheduling loop. With that loop stopped, acks=all produces must still complete, append after append;
    had the next fetch needed the loop, the first produce would wait out its timeout (the ISR does not shrink
    meanwhile: replica_lag_time_max_ms is longer)."""
    async with BrokerCluster(tmp_path, replica_fetch_wait_max_ms=120_000, replica_lag_time_max_ms=120_000) as cluster:
        cluster.create_topic("chain", assignments=[(1, 2, 3)])
        followers = (2, 3)
        await wait_until(lambda: cluster.rm(1).fetch_handler.waiting == 2, what="follower fetches parked")
        for b in followers:
            fetcher = cluster.rm(b).fetchers.fetchers[1]
            assert fetcher._task is not None and len(fetcher._requests) == 1
            fetcher._task.cancel()  # the scheduling loop; the parked request's task stays
            await asyncio.gather(fetcher._task, return_exceptions=True)
        for i in range(3):
            part = {"partition": 0, "records": build_batch([(None, b"c")])}
            produce = {"acks": -1, "timeout_ms": 10_000, "topics": [{"name": "chain", "partitions": [part]}]}
            answer = part_of(await cluster.call(1, "/kafka/produce", produce, timeout_ms=20_000))
            assert answer["error_code"] == ErrorCode.NONE and answer["base_offset"] == i
            assert cluster.hosted(1, "chain").log.high_watermark == i + 1
