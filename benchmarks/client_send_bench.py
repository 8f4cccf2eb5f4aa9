"""CPU per Producer.send() of kraftpy's client, with nothing sent: the client's per-record cost alone.

    kraftpy cluster start --nodes 1 --dir D && kraftpy topics create t1 --partitions 6 --replication-factor 1 --dir D
    python benchmarks/client_send_bench.py --bootstrap-server 127.0.0.1:9092 --topic t1

The producer lingers 60 s with room for every record, so each round's send() calls only buffer
(serialize, partition, append to a batch, one future each); the round is then flushed. CPU time
(time.process_time), not wall time: on a shared machine the minimum of the rounds is the figure to
compare. Results in docs/perf-kafka-clients.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from kraftpy.client import Producer


def _ignore(_metadata: object, _error: BaseException | None) -> None:
    pass


async def measure(bootstrap: str, topic: str, records: int, rounds: int, record_size: int) -> list[float]:
    payload = os.urandom(record_size)
    per_record_us = []
    async with Producer(bootstrap, linger_ms=60_000, buffer_memory=256 << 20) as producer:
        await producer.partitions_for(topic)
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(records):
                await producer.send(topic, payload, callback=_ignore)
            per_record_us.append((time.process_time() - start) / records * 1e6)
            await producer.flush()
    return per_record_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap-server", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--record-size", type=int, default=100)
    args = ap.parse_args()
    rounds = asyncio.run(measure(args.bootstrap_server, args.topic, args.records, args.rounds, args.record_size))
    print(f"send() CPU us/record: min {min(rounds):.2f}, rounds {', '.join(f'{r:.2f}' for r in rounds)}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
