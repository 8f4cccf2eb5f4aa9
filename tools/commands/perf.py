"""`kraftpy perf produce|consume`: throughput and latency of the real client against a cluster.

Design notes: docs/perf-produce-consume.md, section "tools/commands/perf.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.tools.options import F, client_options, servers_for

# Yield to the event loop every this many sends, so the sender task drains batches while we produce.
YIELD_EVERY = 64


# At most about this many latencies are kept for the percentiles, as kafka-producer-perf-test keeps
# 500,000: a run of a billion records would otherwise hold a float per record (tens of GB).
MAX_LATENCY_SAMPLES = 500_000
# The acknowledged records' latencies waiting to be folded into the figures; folded every YIELD_EVERY
# sends once there are this many, and at every progress line.
FOLD_AT = 65_536


class LatencyStats:
    """The latencies of acknowledged records in bounded memory (kafka-producer-perf-test's Stats).

    Count, mean and max are exact; the percentiles come from every `stride`-th record acknowledged
    (all of them up to MAX_LATENCY_SAMPLES). A record's latency is appended to `recent` (one list
    append per record, the cheapest thing its callback can do) and folded in now and then."""

    def __init__(self, expected_records: int) -> None:
        self.stride = max(1, expected_records // MAX_LATENCY_SAMPLES)
        self.recent: list[float] = []
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.sample: list[float] = []
        self.window = (0, 0.0, 0.0)  # count, total and max since the last progress line

    def fold(self) -> None:
        recent = self.recent
        if not recent:
            return
        self.recent = []
        self.sample += recent[(-self.count) % self.stride :: self.stride]
        self.count += len(recent)
        total, worst = sum(recent), max(recent)
        self.total_ms += total
        self.max_ms = max(self.max_ms, worst)
        count, window_total, window_max = self.window
        self.window = (count + len(recent), window_total + total, max(window_max, worst))

    def take_window(self) -> tuple[int, float, float]:
        """(records, mean ms, max ms) acknowledged since the last call."""
        self.fold()
        count, total, worst = self.window
        self.window = (0, 0.0, 0.0)
        return count, (total / count if count else 0.0), worst

    def __repr__(self) -> str:
        # asyncio.run formats the main task's result as it restores its SIGINT handler (Python 3.11's
        # Runner.run): a float per sampled record in the repr took 0.4 s at the end of a long run.
        return f"LatencyStats(count={self.count}, sample={len(self.sample)}, stride={self.stride})"


@dataclass
class ProduceResult:
    records: int = 0
    bytes: int = 0
    errors: int = 0
    first_error: str | None = None
    start: float = 0.0
    end: float = 0.0
    latencies: LatencyStats = field(default_factory=lambda: LatencyStats(0))


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of a sorted list, nearest rank; 0 for an empty list."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def parse_props(props: tuple[str, ...]) -> dict[str, Any]:
    """`k=v` client settings (Kafka's --producer-props); values are ints or booleans when they look like one."""
    out: dict[str, Any] = {}
    for prop in props:
        key, sep, value = prop.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{prop!r} is not KEY=VALUE", param_hint="--prop")
        key = key.strip().replace(".", "_")
        text = value.strip()
        if text.lower() in ("true", "false"):
            out[key] = text.lower() == "true"
        else:
            try:
                out[key] = int(text)
            except ValueError:
                out[key] = text
    return out


class Throttler:
    """Kafka's ThroughputThrottler: sleep whenever sends run ahead of `per_second`."""

    def __init__(self, per_second: float, start: float) -> None:
        self.per_second = per_second
        self.start = start

    async def maybe_wait(self, sent: int) -> None:
        if self.per_second <= 0:
            return
        ahead = sent / self.per_second - (time.perf_counter() - self.start)
        if ahead > 0.001:
            await asyncio.sleep(ahead)


REPORTING_INTERVAL_MS = 5_000  # kafka-producer-perf-test's and kafka-consumer-perf-test's window


@contextlib.asynccontextmanager
async def progress_lines(interval_ms: int, to_stderr: bool, line: Callable[[float], str]) -> AsyncIterator[None]:
    """Print `line(window_s)` every `interval_ms` while the body runs, stalled or not (a stall says 0/s)."""

    async def report() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            now = time.perf_counter()
            click.echo(line(now - last), err=to_stderr)
            last = now

    task = asyncio.create_task(report())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def produce_window_line(latencies: LatencyStats, record_size: int, window_s: float) -> str:
    """kafka-producer-perf-test's periodic line for the records acknowledged since the last one."""
    count, avg, worst = latencies.take_window()
    rate = count / window_s if window_s > 0 else 0.0
    return (
        f"{count} records sent, {rate:.1f} records/sec ({rate * record_size / 1e6:.2f} MB/sec), "
        f"{avg:.1f} ms avg latency, {worst:.1f} ms max latency."
    )


async def produce_records(
    servers: list[tuple[str, int]],
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    config: dict[str, Any],
    interval_ms: int = REPORTING_INTERVAL_MS,
    to_stderr: bool = False,
) -> ProduceResult:
    from kraftpy.client import Producer

    result = ProduceResult(latencies=LatencyStats(num_records))
    payload = os.urandom(record_size)
    stats = result.latencies
    perf_counter = time.perf_counter

    def on_done(sent_at: float, _metadata: Any, error: BaseException | None) -> None:  # per record: a partial
        if error is not None:
            result.errors += 1
            result.first_error = result.first_error or str(error)
            return
        stats.recent.append((perf_counter() - sent_at) * 1000)

    window_line = functools.partial(produce_window_line, stats, record_size)
    async with Producer(servers, **config) as producer, progress_lines(interval_ms, to_stderr, window_line):
        # Metadata and the producer id first, so the measurement starts with a ready producer.
        await producer.partitions_for(topic)
        result.start = perf_counter()
        throttler = Throttler(throughput, result.start)
        paced = throughput > 0
        for i in range(num_records):
            sent_at = perf_counter()
            try:
                await producer.send(topic, payload, callback=functools.partial(on_done, sent_at))
            except KafkaError as exc:
                result.errors += num_records - i
                result.first_error = result.first_error or str(exc)
                break
            if paced:
                # Every record, as Kafka's throttler: pausing only every YIELD_EVERY records would send
                # bursts of 64 that share one batch and one round trip, hiding the per-record latency.
                await throttler.maybe_wait(i + 1)
            if i % YIELD_EVERY == 0:
                if len(stats.recent) >= FOLD_AT:
                    stats.fold()
                await asyncio.sleep(0)
        await producer.flush()
        result.end = perf_counter()
    stats.fold()
    result.records = stats.count
    result.bytes = result.records * record_size
    return result


@dataclass
class ConsumeResult:
    records: int = 0
    bytes: int = 0
    start: float = 0.0
    end: float = 0.0
    error: str | None = None


async def consume_records(
    servers: list[tuple[str, int]],
    topic: str,
    num_records: int,
    timeout_ms: int,
    config: dict[str, Any],
    share: tuple[int, int] = (0, 1),
    interval_ms: int = REPORTING_INTERVAL_MS,
    to_stderr: bool = False,
) -> ConsumeResult:
    from kraftpy.client import Consumer, TopicPartition

    result = ConsumeResult()
    seen = [0, 0]  # records, bytes at the last line

    def window_line(window_s: float) -> str:
        records, size = result.records - seen[0], result.bytes - seen[1]
        seen[:] = [result.records, result.bytes]
        rate = records / window_s if window_s > 0 else 0.0
        mb_rate = size / window_s / 1e6 if window_s > 0 else 0.0
        return f"{records} records consumed, {rate:.1f} records/sec ({mb_rate:.2f} MB/sec), {result.records} in all."

    consumer_cm = Consumer(servers, auto_offset_reset="earliest", **config)
    async with consumer_cm as consumer, progress_lines(interval_ms, to_stderr, window_line):
        partitions = sorted(await consumer.partitions_for(topic))
        every = [TopicPartition(topic, p) for p in partitions]
        index, count = share
        # Each process reads its partitions (p % count == index) and a share of num_records in
        # proportion to the records they hold, so the shares add up to num_records.
        begins, ends = await consumer.beginning_offsets(every), await consumer.end_offsets(every)
        held = [ends[tp] - begins[tp] for tp in every]
        total = sum(held) or 1
        before = sum(h for tp, h in zip(every, held, strict=True) if tp.partition % count < index)
        mine_held = sum(h for tp, h in zip(every, held, strict=True) if tp.partition % count == index)
        num_records = (num_records * (before + mine_held)) // total - (num_records * before) // total
        mine = [tp for tp in every if tp.partition % count == index]
        consumer.assign(mine)
        consumer.seek_to_beginning(*mine)
        for tp in mine:
            await consumer.position(tp)
        result.start = last = time.perf_counter()
        while result.records < num_records:
            records = await consumer.poll(timeout_ms=100, max_records=10_000)
            now = time.perf_counter()
            if records:
                last = now
                result.records += len(records)
                result.bytes += sum(max(r.serialized_key_size, 0) + max(r.serialized_value_size, 0) for r in records)
            elif (now - last) * 1000 > timeout_ms:
                result.error = f"no record for {timeout_ms} ms after {result.records} of {num_records}"
                break
        result.end = time.perf_counter()
    return result


# -- processes --------------------------------------------------------------------------------------------------


def use_uvloop() -> None:
    """The nodes run on uvloop (tools/commands/server.py); so does the client here, so it adds as little as it can.

    The young-generation GC threshold goes from 700 to 50 000 allocations: every record in flight holds
    a future, a callback and its bookkeeping, and at the default threshold the collector's passes over
    them took a third of the producer's CPU (docs/perf-produce-consume.md). Applications producing at
    this rate benefit from the same setting.
    """
    gc.set_threshold(50_000, 20, 100)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # optional: asyncio's own loop works, only slower
        pass


def _run_in_process(kind: str, args: tuple[Any, ...], barrier: Any, queue: Any) -> None:
    use_uvloop()
    try:
        barrier.wait(timeout=60)
        if kind == "produce":
            queue.put(("ok", asyncio.run(produce_records(*args))))
        else:
            queue.put(("ok", asyncio.run(consume_records(*args))))
    except BaseException as exc:  # report, never hang the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def run_parallel(kind: str, argsets: list[tuple[Any, ...]]) -> list[Any]:
    """Run the workers in separate processes started at the same moment; their results in order of completion."""
    if len(argsets) == 1:
        use_uvloop()
        return [asyncio.run(produce_records(*argsets[0]) if kind == "produce" else consume_records(*argsets[0]))]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(argsets))
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_in_process, args=(kind, a, barrier, queue)) for a in argsets]
    for p in procs:
        p.start()
    results = []
    for _ in procs:
        status, value = queue.get(timeout=3600)
        if status != "ok":
            raise click.ClickException(f"a {kind} process failed: {value}")
        results.append(value)
    for p in procs:
        p.join(timeout=30)
    return results


# -- reports ----------------------------------------------------------------------------------------------------


def produce_report(results: list[ProduceResult], processes: int) -> dict[str, Any]:
    records = sum(r.records for r in results)
    total_bytes = sum(r.bytes for r in results)
    elapsed = max(r.end for r in results) - min(r.start for r in results)
    for r in results:
        r.latencies.fold()
    sample = sorted(x for r in results for x in r.latencies.sample)
    acknowledged = sum(r.latencies.count for r in results)
    errors = sum(r.errors for r in results)
    return {
        "records": records,
        "records_per_s": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_s": round(total_bytes / elapsed / 1e6, 2) if elapsed > 0 else 0.0,
        "latency_ms": {
            "p50": round(percentile(sample, 0.50), 2),
            "p95": round(percentile(sample, 0.95), 2),
            "p99": round(percentile(sample, 0.99), 2),
            "max": round(max((r.latencies.max_ms for r in results), default=0.0), 2),
        },
        "avg_latency_ms": round(sum(r.latencies.total_ms for r in results) / acknowledged, 2) if acknowledged else 0.0,
        "errors": errors,
        "first_error": next((r.first_error for r in results if r.first_error), None),
        "elapsed_s": round(elapsed, 3),
        "processes": processes,
    }


def consume_report(results: list[ConsumeResult], processes: int) -> dict[str, Any]:
    records = sum(r.records for r in results)
    total_bytes = sum(r.bytes for r in results)
    elapsed = max(r.end for r in results) - min(r.start for r in results)
    return {
        "records": records,
        "records_per_s": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_s": round(total_bytes / elapsed / 1e6, 2) if elapsed > 0 else 0.0,
        "elapsed_s": round(elapsed, 3),
        "processes": processes,
        "error": next((r.error for r in results if r.error), None),
    }


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


# -- commands ---------------------------------------------------------------------------------------------------

# The payload is built once, before anything is sent: one larger than a broker's default
# socket.request.max.bytes could never be sent, and would only take the memory.
MAX_RECORD_SIZE = KafkaListenerLimits().socket_request_max_bytes


def _finite(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a rate in records/s")
    return value


def _run_options(client: str) -> Callable[[F], F]:
    """The options every perf run takes: processes, client settings, output, progress, where the cluster is."""

    def apply(command: F) -> F:
        for option in reversed(
            (
                click.option("--processes", type=click.IntRange(min=1, max=64), default=1, show_default=True),
                click.option(
                    "--prop",
                    "props",
                    multiple=True,
                    metavar="KEY=VALUE",
                    help=f"Any other {client} setting (repeatable).",
                ),
                click.option(
                    "--json", "as_json", is_flag=True, help="Print one JSON object (progress lines go to stderr)."
                ),
                click.option(
                    "--reporting-interval-ms",
                    type=click.IntRange(min=100),
                    default=REPORTING_INTERVAL_MS,
                    show_default=True,
                    help="A progress line this often.",
                ),
                client_options,
            )
        ):  # the last applied shows first in --help
            command = option(command)
        return command

    return apply


@click.group("perf")
def perf() -> None:
    """Measure produce and consume throughput and latency (like kafka-*-perf-test)."""


@perf.command("produce")
@click.option("--topic", required=True)
@click.option("--num-records", type=click.IntRange(min=1), required=True)
@click.option(
    "--record-size",
    type=click.IntRange(min=0, max=MAX_RECORD_SIZE),
    required=True,
    help="Bytes of each record's value (at most socket.request.max.bytes, 100 MiB: no broker takes a larger request).",
)
@click.option(
    "--throughput",
    type=float,
    default=-1,
    show_default=True,
    callback=_finite,
    help="Records/s to pace at; -1 (or any negative): unthrottled.",
)
@click.option("--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=0), default=16_384, show_default=True)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@_run_options("producer")
def produce(
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    acks: str,
    batch_size: int,
    linger_ms: int,
    processes: int,
    props: tuple[str, ...],
    as_json: bool,
    reporting_interval_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Send NUM_RECORDS records of RECORD_SIZE bytes to TOPIC; print throughput and latency."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    config: dict[str, Any] = {"acks": acks, "batch_size": batch_size, "linger_ms": linger_ms, **parse_props(props)}
    rate = throughput / processes if throughput > 0 else -1
    argsets = [
        (servers, topic, n, record_size, rate, config, reporting_interval_ms, as_json)
        for n in _split(num_records, processes)
    ]
    load_before = os.getloadavg()[0]
    report = produce_report(run_parallel("produce", argsets), processes)
    report["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    if as_json:
        click.echo(json.dumps(report))
    else:
        lat = report["latency_ms"]
        click.echo(
            f"{report['records']} records sent, {report['records_per_s']:.1f} records/sec "
            f"({report['mb_per_s']:.2f} MB/sec), {report['avg_latency_ms']:.2f} ms avg latency, "
            f"{lat['max']:.2f} ms max latency, {lat['p50']:.2f} ms 50th, {lat['p95']:.2f} ms 95th, "
            f"{lat['p99']:.2f} ms 99th (load average {report['load_avg_1m'][0]:.2f} -> {report['load_avg_1m'][1]:.2f})."
        )
    if report["errors"]:
        click.echo(f"perf produce: {report['errors']} record(s) failed: {report['first_error']}", err=True)
        sys.exit(1)


@perf.command("consume")
@click.option("--topic", required=True)
@click.option("--num-records", type=click.IntRange(min=1), required=True)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=10_000, show_default=True)
@_run_options("consumer")
def consume(
    topic: str,
    num_records: int,
    timeout_ms: int,
    processes: int,
    props: tuple[str, ...],
    as_json: bool,
    reporting_interval_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Read NUM_RECORDS records of TOPIC from the beginning; print records/s and MB/s."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    config = parse_props(props)
    argsets = [
        (servers, topic, num_records, timeout_ms, config, (i, processes), reporting_interval_ms, as_json)
        for i in range(processes)
    ]
    report = consume_report(run_parallel("consume", argsets), processes)
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(
            f"{report['records']} records consumed, {report['records_per_s']:.1f} records/sec "
            f"({report['mb_per_s']:.2f} MB/sec) in {report['elapsed_s']:.2f} s."
        )
    if report["error"] or report["records"] < num_records:
        click.echo(f"perf consume: {report['error'] or 'fewer records than asked'}", err=True)
        sys.exit(1)


# -- failover ---------------------------------------------------------------------------------------------------


async def _leader_and_isr(
    rpc: Any, servers: list[tuple[str, int]], topic: str, partition: int
) -> tuple[int, list[int]]:
    """(leader id, ISR) of a partition from the first server that answers Metadata."""
    for address in servers:
        try:
            answer = await rpc.call(address, "/kafka/metadata", {"topics": [topic]}, timeout_ms=1000)
        except KafkaError:
            continue
        for t in answer.get("topics", []):
            for p in t.get("partitions", []):
                if p.get("partition") == partition:
                    return p.get("leader_id", -1), list(p.get("isr_nodes") or [])
    return -1, []


async def failover_trials(
    cluster_dir: Path, topic: str, partition: int, trials: int, config: dict[str, Any]
) -> list[float]:
    """Seconds from SIGKILL of the partition leader's node to the first acknowledged write sent after it."""
    import signal
    import subprocess

    from kraftpy.client import Producer
    from kraftpy.client.shell.kafka_transport import KafkaTransport
    from kraftpy.tools.cluster_layout import ClusterLayout, bootstrap_from, signal_node

    layout = ClusterLayout.load(cluster_dir)
    servers = bootstrap_from(cluster_dir, None)
    acks: list[tuple[float, float]] = []  # (sent, acknowledged) of every acknowledged record
    results: list[float] = []
    rpc = KafkaTransport(request_timeout_ms=2000)
    stop = asyncio.Event()
    async with Producer(servers, acks="all", linger_ms=0, request_timeout_ms=3_000, **config) as producer:
        await producer.partitions_for(topic)

        async def keep_writing() -> None:
            while not stop.is_set():
                sent = time.perf_counter()

                def done(_md: Any, error: BaseException | None, sent: float = sent) -> None:
                    if error is None:
                        acks.append((sent, time.perf_counter()))

                await producer.send(topic, b"failover-probe", partition=partition, callback=done)
                await asyncio.sleep(0.002)

        writer = asyncio.create_task(keep_writing())
        try:
            for trial in range(trials):
                leader, _ = await _leader_and_isr(rpc, servers, topic, partition)
                entry = next(n for n in layout.nodes if n.node_id == leader)
                pid = layout.read_pid(entry)
                if pid is None:
                    raise click.ClickException(f"node {leader} (leader of {topic}-{partition}) is not running")
                killed = time.perf_counter()
                signal_node(pid, signal.SIGKILL)
                deadline = killed + 60
                while not any(sent >= killed for sent, _ in acks[-200:]):
                    if time.perf_counter() > deadline:
                        raise click.ClickException(f"trial {trial}: no write acknowledged within 60 s of the kill")
                    await asyncio.sleep(0.005)
                first = min(acked for sent, acked in acks[-200:] if sent >= killed)
                results.append(first - killed)
                # Restart the node and wait until it is back in the ISR, so every trial starts healthy.
                await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "kraftpy.tools.cli", "cluster", "start", "--dir", str(cluster_dir)],
                    capture_output=True,
                    check=True,
                    timeout=120,
                )
                for _ in range(600):  # bounded: 60 s
                    _, isr = await _leader_and_isr(rpc, servers, topic, partition)
                    if leader in isr:
                        break
                    await asyncio.sleep(0.1)
        finally:
            stop.set()
            await writer
            await rpc.close()
    return results


@perf.command("failover")
@click.option("--topic", required=True)
@click.option("--partition", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--trials", type=click.IntRange(min=1, max=100), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--dir",
    "cluster_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory of a cluster started by `kraftpy cluster start` (its nodes are killed and restarted).",
)
def failover(topic: str, partition: int, trials: int, as_json: bool, cluster_dir: Path) -> None:
    """SIGKILL the partition leader's node TRIALS times; time to the first acknowledged write after each kill."""
    use_uvloop()
    results = asyncio.run(failover_trials(cluster_dir, topic, partition, trials, {}))
    ordered = sorted(results)
    report = {
        "trials": [round(r, 3) for r in results],
        "median_s": round(statistics.median(ordered), 3),
        "min_s": round(ordered[0], 3),
        "max_s": round(ordered[-1], 3),
    }
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(
            f"{trials} failovers of {topic}-{partition}: median {report['median_s']:.3f} s "
            f"(min {report['min_s']:.3f}, max {report['max_s']:.3f}); trials {report['trials']}"
        )


if __name__ == "__main__":  # `python -m kraftpy.tools.commands.perf produce ...` works before the CLI registers it
    perf()
