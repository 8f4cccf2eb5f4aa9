"""Soak for issue 11 §2 (the producer stall): run the two commands that stalled, many times, and count stalls.

* **cli**: `seq 1 3000 | kraftpy produce T --partition 1` (acks=all), each run
  to a topic created just before it (6 partitions, RF 3, min ISR 2) and
  deleted after, as in the issue's reproduction;
* **perf**: `kraftpy perf produce --topic p100 --num-records 100000
  --record-size 100 --throughput -1 --acks all` (p100: 6 partitions, RF 3,
  min ISR 2, created once, retention bounded so the soak's disk use is).

A run *stalls* when its topic's high watermarks (summed over partitions,
polled every 0.5 s) do not move for `--stall-s` (default 40 s, well below
the 120 s delivery timeout) while the command is still running; the run is
then killed (by its pid) and counted. A run that exits non-zero or outlives
`--timeout-s` without stalling counts as failed. Every command runs as a
user runs it (`python -m kraftpy.tools.cli ...` in a subprocess).

    python benchmarks/produce_stall_soak.py                      # 200 runs of each on a fresh local cluster
    python benchmarks/produce_stall_soak.py --runs 30 --busy 2   # with two busy loops, as the issue did
    python benchmarks/produce_stall_soak.py --dir /tmp/c --only cli --runs 50

Exit status 1 when any run stalled or failed. Results: docs/perf-produce-consume.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click
from metadata_bench import BenchCluster  # benchmarks/ is on sys.path when this file runs as a script
from rich.console import Console

from kraftpy.client import Consumer, TopicPartition
from kraftpy.tools.cluster_layout import ClusterLayout

err = Console(stderr=True)
POLL_S = 0.5
TOPIC_CONFIGS = ("min.insync.replicas=2", "retention.bytes=33554432", "segment.bytes=8388608")


@dataclass
class Tally:
    runs: int = 0
    stalled: int = 0
    failed: int = 0
    seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cli(cluster_dir: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *args, "--dir", str(cluster_dir)],
        capture_output=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def create_topic(cluster_dir: Path, topic: str, attempts: int = 3) -> None:
    """Create (or find) the topic; an admin call can time out on a loaded machine, so try a few times."""
    configs = [arg for c in TOPIC_CONFIGS for arg in ("--config", c)]
    args = ("topics", "create", topic, "--partitions", "6", "--replication-factor", "3", "--if-not-exists")
    last = ""
    for _ in range(attempts):
        try:
            done = cli(cluster_dir, *args, *configs)
        except subprocess.TimeoutExpired as exc:
            last = str(exc)
            continue
        if done.returncode == 0:
            return
        last = done.stderr.decode(errors="replace").strip()
        time.sleep(1)
    raise RuntimeError(f"cannot create {topic}: {last}")


async def high_watermarks(consumer: Consumer, topic: str) -> int:
    tps = [TopicPartition(topic, p) for p in range(6)]
    return sum((await consumer.end_offsets(tps)).values())


async def watch(
    consumer: Consumer, topic: str, argv: list[str], stdin: bytes | None, stall_s: float, timeout_s: float
) -> tuple[str, float, str]:
    """Run one command; ('ok' | 'stalled' | 'failed', seconds, detail)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stderr is not None
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    stderr_task = asyncio.ensure_future(proc.stderr.read())
    start = last_move = time.monotonic()
    last_hw = -1
    outcome = "ok"
    while True:
        try:
            async with asyncio.timeout(POLL_S):
                await proc.wait()
            break
        except TimeoutError:
            pass
        now = time.monotonic()
        try:
            hw = await high_watermarks(consumer, topic)
        except Exception:  # a slow answer is no proof of progress; the bound below still applies
            hw = last_hw
        if hw != last_hw:
            last_hw, last_move = hw, now
        if now - last_move > stall_s:
            outcome = "stalled"
        elif now - start > timeout_s:
            outcome = "failed"
        if outcome != "ok":
            os.kill(proc.pid, signal.SIGKILL)  # only the process this run started
            await proc.wait()
            break
    elapsed = time.monotonic() - start
    stderr = (await stderr_task).decode(errors="replace").strip().splitlines()
    if outcome == "ok" and proc.returncode != 0:
        outcome = "failed"
    detail = f"exit {proc.returncode}, hw {last_hw}" + (f": {stderr[-1]}" if stderr else "")
    return outcome, elapsed, detail


async def soak(
    cluster_dir: Path, only: str, runs: int, stall_s: float, timeout_s: float, hogs: BusyLoops
) -> dict[str, Tally]:
    layout = ClusterLayout.load(cluster_dir)
    kraftpy = [sys.executable, "-m", "kraftpy.tools.cli"]
    tallies: dict[str, Tally] = {}
    lines = b"".join(b"%d\n" % i for i in range(1, 3001))
    async with Consumer(layout.kafka_bootstrap_servers) as consumer:
        if only in ("both", "perf") and not await topic_exists(consumer, "p100"):
            create_topic(cluster_dir, "p100")
        for kind in ("cli", "perf"):
            if only not in ("both", kind):
                continue
            tally = tallies[kind] = Tally()
            for i in range(runs):
                if kind == "cli":
                    topic = f"stall-soak-{os.getpid()}-{i}"
                    create_topic(cluster_dir, topic)
                    argv = [*kraftpy, "produce", topic, "--partition", "1", "--dir", str(cluster_dir)]
                    stdin: bytes | None = lines
                else:
                    topic = "p100"
                    argv = [*kraftpy, "perf", "produce", "--topic", topic, "--num-records", "100000",
                            "--record-size", "100", "--throughput", "-1", "--acks", "all",
                            "--dir", str(cluster_dir)]  # fmt: skip
                    stdin = None
                hogs.refresh()
                outcome, seconds, detail = await watch(consumer, topic, argv, stdin, stall_s, timeout_s)
                tally.runs += 1
                tally.seconds.append(round(seconds, 2))
                if outcome != "ok":
                    setattr(tally, outcome, getattr(tally, outcome) + 1)
                    tally.notes.append(f"run {i}: {outcome} after {seconds:.1f} s ({detail})")
                err.print(f"{kind} run {i + 1}/{runs}: {outcome} in {seconds:.1f} s")
                if kind == "cli" and cli(cluster_dir, "topics", "delete", topic).returncode != 0:
                    err.print(f"[yellow]could not delete {topic}; left in place[/]")
    return tallies


async def topic_exists(consumer: Consumer, topic: str) -> bool:
    try:
        return bool(await asyncio.wait_for(consumer.partitions_for(topic), 10))
    except Exception:
        return False


class BusyLoops:
    """CPU hogs, as the issue's 'one busy loop per core'. Each lives at most `lifetime_s` (`timeout`), and
    `refresh()` before every run replaces those that ended, so a soak that is killed leaves none for long."""

    def __init__(self, count: int, lifetime_s: float) -> None:
        self.count, self.lifetime_s = count, lifetime_s
        self.procs: list[subprocess.Popen[bytes]] = []

    def refresh(self) -> None:
        self.procs = [p for p in self.procs if p.poll() is None]
        while len(self.procs) < self.count:
            argv = ["timeout", str(int(self.lifetime_s)), "sh", "-c", "while :; do :; done"]
            self.procs.append(subprocess.Popen(argv))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()  # `timeout` passes SIGTERM on to its busy loop
            proc.wait()
        self.procs = []


@click.command()
@click.option(
    "--dir",
    "cluster_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A running cluster from `kraftpy cluster start`; default: start one in a temporary directory.",
)
@click.option("--only", type=click.Choice(["both", "cli", "perf"]), default="both", show_default=True)
@click.option("--runs", type=click.IntRange(1), default=200, show_default=True, help="Runs of each command.")
@click.option(
    "--stall-s",
    type=click.FloatRange(1),
    default=40,
    show_default=True,
    help="No high-watermark progress for this long while running is a stall.",
)
@click.option("--timeout-s", type=click.FloatRange(1), default=110, show_default=True, help="Bound on one run.")
@click.option(
    "--busy",
    type=click.IntRange(0, 8),
    default=0,
    show_default=True,
    help="Busy loops to run meanwhile (each ends within 2 x --timeout-s; replaced before every run).",
)
@click.option("--json", "as_json", is_flag=True)
def main(
    cluster_dir: Path | None, only: str, runs: int, stall_s: float, timeout_s: float, busy: int, as_json: bool
) -> None:  # fmt: skip
    bench: BenchCluster | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if cluster_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="stall-soak-")
        bench = BenchCluster(Path(tmp.name) / "cluster")
        bench.start()
        cluster_dir = bench.dir
    hogs = BusyLoops(busy, 2 * timeout_s)
    load_before = os.getloadavg()[0]
    try:
        tallies = asyncio.run(soak(cluster_dir, only, runs, stall_s, timeout_s, hogs))
    finally:
        hogs.stop()
        if bench is not None:
            bench.stop()
        if tmp is not None:
            tmp.cleanup()
    load_after = os.getloadavg()[0]
    if as_json:
        out = {kind: asdict(t) for kind, t in tallies.items()}
        click.echo(json.dumps({**out, "load": [load_before, load_after], "stall_s": stall_s}))
    else:
        for kind, t in tallies.items():
            median = sorted(t.seconds)[len(t.seconds) // 2] if t.seconds else 0
            click.echo(f"{kind}: {t.stalled} of {t.runs} runs stalled, {t.failed} failed (median {median:.1f} s)")
            for note in t.notes:
                click.echo(f"  {note}")
        click.echo(f"load average {load_before:.2f} -> {load_after:.2f}; stall = no HW progress for {stall_s:g} s")
    sys.exit(1 if any(t.stalled or t.failed for t in tallies.values()) else 0)


if __name__ == "__main__":
    main()
