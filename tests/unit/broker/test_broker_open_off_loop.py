"""Partition logs open in the log manager's worker thread, never on the event loop, with batched fsyncs;
metadata changes that reach a partition while its log opens are applied after the open, in their order.

The logs are real `PartitionLog`s in tmp_path; `GatedLog` is a subclass that records the thread its open
runs in and can hold the open there until the test releases it (so a change can arrive meanwhile).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.replication import Role
from kraftpy.broker.shell.log_manager import LogManager, OpenRequest, read_partition_metadata
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.storage import LogConfig, LogStorageError, PartitionLog
from tests.integration.test_broker_fixtures import BrokerCluster, error_of, wait_until

GATE_TIMEOUT_S = 10.0  # bound on how long a held open waits for the test


class GatedLog(PartitionLog):
    """A real PartitionLog whose open() notes its thread and waits (bounded) at the gate."""

    gate: ClassVar[threading.Event] = threading.Event()
    threads: ClassVar[list[int]] = []

    @classmethod
    def open(cls, dir: Path, config: LogConfig | None = None, *, now_ms: int | None = None) -> PartitionLog:
        cls.threads.append(threading.get_ident())
        cls.gate.wait(GATE_TIMEOUT_S)
        return super().open(dir, config, now_ms=now_ms)


@pytest.fixture(autouse=True)
def open_gate() -> None:
    GatedLog.gate.set()
    GatedLog.threads.clear()


def produce(topic: str) -> dict[str, Any]:
    batch = build_batch([(None, b"x")])
    return {
        "acks": 1,
        "timeout_ms": 2000,
        "topics": [{"name": topic, "partitions": [{"partition": 0, "records": batch}]}],
    }


async def test_logs_open_in_a_worker_thread_in_one_batch_with_one_fsync_of_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogManager(tmp_path, ReplicaManagerSettings(log_cleaner_enable=False), lambda: [])
    logs.log_class = GatedLog
    await logs.start()
    # The real fsyncs and fdatasyncs, counted by the directory or file they make durable.
    synced: Counter[str] = Counter()
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counting(fd: int, real: Any = real) -> None:
            synced[os.readlink(f"/proc/self/fd/{fd}")] += 1
            real(fd)

        monkeypatch.setattr(os, name, counting)
    GatedLog.gate.clear()  # the first request is held, so the next two queue behind it
    topic_id = uuid.uuid4()
    first = logs.open_later(OpenRequest("t", topic_id, 0, LogConfig()))
    await wait_until(lambda: len(GatedLog.threads) == 1, what="the first open to start")
    rest = [
        logs.open_later(OpenRequest("t", topic_id, p, LogConfig(), then=lambda plog: plog.log_end_offset))
        for p in (1, 2)
    ]
    GatedLog.gate.set()
    opened = [await asyncio.wait_for(f, GATE_TIMEOUT_S) for f in (first, *rest)]
    loop_thread = threading.get_ident()
    assert len(GatedLog.threads) == 3 and loop_thread not in GatedLog.threads
    assert logs.open_batches == 2  # the two requests that queued meanwhile went as one batch
    assert [o.prepared for o in opened] == [None, 0, 0]  # `then` ran after each open
    # Counted from before the held open finished: both batches, three new partitions.
    assert synced[str(tmp_path / "partitions")] == 2  # one fsync of partitions/ per batch, not per partition
    for p in (0, 1, 2):
        directory = tmp_path / "partitions" / f"t-{p}"
        assert synced[str(directory)] == 1  # all its files' renames: one directory fsync
        assert read_partition_metadata(directory) == topic_id
    # Per new partition: partition.metadata, the leader-epoch and three offset checkpoints, the directory
    # (the empty first segment needs none: its name is in the directory).
    assert sum(synced.values()) == 2 + 3 * 6
    for o in opened:
        o.log.close()
    for p in (0, 1, 2):  # what was written opens again as the same empty log
        reopened = PartitionLog.open(tmp_path / "partitions" / f"t-{p}")
        assert reopened.log_end_offset == 0 and reopened.leader_epoch_cache.entries == []
        reopened.close()
    await logs.stop()


async def test_leader_change_deletion_and_recreation_during_an_open_apply_after_it_in_order(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, broker_ids=(1, 2)) as cluster:
        rm = cluster.rm(1)
        rm.logs.log_class = GatedLog
        loop_thread = threading.get_ident()

        # A leader change while broker 1 opens: it must end up a follower of the new leader, not the old leader.
        GatedLog.gate.clear()
        cluster.create_topic("moved", assignments=[(1, 2)])
        await wait_until(lambda: len(GatedLog.threads) == 1, what="broker 1 to start opening moved-0")
        assert rm.status()["opening"] == 1 and ("moved", 0) not in rm.partitions
        with pytest.raises(KafkaError) as caught:
            rm.lookup("moved", 0)
        assert caught.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER  # retriable: clients try again
        answer = await cluster.kafka.call(cluster.brokers[1].kafka_address, "/kafka/produce", produce("moved"))
        assert error_of(answer) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        cluster.fence(1)
        now = cluster.partition("moved")
        assert now.leader == 2
        GatedLog.gate.set()
        await cluster.settled()
        hosted = cluster.hosted(1, "moved")
        assert hosted.role is Role.FOLLOWER and hosted.core.leader_epoch == now.leader_epoch
        assert hosted.core.follower is not None and hosted.core.follower.leader_id == 2
        cluster.unfence(1)

        # Deleted and created again under the same name while the first open is held.
        GatedLog.gate.clear()
        GatedLog.threads.clear()
        first = cluster.create_topic("again", assignments=[(1,)])
        await wait_until(lambda: len(GatedLog.threads) == 1, what="broker 1 to start opening again-0")
        cluster.delete_topic("again")
        second = cluster.create_topic("again", assignments=[(1,)])
        assert first != second and ("again", 0) not in rm.partitions
        GatedLog.gate.set()
        await cluster.settled()
        hosted = cluster.hosted(1, "again")
        assert hosted.topic_id == second and hosted.role is Role.LEADER
        assert read_partition_metadata(hosted.log.directory) == second
        assert len(GatedLog.threads) == 2 and loop_thread not in GatedLog.threads
        partitions = cluster.brokers[1].data_dir / "partitions"
        await wait_until(
            lambda: not any(p.name.endswith("-delete") for p in partitions.iterdir()), what="the old log removed"
        )


async def test_a_broker_stopping_while_a_log_opens_closes_that_log(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, broker_ids=(1,)) as cluster:
        cluster.rm(1).logs.log_class = GatedLog
        GatedLog.gate.clear()
        cluster.create_topic("held", assignments=[(1,)])
        await wait_until(lambda: len(GatedLog.threads) == 1, what="the open to start")
        stopping = asyncio.create_task(cluster.stop_broker(1))
        await asyncio.sleep(0.05)
        assert not stopping.done()  # it waits for the open in flight
        GatedLog.gate.set()
        await asyncio.wait_for(stopping, GATE_TIMEOUT_S)
        rm = await cluster.start_broker(1)  # the directory lock was released: it opens again
        assert cluster.hosted(1, "held").role is Role.LEADER and rm.status()["opening"] == 0


async def test_a_failed_open_answers_its_waiter_and_leaves_the_directory_free(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, ReplicaManagerSettings(log_cleaner_enable=False), lambda: [])
    await logs.start()

    def broken(plog: PartitionLog) -> None:
        raise ValueError("producer state is unreadable")

    topic_id = uuid.uuid4()
    with pytest.raises(ValueError, match="unreadable"):
        await asyncio.wait_for(logs.open_later(OpenRequest("t", topic_id, 0, LogConfig(), then=broken)), 10)
    again = await asyncio.wait_for(logs.open_later(OpenRequest("t", topic_id, 0, LogConfig())), 10)
    assert again.log.log_end_offset == 0  # the failed attempt released the directory lock
    await logs.stop()
    late = logs.open_later(OpenRequest("t", topic_id, 1, LogConfig()))
    with pytest.raises(LogStorageError):
        await late
    await logs.close_logs([], [again.log])
    assert again.log.closed
