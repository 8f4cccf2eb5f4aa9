"""A fault run's txn workload aborts a transaction whose polls span a rebalance (both client adapters).

A consumer resumes a partition it gets back from the group's committed offset. A transaction that goes
on polling across such a rebalance can read a record twice: the fault run of 2026-11-27 (seed 43, pause
nemesis) reported an int-nonmonotonic-poll that way, a committed transaction that polled offsets 5 and 6
of a key, then 5 and 6 again. A consume-transform-produce application aborts when its partitions move;
the workload's runner now does too. Here a second member joins the group while the first one's
transaction polls: the transaction must end aborted (`Failed`), never commit with repeated records.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kraftpy.tools.faults.history import HistoryWriter
from kraftpy.tools.faults.workloads.clients import CLIENTS, ClientSpec
from kraftpy.tools.faults.workloads.runner import Failed, Workers
from tests.integration.test_cluster_support import LocalCluster, wait_for

PARTITIONS = 2
RECORDS_PER_PARTITION = 3
POLLS = 60  # 0.3 s each at most: the rebalance (a heartbeat, a rejoin) comes well within them


def produce_records(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(PARTITIONS):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


async def txn_across_a_join(bootstrap: str, topic: str, client: str, history: Path) -> tuple[BaseException, int]:
    spec = ClientSpec(bootstrap, topic, PARTITIONS, "subscribe", transactional=True, group_id=f"rb-{uuid.uuid4()}")
    first = CLIENTS[client](spec, 0, 0)
    second = CLIENTS[client](spec, 1, 1)
    stop = asyncio.Event()

    async def keep_polling() -> None:  # the second member completes its join only while it polls
        while not stop.is_set():
            await second.poll()

    try:
        await first.open()
        async with asyncio.timeout(60):
            while await first.assigned() != list(range(PARTITIONS)):
                await first.poll()
        await first.seek({key: 0 for key in range(PARTITIONS)})  # its transaction reads every record
        before = first.rebalances.count
        await second.open()
        joining = asyncio.create_task(keep_polling())
        workers = Workers(HistoryWriter(history), spec, client, max_ops=1, rng=random.Random(1))
        try:
            await workers._txn(first, [["poll"]] * POLLS, abort=False)
        except Failed as exc:
            return exc, first.rebalances.count - before
        finally:
            stop.set()
            await joining
        pytest.fail(f"the transaction committed across {first.rebalances.count - before} partition moves")
    finally:
        await second.close()
        await first.close()


@pytest.mark.parametrize("client", ["kraftpy", "confluent"])
def test_a_transaction_whose_polls_span_a_rebalance_is_aborted(
    kafka_cluster: LocalCluster, client: str, tmp_path: Path
) -> None:
    topic = f"txn-rebalance-{client}"
    kafka_cluster.ok("topics", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    wait_for(f"{topic} led", lambda: all(p["leader"] >= 0 for p in kafka_cluster.describe(topic)["partitions"]))
    produce_records(kafka_cluster.bootstrap_servers, topic)
    failure, moves = asyncio.run(txn_across_a_join(kafka_cluster.bootstrap_servers, topic, client, tmp_path / "h"))
    assert "a rebalance moved this consumer's partitions" in str(failure), failure
    assert moves > 0
