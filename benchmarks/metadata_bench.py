"""Metadata and controller figures over real `kraftpy server` processes on 127.0.0.1.

* **start**: `kraftpy cluster start --nodes 3` on a fresh directory until it
  reports healthy (the command returns), `--trials` times.
* **create**: topics of 10 partitions, RF 3, created through
  `/controller/create_topics`, one at a time and `--concurrency` in flight;
  topics/s from the first request to the last answer (an answer comes once the
  records are committed). Twice: on a full combined cluster (brokers create the
  partition logs on the same two cores) and on a controller-only quorum with
  three lightweight brokers (the metadata path alone).
* **failover**: with 1,000 and 10,000 partitions (RF 3) on the controller-only
  quorum, SIGKILL one broker process and time until the committed metadata
  shows every partition it led with a new leader. The brokers are small
  processes that register and heartbeat like the broker component (they hold
  no data), so the figure is the metadata path: session expiry plus the
  fencing decision and its commit. The same with 1,000 partitions on a full
  combined cluster. The observer is a Raft observer in this process
  (RaftComponent + MetadataComponent), so the moment is read from the
  committed log, not from polling.
* **hosting**: on a combined cluster, `--hosting-topics` topics of
  `--hosting-partitions` partitions (RF 3) created one at a time; topics/s until every replica is
  hosted on its broker (each node's `/admin/status` counts its partitions and
  leaders), and the event-loop stall meanwhile: every node answers a
  `/admin/status` probe every 20 ms, and the slowest answer bounds how long
  its loop was blocked (the same probe idle gives the baseline).
* **restart**: a controller-only quorum holding 100,000 partitions (1,000 topics
  x 100, RF 3) with `metadata_snapshot_max_new_record_bytes` = 2 MiB, so each
  controller has snapshots and a log tail after the last one. SIGKILL a
  follower controller, start it again and time from the process start until
  its `/admin/status` shows the metadata offset it had before (snapshot load
  plus replay), `--trials` times.

    python benchmarks/metadata_bench.py                   # everything, summary table
    python benchmarks/metadata_bench.py --json            # the same figures as one JSON object
    python benchmarks/metadata_bench.py --only start,controller-only --trials 2
    python benchmarks/metadata_bench.py --only hosting --hosting-topics 10

docs/perf-metadata.md has the results on the reference machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftpy.broker.lifecycle import BrokerLifecycle, BrokerState
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.metadata.shell.publisher import MetadataComponent
from kraftpy.node import meta_properties
from kraftpy.node.config import build_config
from kraftpy.protocol.credentials import NODE_FILE, Credential
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.shell.credential_files import load_credential
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.raft.shell.component import RaftComponent
from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry, process_is_node
from kraftpy.tools.commands.cluster import LOCAL_CLUSTER_SETTINGS, new_layout, write_node_files

err = Console(stderr=True)
STEP_TIMEOUT_S = 600


def kraftpy_cli(*args: str, timeout_s: float = STEP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *args], capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kraftpy {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc


def free_base_port(count: int) -> int:
    import socket

    for _ in range(200):
        base = random.randrange(20_000, 60_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- clusters ---------------------------------------------------------------------------------------------


class BenchCluster:
    """A cluster directory driven through `kraftpy cluster start|stop`; extra broker processes by pid."""

    def __init__(self, directory: Path, *, controller_only: bool = False, settings: dict[str, Any] | None = None):
        self.dir = directory
        self.base_port = free_base_port(8)
        self.controller_only = controller_only
        self.sim_brokers: dict[int, subprocess.Popen[bytes]] = {}
        if controller_only or settings:
            layout = new_layout(directory, 3, "127.0.0.1", self.base_port)
            if controller_only:
                layout = ClusterLayout(
                    layout.dir,
                    layout.cluster_id,
                    tuple(NodeEntry(n.node_id, n.host, n.port, ("controller",)) for n in layout.nodes),
                )
            write_node_files(layout)
            layout.save()
            for key, value in (settings or {}).items():
                for entry in layout.nodes:
                    path = layout.config_path(entry)
                    lines = [line for line in path.read_text().splitlines() if not line.startswith(f"{key} =")]
                    path.write_text("\n".join([*lines, f"{key} = {value}"]) + "\n")

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout.load(self.dir)

    def start(self) -> float:
        t0 = time.perf_counter()
        kraftpy_cli("cluster", "start", "--nodes", "3", "--dir", str(self.dir), "--base-port", str(self.base_port))
        return time.perf_counter() - t0

    def stop(self) -> None:
        for proc in self.sim_brokers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.sim_brokers.clear()
        try:
            kraftpy_cli("cluster", "stop", "--dir", str(self.dir), "--timeout-s", "10")
        except Exception as e:  # then by pid
            err.print(f"[yellow]cluster stop: {e}[/]")
        layout = self.layout
        for entry in layout.nodes:
            pid = layout.read_pid(entry)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)

    def voters(self) -> dict[int, tuple[str, int]]:
        return {n.node_id: (n.host, n.port) for n in self.layout.nodes}

    def credential_path(self) -> Path:
        """The nodes' credential: the observer, the simulated brokers and the controller client act as nodes."""
        return self.layout.secrets_dir / NODE_FILE

    def credential(self) -> Credential:
        return load_credential(self.credential_path())

    def start_sim_broker(self, broker_id: int) -> None:
        voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in self.voters().items())
        self.sim_brokers[broker_id] = subprocess.Popen(
            [sys.executable, __file__, "sim-broker", "--id", str(broker_id), "--voters", voters,
             "--cluster-id", self.layout.cluster_id, "--credential", str(self.credential_path()),
             "--interval-ms", str(LOCAL_CLUSTER_SETTINGS["broker_heartbeat_interval_ms"])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def node_pid(self, node_id: int) -> int | None:
        layout = self.layout
        return layout.read_pid(next(n for n in layout.nodes if n.node_id == node_id))


async def status_of(address: tuple[str, int]) -> dict[str, Any] | None:
    client = RpcClient(request_timeout_ms=2000)
    try:
        return await client.call(address, "/admin/status", {})
    except KafkaError:
        return None
    finally:
        await client.close()


class ControllerClient:
    """Calls `/controller/*` on the active controller, following NOT_CONTROLLER hints."""

    def __init__(self, voters: dict[int, tuple[str, int]], credential: Credential) -> None:
        self.voters = voters
        self.rpc = RpcClient(request_timeout_ms=60_000, credential=credential)
        self.target = next(iter(voters.values()))
        self.refused = 0  # creates refused because fewer than 3 brokers were unfenced

    async def call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        for _ in range(200):
            try:
                return await self.rpc.call(self.target, "/controller/" + route, body)
            except KafkaError as e:
                if e.code == ErrorCode.NOT_CONTROLLER and isinstance(e.details.get("leader_address"), str):
                    host, _, port = e.details["leader_address"].rpartition(":")
                    self.target = (host, int(port))
                    continue
                if e.code in (ErrorCode.NOT_CONTROLLER, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    self.target = random.choice(list(self.voters.values()))
                    await asyncio.sleep(0.1)
                    continue
                raise
        raise RuntimeError(f"{route}: no active controller")

    async def close(self) -> None:
        await self.rpc.close()


async def create_topics(client: ControllerClient, prefix: str, count: int, partitions: int, concurrency: int) -> float:
    """Create `count` topics; returns the elapsed seconds."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            body = {"topics": [{"name": f"{prefix}-{i}", "num_partitions": partitions, "replication_factor": 3}]}
            for _ in range(100):
                answer = await client.call("create_topics", body)
                item = answer["topics"][0]
                if item.get("error") != "INVALID_REPLICATION_FACTOR":
                    break
                client.refused += 1  # a broker is fenced for a moment (a stalled event loop): wait, retry
                await asyncio.sleep(0.2)
            # TOPIC_ALREADY_EXISTS: a retry after a lost answer (NOT_CONTROLLER, timeout) whose first try committed.
            if item["error_code"] and item.get("error") != "TOPIC_ALREADY_EXISTS":
                raise RuntimeError(f"create {prefix}-{i}: {item.get('error')}: {item.get('message')}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - t0


class Observer:
    """A Raft observer in this process: the committed metadata log as images, with their arrival times."""

    def __init__(self, cluster: BenchCluster, directory: Path) -> None:
        voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in cluster.voters().items())
        config = build_config(
            {
                "node_id": 900,
                "process_roles": "broker",
                "controller_quorum_voters": voters,
                "data_dir": str(directory),
                "port": free_base_port(1),
                **{k: v for k, v in LOCAL_CLUSTER_SETTINGS.items() if k.startswith("controller_quorum")},
            }
        )
        meta_properties.write(directory, meta_properties.MetaProperties(cluster.layout.cluster_id, 900))
        rpc = RpcClient(request_timeout_ms=2000, credential=cluster.credential())  # an observer is a node
        self.node = SimpleNamespace(
            config=config, cluster_id=cluster.layout.cluster_id, rpc=rpc, request_stop=lambda: None,
        )  # fmt: skip
        self.raft = RaftComponent.from_node(self.node)
        self.metadata = MetadataComponent(self.node, self.raft)
        self._waiters: list[tuple[Callable[[MetadataImage], bool], asyncio.Future[float]]] = []
        self.metadata.subscribe(self._on_image)

    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        now = time.perf_counter()
        for predicate, future in list(self._waiters):
            if not future.done() and predicate(new):
                future.set_result(now)

    async def start(self) -> None:
        await self.raft.start()

    async def when(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> float:
        """perf_counter() of the first committed image for which `predicate` holds."""
        if predicate(self.metadata.image):
            return time.perf_counter()
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        async with asyncio.timeout(timeout_s):
            return await future

    async def stop(self) -> None:
        await self.raft.stop(graceful=False)
        await self.node.rpc.close()


def leads_nothing(broker_id: int) -> Callable[[MetadataImage], bool]:
    def check(image: MetadataImage) -> bool:
        registration = image.broker(broker_id)
        return registration is not None and registration.fenced and not image.leads_any(broker_id)

    return check


# --- scenarios ------------------------------------------------------------------------------------------


def bench_start(trials: int, root: Path) -> dict[str, Any]:
    times = []
    for t in range(trials):
        cluster = BenchCluster(root / f"start-{t}")
        try:
            with err.status(f"start: trial {t + 1}/{trials}"):
                times.append(cluster.start())
        finally:
            cluster.stop()
    return {"trials": trials, "median_s": median(times), "min_s": min(times), "max_s": max(times)}


async def wait_unfenced(observer: Observer, brokers: list[int]) -> None:
    await observer.when(lambda img: all((b := img.broker(i)) is not None and not b.fenced for i in brokers), 60)


async def bench_create(cluster: BenchCluster, observer: Observer, label: str, topics: int, concurrency: int) -> dict:
    client = ControllerClient(cluster.voters(), cluster.credential())
    try:
        await create_topics(client, f"warm-{label}", 3, 10, 1)
        one = await create_topics(client, f"seq-{label}", topics, 10, 1)
        many = await create_topics(client, f"par-{label}", topics, 10, concurrency)
    finally:
        await client.close()
    return {
        "topics": topics,
        "partitions_each": 10,
        "refused_for_fenced_brokers": client.refused,
        "sequential_topics_per_s": topics / one,
        "concurrent_topics_per_s": topics / many,
        "concurrency": concurrency,
    }


async def failover_once(cluster: BenchCluster, observer: Observer, victim_pid: int, victim: int) -> float:
    t0 = time.perf_counter()
    os.kill(victim_pid, signal.SIGKILL)
    t1 = await observer.when(leads_nothing(victim), 120)
    return t1 - t0


async def fill(cluster: BenchCluster, observer: Observer, prefix: str, partitions: int, per_topic: int) -> None:
    client = ControllerClient(cluster.voters(), cluster.credential())
    try:
        await create_topics(client, prefix, -(-partitions // per_topic), per_topic, 4)  # rounded up
    finally:
        await client.close()
    await observer.when(lambda img: img.topics.partition_count() >= partitions, 120)


async def scenario_controller_only(
    root: Path, sizes: list[int], create_topics_n: int, concurrency: int, trials: int
) -> dict[str, Any]:
    cluster = BenchCluster(root / "controllers", controller_only=True)
    observer: Observer | None = None
    out: dict[str, Any] = {"failover": {}}
    try:
        cluster.start()
        for b in (101, 102, 103):
            cluster.start_sim_broker(b)
        observer = Observer(cluster, root / "observer-1")
        await observer.start()
        await wait_unfenced(observer, [101, 102, 103])
        total = observer.metadata.image.topics.partition_count()
        for size in sizes:  # failover first, at exactly these sizes; creation runs on the filled cluster after
            runs = []
            with err.status(f"failover: {size} partitions on the controller-only quorum"):
                if size > total:
                    await fill(cluster, observer, f"fo{size}", size - total, 100)
                total = observer.metadata.image.topics.partition_count()
                for _ in range(trials):
                    image = observer.metadata.image
                    led = {
                        b: sum(1 for *_, p in image.partitions_on_broker(b) if p.leader == b) for b in (101, 102, 103)
                    }
                    victim = max(led, key=led.get)
                    runs.append(await failover_once(cluster, observer, cluster.sim_brokers[victim].pid, victim))
                    cluster.sim_brokers[victim].wait(10)
                    cluster.start_sim_broker(victim)
                    await wait_unfenced(observer, [victim])
            out["failover"][str(size)] = {
                "partitions": total,
                "trials": trials,
                "median_s": median(runs),
                "min_s": min(runs),
                "max_s": max(runs),
            }
        with err.status("create: controller-only quorum"):
            out["create"] = await bench_create(cluster, observer, "ctl", create_topics_n, concurrency)
        out["create"]["partitions_before"] = total
    finally:
        if observer is not None:
            await observer.stop()
        cluster.stop()
    return out


async def scenario_combined(root: Path, failover_partitions: int, create_topics_n: int, concurrency: int, trials: int):
    cluster = BenchCluster(root / "combined")
    observer: Observer | None = None
    out: dict[str, Any] = {}
    try:
        cluster.start()
        observer = Observer(cluster, root / "observer-2")
        await observer.start()
        runs = []
        with err.status(f"failover: {failover_partitions} partitions on the combined cluster"):
            have = observer.metadata.image.topics.partition_count()
            if failover_partitions > have:
                await fill(cluster, observer, "fo", failover_partitions - have, 100)
            for _ in range(trials):
                image = observer.metadata.image
                controller = observer.raft.leader_id
                brokers = [b for b in (1, 2, 3) if b != controller]
                led = {b: sum(1 for *_, p in image.partitions_on_broker(b) if p.leader == b) for b in brokers}
                victim = max(led, key=led.get)
                pid = cluster.node_pid(victim)
                assert pid is not None
                runs.append(await failover_once(cluster, observer, pid, victim))
                layout = cluster.layout
                entry = next(n for n in layout.nodes if n.node_id == victim)
                for _ in range(200):
                    if not process_is_node(pid, layout.config_path(entry)):
                        break
                    await asyncio.sleep(0.05)
                await asyncio.to_thread(cluster.start)
                await wait_unfenced(observer, [victim])
        partitions = observer.metadata.image.topics.partition_count()
        with err.status("create: combined cluster"):
            out["create"] = await bench_create(cluster, observer, "full", create_topics_n, concurrency)
        out["create"]["partitions_before"] = partitions
        out["failover"] = {
            "partitions": partitions,
            "trials": trials,
            "median_s": median(runs),
            "min_s": min(runs),
            "max_s": max(runs),
        }
    finally:
        if observer is not None:
            await observer.stop()
        cluster.stop()
    return out


async def scenario_restart(root: Path, partitions: int, per_topic: int, trials: int) -> dict[str, Any]:
    cluster = BenchCluster(
        root / "restart", controller_only=True, settings={"metadata_snapshot_max_new_record_bytes": 2 * 1024 * 1024}
    )
    observer: Observer | None = None
    try:
        cluster.start()
        for b in (101, 102, 103):
            cluster.start_sim_broker(b)
        observer = Observer(cluster, root / "observer-3")
        await observer.start()
        await wait_unfenced(observer, [101, 102, 103])
        with err.status(f"restart: creating {partitions} partitions"):
            await fill(cluster, observer, "big", partitions, per_topic)
        runs = []
        snapshot_offsets = []
        for t in range(trials):
            controller = observer.raft.leader_id
            victim = next(n for n in (1, 2, 3) if n != controller)
            address = cluster.voters()[victim]
            before = await status_of(address)
            assert before is not None
            offset_before = before["metadata"]["offset"]
            snapshot_offsets.append(before["metadata"]["last_snapshot_offset"])
            pid = cluster.node_pid(victim)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            layout = cluster.layout
            entry = next(n for n in layout.nodes if n.node_id == victim)
            for _ in range(200):
                if not process_is_node(pid, layout.config_path(entry)):
                    break
                await asyncio.sleep(0.05)
            with err.status(f"restart: trial {t + 1}/{trials}"):
                t0 = time.perf_counter()
                await asyncio.to_thread(cluster.start)  # returns once the node answers and the quorum is healthy
                while True:
                    status = await status_of(address)
                    if status is not None and status["metadata"]["offset"] >= offset_before:
                        break
                    if time.perf_counter() - t0 > STEP_TIMEOUT_S:
                        raise RuntimeError("restarted controller never caught up")
                    await asyncio.sleep(0.02)
                runs.append(time.perf_counter() - t0)
        image = observer.metadata.image
        return {
            "partitions": image.topics.partition_count(),
            "topics": len(image.topics.by_id),
            "metadata_offset": observer.metadata.committed_offset,
            "snapshot_offset_before_kill": snapshot_offsets,
            "snapshot_bytes": len(image.encode()),
            "trials": trials,
            "median_s": median(runs),
            "min_s": min(runs),
            "max_s": max(runs),
        }
    finally:
        if observer is not None:
            await observer.stop()
        cluster.stop()


class LoopProbe:
    """Answers of `/admin/status` from every node every 20 ms: a stalled event loop shows as a slow answer."""

    def __init__(self, addresses: list[tuple[str, int]]) -> None:
        self.addresses = addresses
        self.latencies: dict[tuple[str, int], list[float]] = {a: [] for a in addresses}
        self._tasks: list[asyncio.Task[None]] = []

    async def _probe(self, address: tuple[str, int]) -> None:
        client = RpcClient(request_timeout_ms=10_000)
        try:
            while True:
                t0 = time.perf_counter()
                with contextlib.suppress(KafkaError):
                    await client.call(address, "/admin/status", {})
                self.latencies[address].append(time.perf_counter() - t0)
                await asyncio.sleep(0.02)
        finally:
            await client.close()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._probe(a)) for a in self.addresses]

    async def stop(self) -> dict[str, float]:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        every = sorted(x for values in self.latencies.values() for x in values)
        worst = {f"{h}:{p}": max(v, default=0.0) for (h, p), v in self.latencies.items()}
        return {
            "probes": len(every),
            "max_ms": 1000 * max(every, default=0.0),
            "p99_ms": 1000 * every[int(0.99 * (len(every) - 1))] if every else 0.0,
            "worst_node_max_ms": {k: 1000 * v for k, v in worst.items()},
        }


async def hosted_counts(addresses: list[tuple[str, int]]) -> tuple[int, int]:
    """(replicas hosted, leaders) summed over the nodes' `/admin/status`."""
    replicas = leaders = 0
    for address in addresses:
        status = await status_of(address)
        r = ((status or {}).get("broker") or {}).get("replicas") or {}
        replicas += int(r.get("partitions", 0))
        leaders += int(r.get("leaders", 0))
    return replicas, leaders


async def scenario_hosting(root: Path, topics: int, per_topic: int = 10) -> dict[str, Any]:
    """Create topics one at a time on a combined cluster; time until every replica is hosted, probe the loops."""
    cluster = BenchCluster(root / "hosting")
    try:
        cluster.start()
        addresses = list(cluster.voters().values())
        client = ControllerClient(cluster.voters(), cluster.credential())
        try:
            await create_topics(client, "warm-host", 1, per_topic, 1)
            want = (per_topic * 3, per_topic)
            async with asyncio.timeout(120):
                while await hosted_counts(addresses) != want:
                    await asyncio.sleep(0.05)
            idle = LoopProbe(addresses)
            idle.start()
            await asyncio.sleep(2)
            baseline = await idle.stop()
            busy = LoopProbe(addresses)
            busy.start()
            with err.status(f"hosting: {topics} topics of {per_topic} partitions"):
                t0 = time.perf_counter()
                created_s = await create_topics(client, "host", topics, per_topic, 1)
                want = ((topics + 1) * per_topic * 3, (topics + 1) * per_topic)
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    while await hosted_counts(addresses) != want:
                        await asyncio.sleep(0.02)
                hosted_s = time.perf_counter() - t0
            stalls = await busy.stop()
        finally:
            await client.close()
    finally:
        cluster.stop()
    return {
        "topics": topics,
        "partitions_each": per_topic,
        "replicas": topics * per_topic * 3,
        "refused_for_fenced_brokers": client.refused,
        "created_topics_per_s": topics / created_s,
        "hosted_s": hosted_s,
        "hosted_topics_per_s": topics / hosted_s,
        "probe_idle": baseline,
        "probe_during": stalls,
    }


# --- the lightweight broker process -----------------------------------------------------------------------


async def run_sim_broker(
    broker_id: int, voters: dict[int, tuple[str, int]], cluster_id: str, interval_ms: int, credential: Path
) -> None:
    """Register and heartbeat as the broker component does, holding no data. It reports a metadata offset
    far ahead, so the controller counts it caught up at once (it never replays the log)."""
    lifecycle = BrokerLifecycle(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4().hex,
        listeners=(Listener("PLAINTEXT", "127.0.0.1", 1),), rack=None, voters=voters,
        heartbeat_interval_ms=interval_ms,
    )  # fmt: skip
    rpc = RpcClient(request_timeout_ms=5000, credential=load_credential(credential))
    leader_guess = next(iter(voters))
    while lifecycle.state is not BrokerState.SHUTTING_DOWN:
        now = monotonic_ms()
        out = lifecycle.next_request(now, 1 << 62, leader_guess)
        if out is None:
            await asyncio.sleep(max(1, (lifecycle.next_deadline_ms() or now + 100) - now) / 1000)
            continue
        try:
            lifecycle.on_answer(out, await rpc.call(out.address, out.path, out.body), monotonic_ms())
        except KafkaError as e:
            lifecycle.on_error(out, e, monotonic_ms())
            if lifecycle.hint is None:
                leader_guess = random.choice(list(voters))


# --- CLI ----------------------------------------------------------------------------------------------------


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the table.")
@click.option("--only", default="start,controller-only,combined,hosting,restart", show_default=True)
@click.option("--trials", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option("--topics", "create_topics_n", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 256), default=16, show_default=True)
@click.option("--restart-partitions", type=click.IntRange(1000, 1_000_000), default=100_000, show_default=True)
@click.option("--failover-sizes", default="1000,10000", show_default=True, help="Partition counts for failover.")
@click.option("--hosting-topics", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--hosting-partitions", type=click.IntRange(1, 1000), default=10, show_default=True, help="Per topic.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Keep clusters and logs here.")
@click.pass_context
def main(
    ctx: click.Context,
    as_json: bool,
    only: str,
    trials: int,
    create_topics_n: int,
    concurrency: int,
    restart_partitions: int,
    failover_sizes: str,
    hosting_topics: int,
    hosting_partitions: int,
    workdir: Path | None,
) -> None:
    """Metadata and controller benchmark (see the module docstring)."""
    if ctx.invoked_subcommand is not None:
        return
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    sizes = sorted(int(x) for x in failover_sizes.split(",") if x.strip())
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory(prefix="kraftpy-metadata-bench-") as tmp:
        root = Path(tmp) if workdir is None else workdir
        root.mkdir(parents=True, exist_ok=True)
        scenarios: dict[str, Callable[[], Any]] = {
            "start": lambda: bench_start(trials, root),
            "controller-only": lambda: asyncio.run(
                scenario_controller_only(root, sizes, create_topics_n, concurrency, trials)
            ),
            "combined": lambda: asyncio.run(scenario_combined(root, sizes[0], create_topics_n, concurrency, trials)),
            "hosting": lambda: asyncio.run(scenario_hosting(root, hosting_topics, hosting_partitions)),
            "restart": lambda: asyncio.run(scenario_restart(root, restart_partitions, 100, trials)),
        }
        for name, run in scenarios.items():
            if name not in wanted:
                continue
            try:
                results[name.replace("-", "_")] = run()
            except Exception as e:  # one failed scenario must not lose the others' figures
                err.print_exception()
                results[name.replace("-", "_")] = {"error": f"{type(e).__name__}: {e}"}
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        Console().print(summary_table(results))


def summary_table(r: dict[str, Any]) -> Table:
    table = Table(title="kraftpy metadata benchmark (3 nodes on 127.0.0.1)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("notes")
    failed = {k: v["error"] for k, v in r.items() if isinstance(v, dict) and "error" in v}
    for key, message in failed.items():
        table.add_row(f"{key}: failed", "-", message[:80])
    r = {k: v for k, v in r.items() if k not in failed}
    if "start" in r:
        s = r["start"]
        table.add_row(
            "cluster start --nodes 3 until healthy",
            f"{s['median_s']:.2f} s",
            f"median of {s['trials']}, {s['min_s']:.2f}-{s['max_s']:.2f} s",
        )
    for key, label in (("controller_only", "controller-only quorum"), ("combined", "combined cluster")):
        if key not in r:
            continue
        c = r[key]["create"]
        table.add_row(
            f"topic creation, {label}, 1 in flight",
            f"{c['sequential_topics_per_s']:.0f} topics/s",
            "10 partitions, RF 3",
        )
        table.add_row(
            f"topic creation, {label}, {c['concurrency']} in flight",
            f"{c['concurrent_topics_per_s']:.0f} topics/s",
            "10 partitions, RF 3",
        )
    for size, f in r.get("controller_only", {}).get("failover", {}).items():
        table.add_row(
            f"broker SIGKILL -> new leaders, {size} partitions",
            f"{f['median_s']:.2f} s",
            f"controller-only quorum, median of {f['trials']}, {f['min_s']:.2f}-{f['max_s']:.2f} s",
        )
    if "combined" in r:
        f = r["combined"]["failover"]
        table.add_row(
            f"broker SIGKILL -> new leaders, {f['partitions']} partitions",
            f"{f['median_s']:.2f} s",
            f"combined cluster, median of {f['trials']}",
        )
    if "hosting" in r:
        h = r["hosting"]
        table.add_row(
            f"topic creation until every replica is hosted, {h['topics']} x {h['partitions_each']} partitions",
            f"{h['hosted_topics_per_s']:.1f} topics/s",
            f"combined cluster, RF 3, 1 in flight; committed at {h['created_topics_per_s']:.1f} topics/s",
        )
        table.add_row(
            "event-loop stall while hosting (slowest /admin/status probe)",
            f"{h['probe_during']['max_ms']:.0f} ms",
            f"p99 {h['probe_during']['p99_ms']:.0f} ms; idle max {h['probe_idle']['max_ms']:.0f} ms",
        )
    if "restart" in r:
        s = r["restart"]
        table.add_row(
            f"controller cold restart, {s['partitions']} partitions",
            f"{s['median_s']:.2f} s",
            f"snapshot load + replay, median of {s['trials']}, {s['min_s']:.2f}-{s['max_s']:.2f} s",
        )
    return table  # fmt: skip


@main.command("sim-broker", hidden=True)
@click.option("--id", "broker_id", type=int, required=True)
@click.option("--voters", required=True)
@click.option("--cluster-id", required=True)
@click.option("--interval-ms", type=int, default=300)
@click.option("--credential", type=click.Path(dir_okay=False, path_type=Path), required=True)
def sim_broker(broker_id: int, voters: str, cluster_id: str, interval_ms: int, credential: Path) -> None:
    parsed = {}
    for item in voters.split(","):
        node, _, address = item.partition("@")
        host, _, port = address.rpartition(":")
        parsed[int(node)] = (host, int(port))
    asyncio.run(run_sim_broker(broker_id, parsed, cluster_id, interval_ms, credential))


if __name__ == "__main__":
    main()
