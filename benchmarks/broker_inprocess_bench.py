"""CPU per acks=all Produce of three brokers in one process: the handlers' and replication's cost, steadily.

produce_cost_bench.py measures a real 3-process cluster, and its rounds drift
10-15% with the machine. Here the test suite's BrokerCluster runs three real
ReplicaManagers in this process (their internal RPC over loopback, their logs
on disk, the controller a harness), and the `produce` handler is called
directly, one single-record batch at a time with acks=all; CPU time is
process_time over each round, so it counts the leader's handling and both
followers' replication, and nothing of another process. Also: one follower
fetch served at the log end (max_wait_ms 0), the leader's cost per fetch
answer without waiting. Prints µs per operation, best and median of rounds.
With --gap-ms the loop sleeps that long after each produce (not timed), as requests
arrive at a paced rate: what the same request costs after the process was idle.

    python benchmarks/broker_inprocess_bench.py [--requests 2000] [--rounds 5] [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftpy.protocol.records.batch import build_batch
from tests.integration.test_broker_fixtures import BrokerCluster

TOPIC = "inprocess"


async def measure(requests: int, rounds: int, idle_topics: int = 0, gap_ms: float = 0.0) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"produce_us": [], "follower_fetch_us": []}
    with tempfile.TemporaryDirectory(prefix="inprocess-bench-") as tmp:
        async with BrokerCluster(Path(tmp)) as cluster:
            cluster.create_topic(TOPIC, partitions=1, configs={"min_insync_replicas": 2})
            ids = sorted(cluster.brokers)
            # Leaders spread evenly (each broker leads two of each idle topic's six), so that every
            # invocation has the same number of partitions in each follower's fetch.
            spread = [tuple(ids[(p + r) % len(ids)] for r in range(3)) for p in range(6)]
            for i in range(idle_topics):
                cluster.create_topic(f"idle-{i}", assignments=spread, configs={"min_insync_replicas": 2})
            await cluster.settled()
            leader = cluster.leader(TOPIC)
            rm = cluster.brokers[leader].rm
            follower = next(b for b in cluster.brokers if b != leader)
            produce = rm.handlers()["produce"]
            batch = build_batch([(None, b"v" * 100)])
            body = {"acks": -1, "timeout_ms": 5000, "topics": [{"name": TOPIC, "partitions": [
                {"partition": 0, "records": batch}]}]}  # fmt: skip

            async def produce_round(n: int) -> float:
                start = time.process_time()
                for _ in range(n):
                    answer = await produce(body)
                    code = answer["topics"][0]["partitions"][0]["error_code"]
                    if code != 0:
                        raise RuntimeError(f"produce failed: {answer}")
                    if gap_ms:
                        await asyncio.sleep(gap_ms / 1000)  # idle between requests, as at a paced rate
                return (time.process_time() - start) / n * 1e6

            await produce_round(200)  # connections and fetch sessions settle first
            epoch = cluster.partition(TOPIC).leader_epoch
            for _ in range(rounds):
                out["produce_us"].append(await produce_round(requests))
                # A follower's fetch at the log end, answered at once: the leader's per-fetch cost alone.
                await cluster.wait_for_replicas_caught_up(TOPIC, 0)
                end = rm.partitions[(TOPIC, 0)].log.log_end_offset
                fetch = {"replica_id": follower, "replica_epoch": -1, "max_wait_ms": 0, "min_bytes": 1,
                         "max_bytes": 1 << 20, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
                             {"partition": 0, "fetch_offset": end, "current_leader_epoch": epoch,
                              "last_fetched_epoch": epoch, "log_start_offset": 0,
                              "partition_max_bytes": 1 << 20}]}]}  # fmt: skip
                start = time.process_time()
                for _ in range(requests):
                    await rm.fetch_handler.follower_fetch(fetch)
                out["follower_fetch_us"].append((time.process_time() - start) / requests * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-topics", type=int, default=0, help="also this many idle 6-partition topics")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="sleep this long after each produce (not timed)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()  # as the nodes run
    except ImportError:
        pass
    results = asyncio.run(measure(args.requests, args.rounds, args.idle_topics, args.gap_ms))
    print("| operation | best µs CPU | median µs CPU | rounds |")
    print("|---|---|---|---|")
    for name, label in (("produce_us", "acks=all Produce, one record (leader and both followers)"),
                        ("follower_fetch_us", "a follower's fetch at the log end, served (leader)")):  # fmt: skip
        values = results[name]
        print(f"| {label} | {min(values):,.0f} | {statistics.median(values):,.0f} | {len(values)} |")


if __name__ == "__main__":
    main()
