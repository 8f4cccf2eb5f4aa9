"""Consumer-group figures over a real 3-node `kraftpy cluster start` cluster on 127.0.0.1.

* **rebalance**: a group of three consumers shares a topic of 12 partitions
  while a producer writes at a steady rate; a fourth consumer joins. Measured,
  per assignor: the time from the fourth consumer's subscribe until the 12
  partitions are again split 3/3/3/3 with no partition owned twice (the
  rebalance time), and how many records per second the three original
  consumers kept consuming meanwhile, in total and from the partitions that
  kept their owner ("untouched"), beside their rate before the join. Eager
  assignors (range, sticky) revoke everything first, so nobody consumes
  during the rebalance; cooperative-sticky revokes only what moves.
* **latency**: end-to-end latency from `send()` to the record coming out of a
  group consumer's `poll()`, p50/p99, at a moderate rate (acks=all, three
  consumers over 12 partitions). Producer and consumers run in this process,
  so both ends read the same clock.

    python benchmarks/groups_bench.py                       # everything, summary table
    python benchmarks/groups_bench.py --only rebalance --trials 5
    python benchmarks/groups_bench.py --json                # the figures as one JSON object
    python benchmarks/groups_bench.py --html groups.html    # plus a page: who consumed which partition when

The three original consumers and the producer share this process (one event
loop); the fourth consumer runs in a process of its own, so its start-up does
not stall the others. Consumers use Kafka's defaults (session 45 s, heartbeat
3 s): a member learns of a rebalance at its next heartbeat, which bounds how
long an eager rebalance stops the group. Everything shares the machine with
the three nodes, so the figures are for the whole path on one small machine.
docs/perf-groups.md has results.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import queue
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from groups_report import report_html  # benchmarks/ is on sys.path when this file runs as a script
from metadata_bench import BenchCluster
from rich.console import Console
from rich.table import Table

from kraftpy.client import AdminClient, Consumer, Producer, TopicPartition
from kraftpy.client.admin.types import NewTopic
from kraftpy.client.rebalance_listener import ConsumerRebalanceListener
from kraftpy.tools.commands.perf import Throttler, percentile

err = Console(stderr=True)
PARTITIONS = 12
STAMP = struct.Struct(">d")
EAGER_AND_COOPERATIVE = ("range", "sticky", "cooperative-sticky")
# Kafka's defaults (session 45 s, heartbeat 3 s): members learn of a rebalance at their next heartbeat.
GROUP_SETTINGS: dict[str, Any] = {}
SETTLE_TIMEOUT_S = 60.0


@dataclass
class Member:
    """One group consumer polling in a task; what it consumed, per partition, with the time."""

    name: str
    consumer: Consumer
    consumed: list[tuple[float, TopicPartition, int]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                records = await self.consumer.poll(timeout_ms=50)
                now = time.perf_counter()
                per_partition: dict[TopicPartition, int] = {}
                for record in records:
                    per_partition[record.topic_partition] = per_partition.get(record.topic_partition, 0) + 1
                    if record.value is not None and len(record.value) >= STAMP.size:
                        self.latencies_ms.append((now - STAMP.unpack_from(record.value)[0]) * 1000)
                for tp, count in per_partition.items():
                    self.consumed.append((now, tp, count))
        except BaseException as exc:  # reported by the scenario, which then stops
            self.error = exc
            raise

    def assignment(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    def times(self, start: float, end: float, only: set[TopicPartition] | None = None) -> list[float]:
        return [t for t, tp, _ in self.consumed if start <= t < end and (only is None or tp in only)]

    def rate(self, start: float, end: float, only: set[TopicPartition] | None = None) -> float:
        n = sum(c for t, tp, c in self.consumed if start <= t < end and (only is None or tp in only))
        return n / (end - start) if end > start else float("nan")


class Noop(ConsumerRebalanceListener):
    pass


async def produce_steadily(servers: str, topic: str, per_second: float, stop: asyncio.Event) -> int:
    """Send a timestamped record to each partition in turn at `per_second`, until `stop`; returns the count."""
    sent = 0
    async with Producer(servers, linger_ms=1) as producer:
        await producer.partitions_for(topic)
        throttler = Throttler(per_second, time.perf_counter())
        while not stop.is_set():
            await producer.send(topic, STAMP.pack(time.perf_counter()), partition=sent % PARTITIONS)
            sent += 1
            await throttler.maybe_wait(sent)
        await producer.flush()
    return sent


async def start_member(
    servers: str, name: str, group: str, topic: str, strategy: str, stop: asyncio.Event, offset_reset: str = "latest"
) -> Member:
    """A consumer in `group` polling in a task. "latest" skips what was produced before it joined (the
    rebalance runs measure steady consumption, not a backlog); "earliest" loses nothing."""
    consumer = Consumer(
        servers,
        group_id=group,
        client_id=name,
        partition_assignment_strategy=(strategy,),
        auto_offset_reset=offset_reset,
        **GROUP_SETTINGS,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=Noop())
    member = Member(name, consumer)
    member.task = asyncio.create_task(member.run(stop))
    return member


async def join_and_poll(servers: str, group: str, topic: str, strategy: str, updates: Any, go: Any, stop: Any) -> None:
    consumer = Consumer(
        servers, group_id=group, client_id="c3", partition_assignment_strategy=(strategy,), **GROUP_SETTINGS
    )
    async with consumer:
        await consumer.partitions_for(topic)  # connected, with metadata: ready to join at once
        updates.put("ready")
        while not go.is_set():
            await asyncio.sleep(0.001)
        consumer.subscribe([topic])
        last: list[tuple[str, int]] | None = None
        while not stop.is_set():
            records = await consumer.poll(timeout_ms=50)
            if records:  # perf_counter is CLOCK_MONOTONIC on Linux: the parent's clock too
                per_partition: dict[int, int] = {}
                for record in records:
                    per_partition[record.partition] = per_partition.get(record.partition, 0) + 1
                updates.put(("delivered", time.perf_counter(), sorted(per_partition.items())))
            now = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
            if now != last:
                updates.put(now)
                last = now


def joiner_process(servers: str, group: str, topic: str, strategy: str, updates: Any, go: Any, stop: Any) -> None:
    """The fourth consumer, in its own process (its start-up must not stall the others' event loop)."""
    try:
        asyncio.run(join_and_poll(servers, group, topic, strategy, updates, go, stop))
    except BaseException as exc:
        updates.put(repr(exc))
        raise


class RemoteMember:
    """The fourth consumer as the others see it: its assignment, as its process reports it."""

    name = "c3"

    def __init__(self, servers: str, group: str, topic: str, strategy: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.updates = ctx.Queue()
        self.go = ctx.Event()
        self.stop = ctx.Event()
        self.process = ctx.Process(
            target=joiner_process,
            args=(servers, group, topic, strategy, self.updates, self.go, self.stop),
            daemon=True,
        )
        self.process.start()
        self._assignment: set[TopicPartition] = set()
        self.consumed: list[tuple[float, TopicPartition, int]] = []
        self.topic = topic
        self.ready = False
        self.error: str | None = None

    def join(self) -> None:
        """Subscribe now (the process is started and connected)."""
        self.go.set()

    def assignment(self) -> set[TopicPartition]:
        while True:
            try:
                update = self.updates.get_nowait()
            except queue.Empty:
                break
            if update == "ready":
                self.ready = True
            elif isinstance(update, tuple):
                _, at, counts = update
                self.consumed.extend((at, TopicPartition(self.topic, p), n) for p, n in counts)
            elif isinstance(update, str):
                self.error = update
            else:
                self._assignment = {TopicPartition(t, p) for t, p in update}
        if self.error is None and not self.process.is_alive():
            self.error = f"exited with {self.process.exitcode}"
        return self._assignment

    def close(self) -> None:
        self.stop.set()
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def longest_gap_s(times: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end) with no delivery: the stall a consumer's application sees."""
    edges = [start, *sorted(t for t in times if start <= t < end), end]
    return max(b - a for a, b in itertools.pairwise(edges))


def owners(members: list[Any]) -> dict[TopicPartition, list[str]]:
    found: dict[TopicPartition, list[str]] = {}
    for m in members:
        for tp in m.assignment():
            found.setdefault(tp, []).append(m.name)
    return found


def balanced(members: list[Any]) -> bool:
    """Every partition owned exactly once and each member holding its share."""
    who = owners(members)
    if len(who) != PARTITIONS or any(len(names) != 1 for names in who.values()):
        return False
    shares = sorted(len(m.assignment()) for m in members)
    return shares[-1] - shares[0] <= 1


async def wait_until(what: str, probe: Any, members: list[Any], timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        for m in members:
            if m.error is not None:
                raise RuntimeError(f"{m.name} failed: {m.error!r}")
        if probe():
            return time.perf_counter()
        await asyncio.sleep(0.005)
    raise TimeoutError(f"{what}: not reached within {timeout_s} s; owners {owners(members)}")


async def create_topic(servers: str, topic: str) -> None:
    async with AdminClient(servers) as admin:
        results = await admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
        for name, result in results.items():
            if result.error is not None:
                raise RuntimeError(f"create {name}: {result.error}")


async def rebalance_trial(servers: str, strategy: str, trial: int, per_second: float, warmup_s: float) -> dict:
    topic, group = f"rb-{strategy}-{trial}", f"g-{strategy}-{trial}"
    await create_topic(servers, topic)
    stop = asyncio.Event()
    producer = asyncio.create_task(produce_steadily(servers, topic, per_second, stop))
    members: list[Member] = []
    joiner: RemoteMember | None = None
    try:
        for i in range(3):
            members.append(await start_member(servers, f"c{i}", group, topic, strategy, stop))
        await wait_until("three members balanced", lambda: balanced(members), members)
        before = {tp: names[0] for tp, names in owners(members).items()}
        joiner = RemoteMember(servers, group, topic, strategy)
        await asyncio.sleep(warmup_s)  # steady consumption before the join (and the joiner's start-up)
        await wait_until(
            "the fourth consumer ready", lambda: joiner.assignment() is not None and joiner.ready, [joiner]
        )
        joined = time.perf_counter()
        joiner.join()
        everyone = [*members, joiner]
        doubly_owned: set[TopicPartition] = set()

        def check_then_balanced() -> bool:
            # Each member's view follows the protocol's order (revoke before anyone else is given it),
            # so a partition in two views at once means two owners.
            doubly_owned.update(tp for tp, names in owners(everyone).items() if len(names) > 1)
            return balanced(everyone)

        done = await wait_until("four members balanced", check_then_balanced, everyone)
        await asyncio.sleep(warmup_s / 2)  # so the window's last poll results are in
        after = {tp: names[0] for tp, names in owners(everyone).items()}
        untouched = {tp for tp, name in before.items() if after.get(tp) == name}
        originals = members
        base_start = joined - warmup_s
        window_end = done + 0.5
        untouched_gaps = [
            longest_gap_s([t for m in originals for t in m.times(joined, window_end, {tp})], joined, window_end)
            for tp in untouched
        ]
        joiner.assignment()  # drain its last reports
        timeline = {
            "joined": 0.0,
            "balanced": done - joined,
            "deliveries": [
                (t - joined, tp.partition, m.name)
                for m in everyone
                for t, tp, _ in m.consumed
                if joined - warmup_s / 2 <= t < window_end
            ],
        }
        return {
            "strategy": strategy,
            "timeline": timeline,
            "rebalance_s": done - joined,
            "moved_partitions": PARTITIONS - len(untouched),
            "doubly_owned_partitions": len(doubly_owned),
            "rate_before": sum(m.rate(base_start, joined) for m in originals),
            "rate_during": sum(m.rate(joined, done) for m in originals),
            "untouched_rate_before": sum(m.rate(base_start, joined, untouched) for m in originals),
            "untouched_rate_during": sum(m.rate(joined, done, untouched) for m in originals),
            # The longest time nothing at all reached the three original consumers, and the longest any
            # untouched partition went without a delivery (eager: the whole join + sync; cooperative: ~0).
            "group_stall_s": longest_gap_s(
                [t for m in originals for t in m.times(joined, window_end)], joined, window_end
            ),
            "untouched_stall_s": max(untouched_gaps, default=float("nan")),
        }
    finally:
        stop.set()
        if joiner is not None:
            await asyncio.to_thread(joiner.close)
        await asyncio.gather(*(m.task for m in members if m.task), return_exceptions=True)
        await asyncio.gather(*(m.consumer.close() for m in members), return_exceptions=True)
        await asyncio.gather(producer, return_exceptions=True)


async def latency_run(servers: str, per_second: float, duration_s: float) -> dict[str, Any]:
    topic, group = "latency", "g-latency"
    await create_topic(servers, topic)
    stop = asyncio.Event()
    # "earliest": the topic is new, and every record sent must come out (a "latest" reset racing the
    # producer's first sends would skip them).
    members = [await start_member(servers, f"c{i}", group, topic, "range", stop, "earliest") for i in range(3)]
    producer_stop = asyncio.Event()
    producer: asyncio.Task[int] | None = None
    try:
        await wait_until("three members balanced", lambda: balanced(members), members)
        producer = asyncio.create_task(produce_steadily(servers, topic, per_second, producer_stop))
        await asyncio.sleep(duration_s)
        producer_stop.set()
        sent = await producer
        await wait_until("every record consumed", lambda: sum(len(m.latencies_ms) for m in members) >= sent, members)
        latencies = [x for m in members for x in m.latencies_ms]
        return {
            "records": len(latencies),
            "rate": per_second,
            "p50_ms": percentile(sorted(latencies), 0.50),
            "p99_ms": percentile(sorted(latencies), 0.99),
            "max_ms": max(latencies),
        }
    finally:
        producer_stop.set()
        stop.set()
        await asyncio.gather(*(m.task for m in members if m.task), return_exceptions=True)
        await asyncio.gather(*(m.consumer.close() for m in members), return_exceptions=True)
        if producer is not None:
            await asyncio.gather(producer, return_exceptions=True)


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


async def run(only: set[str], trials: int, rate: float, latency_rate: float, duration_s: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kraftpy-groups-bench-") as tmp:
        cluster = BenchCluster(Path(tmp) / "cluster")
        err.print(f"[dim]starting a 3-node cluster in {cluster.dir} ...[/]")
        cluster.start()
        servers = cluster.layout.kafka_bootstrap_servers  # the brokers' Kafka listeners
        try:
            if "rebalance" in only:
                rows: dict[str, list[dict[str, Any]]] = {}
                for strategy in EAGER_AND_COOPERATIVE:
                    for trial in range(trials):
                        err.print(f"[dim]rebalance {strategy} trial {trial + 1}/{trials} ...[/]")
                        rows.setdefault(strategy, []).append(
                            await rebalance_trial(servers, strategy, trial, rate, warmup_s=3.0)
                        )
                # The last trial's deliveries per assignor, for --html; the rest are figures.
                timelines = {s: r[-1]["timeline"] for s, r in rows.items()}
                for r in rows.values():
                    for trial_row in r:
                        del trial_row["timeline"]
                results["rebalance"] = {
                    s: {k: median_of(r, k) for k in r[0] if k != "strategy"} | {"trials": r} for s, r in rows.items()
                }
                results["timelines"] = timelines
            if "latency" in only:
                err.print(f"[dim]end-to-end latency at {latency_rate:.0f} records/s for {duration_s:.0f} s ...[/]")
                results["latency"] = await latency_run(servers, latency_rate, duration_s)
        finally:
            cluster.stop()
    return results


def summary(results: dict[str, Any]) -> list[Table]:
    tables = []
    if "rebalance" in results:
        t = Table(title=f"A 4th consumer joins 3 over {PARTITIONS} partitions (medians)")
        columns = (
            "assignor",
            "rebalance s",
            "moved",
            "owned twice",
            "group rec/s before",
            "during",
            "untouched rec/s before",
            "during",
            "group stall s",
            "untouched stall s",
        )
        for col in columns:
            t.add_column(col, justify="right", no_wrap=col == "assignor")
        for strategy, r in results["rebalance"].items():
            t.add_row(
                strategy,
                f"{r['rebalance_s']:.2f}",
                f"{r['moved_partitions']:.0f}",
                f"{r['doubly_owned_partitions']:.0f}",
                f"{r['rate_before']:.0f}",
                f"{r['rate_during']:.0f}",
                f"{r['untouched_rate_before']:.0f}",
                f"{r['untouched_rate_during']:.0f}",
                f"{r['group_stall_s']:.2f}",
                f"{r['untouched_stall_s']:.2f}",
            )
        tables.append(t)
    if "latency" in results:
        r = results["latency"]
        t = Table(title="End-to-end latency, send() to a group consumer's poll()")
        for col in ("records", "rate rec/s", "p50 ms", "p99 ms", "max ms"):
            t.add_column(col, justify="right")
        t.add_row(
            str(r["records"]), f"{r['rate']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}", f"{r['max_ms']:.1f}"
        )
        tables.append(t)
    return tables


@click.command()
@click.option("--only", default="rebalance,latency", show_default=True, help="Comma-separated: rebalance, latency.")
@click.option("--trials", type=click.IntRange(1, 50), default=3, show_default=True, help="Rebalances per assignor.")
@click.option("--rate", type=click.FloatRange(1, 100_000), default=1200, show_default=True, help="Records/s produced.")
@click.option("--latency-rate", type=click.FloatRange(1, 100_000), default=500, show_default=True)
@click.option("--duration-s", type=click.FloatRange(1, 600), default=20, show_default=True, help="Latency run length.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), help="Also write an HTML view.")
def main(
    only: str, trials: int, rate: float, latency_rate: float, duration_s: float, as_json: bool, html_path: str | None
) -> None:
    chosen = {x.strip() for x in only.split(",") if x.strip()}
    unknown = chosen - {"rebalance", "latency"}
    if unknown or not chosen:
        raise click.BadParameter(
            f"unknown scenario(s) {sorted(unknown)}; choose rebalance, latency", param_hint="--only"
        )
    results = asyncio.run(run(chosen, trials, rate, latency_rate, duration_s))
    if html_path:
        with open(html_path, "w", encoding="utf-8") as f:
            f.write(report_html(results, PARTITIONS))
        err.print(f"[dim]wrote {html_path}[/]")
    results.pop("timelines", None)  # the HTML's material, not figures
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        out = Console(width=150)  # the rebalance table has nine columns; never squeeze them into 80
        for table in summary(results):
            out.print(table)


if __name__ == "__main__":
    sys.exit(main())
