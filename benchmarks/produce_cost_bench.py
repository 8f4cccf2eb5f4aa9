"""The cluster's CPU per acks=all Produce request: the cost that sets issue 15's latency.

At every paced rate the brokers' CPU follows the number of Produce requests,
not of records (docs/perf-kafka-clients.md, results F). This measures that
cost alone: librdkafka (confluent-kafka) sends one record per request, one
request at a time (`linger.ms` 0, one in flight), acks=all, to a 3-node
`kraftpy cluster start` cluster (one partition, RF 3, min.insync.replicas=2),
and the three node processes' CPU time (`/proc/<pid>/stat`) is read around
each round. Every request then costs the same messages: the Produce and its
answer, each follower's fetch that brings the record and the next one that
reports it. Prints, per round, the CPU per request (user and system) and the
latency, then the median of the rounds.

    python benchmarks/produce_cost_bench.py [--requests 3000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_clients_bench import Cluster, cli, load1, log  # it also puts the repository on sys.path

from tests.kafka_clients.raw import wait_until_every_broker_leads

TOPIC = "produce-cost"


def one_round(producer: Producer, cluster: Cluster, requests: int) -> dict:
    latencies: list[float] = []
    failed: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            latencies.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    user0, system0 = cluster.cpu_times()
    start = time.perf_counter()
    for i in range(requests):
        producer.produce(TOPIC, b"v" * 100, key=str(i).encode(), on_delivery=delivered)
        producer.flush(30)  # one request at a time: each record is its own Produce
    elapsed = time.perf_counter() - start
    user1, system1 = cluster.cpu_times()
    if failed:
        raise RuntimeError(f"{len(failed)} records failed, first: {failed[0]}")
    latencies.sort()
    return {
        "requests": requests,
        "seconds": elapsed,
        "cpu_us_per_request": (user1 - user0 + system1 - system0) / requests * 1e6,
        "user_us_per_request": (user1 - user0) / requests * 1e6,
        "system_us_per_request": (system1 - system0) / requests * 1e6,
        "cores": (user1 - user0 + system1 - system0) / elapsed,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "load1": load1(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="Produce requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the rounds as JSON at the end")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="produce-cost-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        log(f"starting a 3-node cluster (load1 {load1():.2f})")
        cluster.start()
        try:
            cli("topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "3",
                "--config", "min.insync.replicas=2", "--dir", str(cluster.dir))  # fmt: skip
            wait_until_every_broker_leads(cluster.bootstrap, TOPIC, 1, isr_size=3, timeout_s=20)
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                                 "max.in.flight.requests.per.connection": 1, "enable.idempotence": False,
                                 "log_level": 2})  # fmt: skip
            one_round(producer, cluster, 100)  # connections, metadata and the first fetches settle first
            rounds = []
            for n in range(args.rounds):
                row = one_round(producer, cluster, args.requests)
                rounds.append(row)
                log(
                    f"round {n + 1}/{args.rounds}: {row['cpu_us_per_request']:,.0f} µs CPU per request "
                    f"(user {row['user_us_per_request']:,.0f}, system {row['system_us_per_request']:,.0f}), "
                    f"{row['cores']:.2f} cores, p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms "
                    f"(load1 {row['load1']:.2f})"
                )
            del producer  # librdkafka's threads go before the cluster does
        finally:
            cluster.stop()
    print("| measure | median of the rounds | min | max |")
    print("|---|---|---|---|")
    for key, label in [
        ("cpu_us_per_request", "cluster CPU per acks=all Produce, µs"),
        ("user_us_per_request", "of which user, µs"),
        ("system_us_per_request", "of which system, µs"),
        ("p50_ms", "latency p50, ms"),
        ("p99_ms", "latency p99, ms"),
    ]:
        values = [r[key] for r in rounds]
        print(f"| {label} | {statistics.median(values):,.2f} | {min(values):,.2f} | {max(values):,.2f} |")
    if args.json:
        print(json.dumps(rounds))


if __name__ == "__main__":
    main()
