"""The fault run's read back, and which client errors a fault explains.

After the heal, one consumer assigns every partition and reads from the beginning to the end offsets
(read_committed for a transactional workload), recording its polls; the run's own judge compares it with
every acknowledged send. The workloads themselves are in tools/faults/workloads/ (docs/jepsen.md).
"""

from __future__ import annotations

import time

from kraftpy.client import Consumer, TopicPartition
from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.faults.history import HistoryWriter

READ_TIMEOUT_S = 60.0
CONSUMER_PROCESS = 1_000_000  # process number of the final reader, apart from the workers'


def indeterminate(exc: BaseException) -> bool:
    """A failure a fault explains: a timeout, or an error Kafka's client would retry."""
    if isinstance(exc, TimeoutError):  # KafkaTimeoutError, and our own bound on the wait
        return True
    return isinstance(exc, KafkaError) and exc.code.retriable


async def read_all(
    history: HistoryWriter, bootstrap: str, topic: str, partitions: int, *, read_committed: bool = False
) -> dict[int, dict[int, str]]:
    """Read every partition from the beginning to its end offset; record the polls; partition -> offset -> message.

    The end is the position, not the last record's offset + 1: read_committed skips aborted records and
    transaction markers."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    seen: dict[int, dict[int, str]] = {p: {} for p in range(partitions)}
    process = CONSUMER_PROCESS
    isolation = "read_committed" if read_committed else "read_uncommitted"
    async with Consumer(
        bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100, isolation_level=isolation
    ) as consumer:
        ends = await consumer.end_offsets(tps)
        history.event(process, "invoke", "assign", value=list(range(partitions)))
        consumer.assign(tps)
        history.event(process, "ok", "assign", value=list(range(partitions)))
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            positions = {tp.partition: await consumer.position(tp) for tp in tps}
            if all(positions[tp.partition] >= ends[tp] for tp in tps):
                break
            assert time.monotonic() < deadline, f"read back stalled at {positions}, ends {ends}"
            history.event(process, "invoke", "poll")
            records = await consumer.poll(timeout_ms=200)
            value = [[r.partition, r.offset, r.value.decode()] for r in records]
            history.event(process, "ok", "poll", value=value)
            for r in records:
                seen[r.partition][r.offset] = r.value.decode()
    return seen
