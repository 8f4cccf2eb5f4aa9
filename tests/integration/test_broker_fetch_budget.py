"""A consumer's Fetch reads no more than its listener's answer budget grants (broker/api/fetch.py).

Real ReplicaManagers (test_broker_fixtures.BrokerCluster); each fetch is given the
allowance a Kafka listener gives a connection, from one AnswerBudget, as if the
answers before it were still unread by their clients.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.shell.answer_budget import AnswerBudget
from tests.integration.test_broker_fixtures import BrokerCluster, part_of, wait_until
from tests.integration.test_broker_produce_consume import consumer_fetch_from_start

BATCHES = 10
VALUE = b"v" * 10_000


async def _fill(cluster: BrokerCluster, topic: str) -> int:
    """BATCHES batches of one 10 kB record each on partition 0; the size of one batch."""
    batch = build_batch([(None, VALUE)])
    for _ in range(BATCHES):
        body = {"acks": -1, "timeout_ms": 5000, "topics": [{"name": topic, "partitions": [
            {"partition": 0, "records": batch}]}]}  # fmt: skip
        assert part_of(await cluster.call(1, "/kafka/produce", body))["error_code"] == ErrorCode.NONE
    return len(batch)


async def _hoard(cluster: BrokerCluster) -> tuple[int, int]:
    """Topic "hoard" (leader broker 1) filled: the size of one batch and the leader epoch."""
    cluster.create_topic("hoard", assignments=[(1, 2, 3)])
    batch_bytes = await _fill(cluster, "hoard")
    return batch_bytes, cluster.partition("hoard").leader_epoch


async def test_fetches_read_what_the_budget_grants_then_one_batch_then_nothing(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        batch_bytes, epoch = await _hoard(cluster)
        fetch = cluster.rm(1).fetch_handler
        budget = AnswerBudget(int(2.5 * batch_bytes))
        first, second, third = budget.allowance(), budget.allowance(), budget.allowance()

        # The first answer gets what fits in the budget: two whole batches of ten.
        answer = part_of(await fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=300), first))
        assert len(answer["records"]) == 2 * batch_bytes
        assert first.held_bytes == 2 * batch_bytes == budget.held_bytes

        # The second is granted the half batch left: one whole batch (KIP-74), over the budget by the rest.
        answer = part_of(await fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=300), second))
        assert len(answer["records"]) == batch_bytes
        assert budget.held_bytes == 3 * batch_bytes > budget.limit_bytes

        # The third finds nothing left: after max_wait_ms, offsets and no records, and it holds nothing.
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = part_of(await fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=300), third))
        assert loop.time() - started >= 0.25
        assert answer["error_code"] == ErrorCode.NONE and answer["records"] == b""
        assert answer["high_watermark"] == BATCHES  # the client sees there is more, and asks again
        assert third.held_bytes == 0 and budget.held_bytes == 3 * batch_bytes

        # The listener wrote the first two answers: the budget is free again.
        first.hold(0)
        second.hold(0)
        answer = part_of(await fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=300), third))
        assert len(answer["records"]) == 2 * batch_bytes


async def test_a_starved_fetch_reads_as_soon_as_an_answer_is_written(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        batch_bytes, epoch = await _hoard(cluster)
        fetch = cluster.rm(1).fetch_handler
        budget = AnswerBudget(batch_bytes)
        unread, waiting = budget.allowance(), budget.allowance()
        await fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=0), unread)
        assert budget.free_bytes == 0
        starved = asyncio.create_task(fetch(consumer_fetch_from_start("hoard", epoch, max_wait_ms=60_000), waiting))
        await asyncio.sleep(0.3)
        assert not starved.done()  # waiting for room, up to its max_wait_ms
        unread.hold(0)
        answer = part_of(await asyncio.wait_for(starved, 10))
        assert len(answer["records"]) == batch_bytes
        assert waiting.held_bytes == batch_bytes


async def test_a_parked_fetch_holds_nothing_while_it_waits(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, replica_fetch_wait_max_ms=120_000) as cluster:
        cluster.create_topic("quiet", assignments=[(1, 2, 3)])
        epoch = cluster.partition("quiet").leader_epoch
        budget = AnswerBudget(1 << 20)
        allowance = budget.allowance()
        handler = cluster.rm(1).fetch_handler
        await wait_until(lambda: handler.waiting == 2, what="the followers' fetches to park")
        parked = asyncio.create_task(handler(consumer_fetch_from_start("quiet", epoch, max_wait_ms=60_000), allowance))
        await wait_until(lambda: handler.waiting == 3, what="the consumer's fetch to park")
        assert budget.held_bytes == 0  # a long poll of an idle partition holds no memory for its answer
        batch_bytes = await _fill(cluster, "quiet")
        answer = part_of(await asyncio.wait_for(parked, 10))
        assert answer["records"], answer
        assert allowance.held_bytes == len(answer["records"]) >= batch_bytes
