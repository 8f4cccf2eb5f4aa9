"""Leader changes: truncation by leader epoch (never to the HW), no acknowledged write lost, restarts.

The old leader is fenced (its session expires in the controller) after it
appended records its followers never fetched; the controller elects a
follower at leader epoch + 1. The old leader becomes a follower, fetches with
its last epoch, gets DivergingEpoch and truncates exactly its unreplicated
tail; everything acknowledged with acks=all survives on every replica.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes, part_of, wait_until


def produce_body(topic: str, values: list[bytes], acks: int = -1, **batch: Any) -> dict[str, Any]:
    records = build_batch([(None, v) for v in values], **batch)
    return {
        "acks": acks,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": 0, "records": records}]}],
    }


def values_of(hosted: Any) -> list[bytes]:
    return [r.value for b in decode_batches(log_bytes(hosted, hosted.log.log_end_offset)) for r in b.records]


async def test_old_leader_truncates_its_unreplicated_tail_by_epoch_and_no_acked_write_is_lost(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("ledger", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        first_epoch = cluster.partition("ledger").leader_epoch
        acked = [f"acked-{i}".encode() for i in range(30)]
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1) as producer:
            for value in acked:
                await producer.send("ledger", value)
            await producer.flush()
        await cluster.wait_for_replicas_caught_up("ledger")

        # The followers stop fetching; the leader takes acks=1 writes nobody else has.
        await cluster.rm(2).fetchers.pause()
        await cluster.rm(3).fetchers.pause()
        answer = await cluster.call(1, "/kafka/produce", produce_body("ledger", [b"lost-1", b"lost-2"], acks=1))
        assert part_of(answer)["error_code"] == 0 and part_of(answer)["base_offset"] == 30
        assert cluster.hosted(1, "ledger").log.log_end_offset == 32

        cluster.fence(1)
        new_leader = cluster.leader("ledger")
        assert new_leader in (2, 3) and cluster.partition("ledger").leader_epoch == first_epoch + 1
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()

        more = [f"after-{i}".encode() for i in range(10)]
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1) as producer:
            for value in more:
                await producer.send("ledger", value)
            await producer.flush()
        # Broker 1 follows the new leader: it fetched with (offset 32, its last epoch), was told where that
        # epoch ends on the new leader (30), truncated there, and fetched the new records.
        cluster.unfence(1)
        await cluster.wait_for_isr("ledger", 0, {1, 2, 3})
        await cluster.wait_for_replicas_caught_up("ledger")
        for b in (1, 2, 3):
            assert values_of(cluster.hosted(b, "ledger")) == acked + more
        assert len({log_bytes(cluster.hosted(b, "ledger")) for b in (1, 2, 3)}) == 1
        entries = cluster.hosted(1, "ledger").log.leader_epoch_cache.entries
        assert [(e.epoch, e.start_offset) for e in entries] == [(first_epoch, 0), (first_epoch + 1, 30)]


async def test_consumer_follows_the_new_leader_and_reads_every_committed_record(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("moves", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1) as producer:
            for i in range(20):
                await producer.send("moves", f"a{i}".encode())
            await producer.flush()
            tp = TopicPartition("moves", 0)
            async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
                consumer.assign([tp])
                seen: list = []
                for _ in range(200):
                    seen += await consumer.poll(timeout_ms=50)
                    if len(seen) >= 20:
                        break
                cluster.fence(1)
                for i in range(20):
                    await producer.send("moves", f"b{i}".encode())
                await producer.flush()
                for _ in range(400):
                    seen += await consumer.poll(timeout_ms=50)
                    if len(seen) >= 40:
                        break
        assert [r.value for r in seen] == [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(20)]
        assert [r.offset for r in seen] == list(range(40))
        assert {r.leader_epoch for r in seen[20:]} == {cluster.partition("moves").leader_epoch}


async def test_a_restarted_follower_catches_up_from_its_own_log(tmp_path: Path) -> None:
    # While broker 3 is down, acks=all waits until the leader shrinks it out of the ISR (the lag bound).
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("restart", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1) as producer:
            for i in range(50):
                await producer.send("restart", f"x{i}".encode())
            await producer.flush()
            await cluster.wait_for_replicas_caught_up("restart")
            await cluster.stop_broker(3)
            for i in range(50, 80):
                await producer.send("restart", f"x{i}".encode())
            await producer.flush()
        before = cluster.brokers[3].data_dir
        assert any(before.rglob("*.snapshot"))  # producer state snapshotted when the log closed
        await cluster.start_broker(3)
        await cluster.wait_for_replicas_caught_up("restart")
        assert values_of(cluster.hosted(3, "restart")) == [f"x{i}".encode() for i in range(80)]
        assert cluster.hosted(3, "restart").log.log_start_offset == 0


async def test_the_same_broker_at_a_new_leader_epoch_keeps_serving(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("bump", assignments=[(1, 2, 3)])
        assert part_of(await cluster.call(1, "/kafka/produce", produce_body("bump", [b"a"])))["error_code"] == 0
        await cluster.wait_for_replicas_caught_up("bump")
        # A fenced follower leaving and rejoining the ISR bumps partition epochs, not the leader epoch;
        # fencing the leader and unfencing it, then electing it preferred, bumps the leader epoch twice.
        cluster.fence(1)
        cluster.unfence(1)
        await cluster.wait_for_isr("bump", 0, {1, 2, 3})
        cluster.elect_preferred("bump", 0)
        assert cluster.leader("bump") == 1
        answer = part_of(await cluster.call(1, "/kafka/produce", produce_body("bump", [b"b"])))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 1)
        await wait_until(lambda: cluster.hosted(1, "bump").log.high_watermark == 2, what="HW 2")


async def test_each_replica_logs_when_it_starts_to_lead_or_follow(tmp_path: Path, caplog: Any) -> None:
    """The first lines a fault run's analysis needs: which replica led with which log from which epoch."""
    caplog.set_level(logging.INFO, logger="kraftpy.broker.shell.replica_manager")
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("roles", assignments=[(1, 2, 3)])
        epoch = cluster.partition("roles").leader_epoch
        assert part_of(await cluster.call(1, "/kafka/produce", produce_body("roles", [b"a", b"b"])))["error_code"] == 0
        await cluster.wait_for_replicas_caught_up("roles")
        caplog.clear()
        cluster.fence(1)
        new_leader = cluster.leader("roles")
        await wait_until(lambda: f"broker 1 follows broker {new_leader} for roles-0" in caplog.text, what="logged")
        lines = [r.getMessage() for r in caplog.records]
        leads = [x for x in lines if x.startswith(f"broker {new_leader} leads roles-0")]
        assert leads and leads[0].startswith(
            f"broker {new_leader} leads roles-0 at leader epoch {epoch + 1} from log end offset 2 (ISR "
        ), lines
        assert leads[0].endswith(f"was follower at {epoch})"), leads
        follows = [x for x in lines if x.startswith(f"broker 1 follows broker {new_leader} for roles-0")]
        assert follows and f"at leader epoch {epoch + 1}" in follows[0], lines
        assert follows[0].endswith(f"was leader at {epoch})"), follows
