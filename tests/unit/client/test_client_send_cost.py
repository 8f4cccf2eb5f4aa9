"""What a buffered record costs the producer in Python objects: send() is the client's hottest path.

Measured with tracemalloc (bytes, not time: deterministic on a loaded machine). The record's
future is also the callback its batch calls (client/shell/producer.py, _Delivery); a closure per
record beside the future made each buffered record cost nearly twice as much (docs/perf-kafka-clients.md).
"""

from __future__ import annotations

import tracemalloc

from kraftpy.client import Producer
from tests.unit.client.scripted_broker import scripted_brokers

RECORDS = 2_000
# About 400 bytes with one outcome object per record (Python 3.11), about 760 with a future and a closure.
MAX_BYTES_PER_RECORD = 550


async def test_a_buffered_record_costs_one_outcome_object_not_a_future_and_a_closure() -> None:
    async with scripted_brokers(1, topics={"t": 1}) as (broker,):
        producer = Producer(f"127.0.0.1:{broker.port}", linger_ms=60_000, acks=1, enable_idempotence=False)
        try:
            await producer.partitions_for("t")
            await producer.send("t", b"warm-up")
            futures = []
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for _ in range(RECORDS):
                    futures.append(await producer.send("t", b"v", callback=_ignore))
                per_record = (tracemalloc.get_traced_memory()[0] - before) / RECORDS
            finally:
                tracemalloc.stop()
            assert per_record <= MAX_BYTES_PER_RECORD, f"{per_record:.0f} bytes per buffered record"
            assert not any(f.done() for f in futures)  # buffered, not sent: the bytes are the buffering's
        finally:
            await producer.close(timeout_ms=0)  # the buffered records are failed, never sent


def _ignore(_metadata: object, _error: BaseException | None) -> None:
    pass
