"""The workload: producer processes that record every send, and a consumer that reads everything back.

One unique message per send (`p<process>-<n>`) to a random partition through one idempotent acks=all
producer; the history gets `ok` with the offset, or `info` when the outcome is unknown (a timeout or a
retriable error). Any other error is written as `info` and then fails the run: a client bug that shows
only under faults must not pass as a fault. After `info` a fresh process number continues (Jepsen).
The final read assigns every partition and reads to the end offsets. docs/jepsen.md has the details.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.faults.history import HistoryWriter, RunEnd

SEND_TIMEOUT_S = 10.0  # bound on one send's wait; the producer's delivery timeout is below it
READ_TIMEOUT_S = 60.0
CONSUMER_PROCESS = 1_000_000  # process number of the final reader, apart from the producers'


def indeterminate(exc: BaseException) -> bool:
    """A failure a fault explains: a timeout, or an error Kafka's client would retry."""
    if isinstance(exc, TimeoutError):  # KafkaTimeoutError, and our own bound on the wait
        return True
    return isinstance(exc, KafkaError) and exc.code.retriable


@dataclass
class WorkloadStats:
    invoked: int = 0
    ok: int = 0
    info: int = 0
    acked: dict[int, dict[str, int]] = field(default_factory=dict)  # partition -> message -> offset


async def produce(
    history: HistoryWriter,
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    processes: int,
    end: RunEnd,
    max_sends: int,
    rng: random.Random,
    rate_per_s: float | None = None,
) -> WorkloadStats:
    """`rate_per_s` bounds the sends of all processes together (None: as fast as the cluster answers)."""
    pause_s = processes / rate_per_s if rate_per_s else 0.0
    stats = WorkloadStats(acked={p: {} for p in range(partitions)})
    next_process = processes

    async with Producer(
        bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=1,
        request_timeout_ms=2_000,
        delivery_timeout_ms=8_000,
        max_block_ms=3_000,
        metadata_max_age_ms=2_000,
    ) as producer:

        async def one_process(process: int) -> None:
            nonlocal next_process
            n = 0
            while not end.passed() and stats.invoked < max_sends:
                partition = rng.randrange(partitions)
                message = f"p{process}-{n}"
                n += 1
                stats.invoked += 1
                history.event(process, "invoke", "send", key=partition, value=message)
                try:
                    future = await producer.send(topic, message.encode(), partition=partition)
                    metadata = await asyncio.wait_for(future, SEND_TIMEOUT_S)
                except Exception as exc:  # the outcome is unknown (see the module docstring)
                    stats.info += 1
                    history.event(process, "info", "send", key=partition, value=message, error=repr(exc)[:200])
                    if not indeterminate(exc):
                        raise
                    process, next_process, n = next_process, next_process + 1, 0
                    await asyncio.sleep(0.05)
                    continue
                stats.ok += 1
                if pause_s:
                    await asyncio.sleep(pause_s)
                if metadata.offset >= 0:
                    stats.acked[partition][message] = metadata.offset
                    history.event(process, "ok", "send", key=partition, value=message, offset=metadata.offset)
                else:  # acknowledged as a duplicate whose offset the broker could not tell
                    history.event(process, "ok", "send", key=partition, value=message)

        await asyncio.gather(*(one_process(p) for p in range(processes)))
    return stats


async def read_all(history: HistoryWriter, bootstrap: str, topic: str, partitions: int) -> dict[int, list[str]]:
    """Read every partition from the beginning to its end offset; record the polls; return the messages."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    seen: dict[int, list[str]] = {p: [] for p in range(partitions)}
    process = CONSUMER_PROCESS
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        ends = await consumer.end_offsets(tps)
        history.event(process, "invoke", "assign", value=list(range(partitions)))
        consumer.assign(tps)
        history.event(process, "ok", "assign", value=list(range(partitions)))
        next_offset = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(next_offset[p] < ends[tps[p]] for p in range(partitions)):
            assert time.monotonic() < deadline, f"read back stalled at {next_offset}, ends {ends}"
            history.event(process, "invoke", "poll")
            records = await consumer.poll(timeout_ms=200)
            value = [[r.partition, r.offset, r.value.decode()] for r in records]
            history.event(process, "ok", "poll", value=value)
            for r in records:
                seen[r.partition].append(r.value.decode())
                next_offset[r.partition] = r.offset + 1
    return seen
