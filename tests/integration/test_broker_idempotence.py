"""Idempotent producers: ids from controller blocks, duplicates answered with their original offsets.

Raw produce requests with hand-built batches (producer id, epoch, sequence)
pin down every answer: a resent batch gets its first offsets back and is not
written twice, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch
INVALID_PRODUCER_EPOCH, an unknown producer with a sequence above 0
UNKNOWN_PRODUCER_ID. The producer state survives a leader change (followers
keep it from the batches they fetch) and a restart of every broker (rebuilt
from snapshots and the log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kraftpy.client import Producer
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from tests.integration.test_broker_fixtures import BrokerCluster, part_of


def idempotent(pid: int, epoch: int, seq: int, n: int, tag: str = "v") -> bytes:
    return build_batch(
        [(None, f"{tag}{seq + i}".encode()) for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def body(topic: str, records: bytes, acks: int = -1) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": 0, "records": records}]}],
    }


async def init_pid(cluster: BrokerCluster, broker: int, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
    answer = await cluster.call(
        broker, "/kafka/init_producer_id", {"transactional_id": None, "producer_id": pid, "producer_epoch": epoch}
    )
    return answer["producer_id"], answer["producer_epoch"]


async def test_duplicates_gaps_epochs_and_unknown_producers(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("idem", assignments=[(1, 2, 3)])
        pid, epoch = await init_pid(cluster, 2)
        other_pid, _ = await init_pid(cluster, 3)
        assert epoch == 0 and pid != other_pid  # each broker serves its own block from the controller

        async def send(records: bytes) -> dict[str, Any]:
            return part_of(await cluster.call(1, "/kafka/produce", body("idem", records)))

        first = idempotent(pid, epoch, 0, 3)
        assert (await send(first))["base_offset"] == 0
        assert (await send(idempotent(pid, epoch, 3, 2)))["base_offset"] == 3
        again = await send(first)  # a retry of a batch already in the log
        assert (again["error_code"], again["base_offset"]) == (ErrorCode.NONE, 0)
        assert cluster.hosted(1, "idem").log.log_end_offset == 5  # not written twice
        assert (await send(idempotent(pid, epoch, 9, 1)))["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

        # Naming a producer id (KIP-360's reset, or anyone who read it off the log) gets a new id, as from
        # Kafka: a bump of the named one would fence the producer that holds it.
        reset_pid, reset_epoch = await init_pid(cluster, 1, pid, epoch)
        assert reset_pid not in (pid, other_pid) and reset_epoch == 0
        assert (await send(idempotent(pid, epoch, 5, 1)))["base_offset"] == 5  # its holder writes on
        assert (await send(idempotent(reset_pid, 0, 0, 1, tag="b")))["base_offset"] == 6
        # A higher epoch sent straight in a batch is KIP-360's own bump on the partition: the old one is fenced.
        assert (await send(idempotent(pid, epoch + 1, 0, 1, tag="c")))["base_offset"] == 7
        assert (await send(idempotent(pid, epoch, 6, 1)))["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert (await send(idempotent(other_pid, 0, 7, 1)))["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
        assert cluster.hosted(1, "idem").log.log_end_offset == 8


async def test_producer_state_survives_a_leader_change_and_a_restart_of_every_broker(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("durable", assignments=[(1, 2, 3)], configs={"segment_bytes": 1024})
        pid, epoch = await init_pid(cluster, 1)
        batches = [idempotent(pid, epoch, 4 * i, 4, tag=f"r{i}-") for i in range(30)]  # several segment rolls
        for i, records in enumerate(batches):
            answer = part_of(await cluster.call(1, "/kafka/produce", body("durable", records)))
            assert answer["base_offset"] == 4 * i
        await cluster.wait_for_replicas_caught_up("durable")

        cluster.fence(1)
        new_leader = cluster.leader("durable")
        answer = part_of(await cluster.call(new_leader, "/kafka/produce", body("durable", batches[-1])))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 4 * 29)  # known from fetching

        for b in (1, 2, 3):
            await cluster.stop_broker(b)
        for b in (1, 2, 3):
            await cluster.start_broker(b)
        leader = cluster.leader("durable")
        answer = part_of(await cluster.call(leader, "/kafka/produce", body("durable", batches[-1])))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 4 * 29)  # rebuilt on restart
        answer = part_of(await cluster.call(leader, "/kafka/produce", body("durable", idempotent(pid, epoch, 120, 1))))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 120)
        assert any((cluster.brokers[leader].data_dir / "partitions" / "durable-0").glob("*.snapshot"))


async def test_the_idempotent_client_writes_each_record_once(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("client", partitions=2, configs={"min_insync_replicas": 2})
        async with Producer(cluster.bootstrap, enable_idempotence=True, acks="all", linger_ms=1) as producer:
            futures = [await producer.send("client", f"{i}".encode(), partition=i % 2) for i in range(200)]
            offsets = [(md.partition, md.offset) for md in [await f for f in futures]]
        assert sorted(offsets) == sorted({(p, o) for p, o in offsets})
        for p in range(2):
            assert cluster.hosted(cluster.leader("client", p), "client", p).log.log_end_offset == 100
