"""Transactional throughput through librdkafka (confluent-kafka): transactions/s, records/s, commit latency.

The issue-17 figures (docs/perf-transactions.md): a 3-node `kraftpy cluster start` cluster, one topic
of 6 partitions, RF 3, min.insync.replicas=2. For 1, 10 and 100 records per transaction, one
transactional producer runs begin_transaction / produce x N / commit_transaction in a loop, for a
bounded number of transactions and seconds; beside it the idempotent producer at the same settings,
N records then flush() (what a transaction's commit waits for, without the coordinator). Prints a
progress line per step on stderr and a table on stdout; `--out` writes the runs as JSON.

    python benchmarks/txn_bench.py --transactions 300 --max-seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka_clients_bench import Cluster, log  # benchmarks/ is on sys.path when this file runs as a script

TOPIC = "txn-bench"
TIMEOUT_S = 60


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run(bootstrap: str, per_txn: int, transactions: int, max_s: float, size: int, transactional: bool) -> dict:
    """`transactions` loops of N records (or until max_s): committed, or flushed by an idempotent producer."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True}
    if transactional:
        conf["transactional.id"] = f"txn-bench-{per_txn}-{os.getpid()}-{time.monotonic_ns()}"
    producer = Producer(conf)
    value = os.urandom(size)
    latencies_ms: list[float] = []
    done = records = 0
    try:
        if transactional:
            producer.init_transactions(TIMEOUT_S)
        start = time.perf_counter()
        deadline = start + max_s
        while done < transactions and time.perf_counter() < deadline:
            if transactional:
                producer.begin_transaction()
            for i in range(per_txn):
                producer.produce(TOPIC, value, key=str(records + i).encode())
            ended = time.perf_counter()
            if transactional:
                producer.commit_transaction(TIMEOUT_S)  # flushes the records, then EndTxn
            else:
                left = producer.flush(TIMEOUT_S)
                if left:
                    raise RuntimeError(f"{left} records not delivered in {TIMEOUT_S} s")
            latencies_ms.append((time.perf_counter() - ended) * 1000)
            done += 1
            records += per_txn
        elapsed = time.perf_counter() - start
    finally:
        producer.flush(5)
    return {
        "mode": "transactional" if transactional else "idempotent",
        "records_per_txn": per_txn,
        "transactions": done,
        "records": records,
        "seconds": elapsed,
        "txn_per_s": done / elapsed,
        "records_per_s": records / elapsed,
        "commit_p50_ms": statistics.median(latencies_ms),
        "commit_p99_ms": percentile(latencies_ms, 99),
    }


def table(results: list[dict]) -> str:
    head = "| mode | records/txn | transactions | txn/s | records/s | commit p50 ms | commit p99 ms |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['records_per_txn']} | {r['transactions']} | {r['txn_per_s']:.1f} | "
            f"{r['records_per_s']:.0f} | {r['commit_p50_ms']:.1f} | {r['commit_p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,10,100", help="records per transaction, comma separated")
    parser.add_argument("--transactions", type=int, default=300, help="transactions per run (at most)")
    parser.add_argument("--max-seconds", type=float, default=60, help="seconds per run (at most)")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--no-idempotent", action="store_true", help="skip the idempotent producer runs")
    parser.add_argument("--out", type=Path, default=None, help="write the runs as JSON here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        log(f"cluster start in {cluster.dir} (load {os.getloadavg()[0]:.2f})")
        cluster.start()
        results: list[dict] = []
        try:
            cluster.create_topic(TOPIC)
            # The first transactional producer creates __transaction_state: not timed.
            run(cluster.bootstrap, 1, 3, TIMEOUT_S, args.record_bytes, transactional=True)
            for per_txn in sizes:
                for transactional in (True, False) if not args.no_idempotent else (True,):
                    r = run(cluster.bootstrap, per_txn, args.transactions, args.max_seconds, args.record_bytes,
                            transactional)  # fmt: skip
                    r["load1"] = os.getloadavg()[0]
                    results.append(r)
                    log(
                        f"{r['mode']} x{per_txn}: {r['transactions']} in {r['seconds']:.1f} s, "
                        f"{r['txn_per_s']:.1f} txn/s, {r['records_per_s']:.0f} records/s, load {r['load1']:.2f}"
                    )
        finally:
            cluster.stop()
    print(table(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"uptime": os.getloadavg(), "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
