"""One fault run (the shell): network, cluster, workload under the nemesis, heal, read back, check, report.

Everything it starts it stops (nodes by pid, the network by name) in `FaultRun.close()`, on any exit.
The process enters the client namespace after making the network, so the workload and every
command it runs reach the nodes through the run's bridge, like any client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry
from kraftpy.tools.commands.cluster import new_layout, spawn_node, wait_until_healthy, write_node_files
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.netns import FaultNet, enter_namespace
from kraftpy.tools.faults.partitions import CLIENT
from kraftpy.tools.faults.schedule import Fault, next_fault
from kraftpy.tools.faults.workload import produce, read_all

TOPIC = "faults"
PARTITIONS = 3
PROCESSES = 6
RPC_PORT = 19092  # the run's addresses are its own: no other process can hold these ports there
KAFKA_PORT = 9092
CLI_TIMEOUT_S = 90
START_TIMEOUT_S = 90
RECOVER_TIMEOUT_S = 120


class CouldNotRun(Exception):
    """The run could not happen (exit 2): the machine, the cluster's start, a stuck recovery."""


@dataclass
class RunResult:
    seed: int
    valid: bool | None = None
    faults: Counter[str] = field(default_factory=Counter)
    invoked: int = 0
    ok: int = 0
    info: int = 0
    anomalies: dict[str, Any] = field(default_factory=dict)
    history: Path | None = None


@dataclass
class FaultRun:
    out: Path
    seed: int
    time_limit_s: float
    node_count: int
    nemeses: tuple[str, ...]
    rate_per_s: float | None
    say: Callable[[str], None]
    net: FaultNet = field(init=False)
    layout: ClusterLayout | None = None
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.net = FaultNet(f"r{secrets.token_hex(4)}", tuple(range(1, self.node_count + 1)))

    def log(self, message: str) -> None:
        self.say(f"[{time.monotonic() - self._t0:6.1f}s] {message}")

    # --- the cluster ---------------------------------------------------------------------------------
    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kraftpy.tools.cli", *args], capture_output=True, text=True,
            timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def entry(self, node: int) -> NodeEntry:
        assert self.layout is not None
        return next(n for n in self.layout.nodes if n.node_id == node)

    def start(self) -> None:
        self.net.setup()
        self.log(f"network {self.net.run_id}: {self.net.subnet}, namespaces {', '.join(self.net.namespaces())}")
        enter_namespace(self.net.namespace(CLIENT))
        hosts = ",".join(self.net.address(n) for n in self.net.node_ids)
        namespaces = ",".join(self.net.namespace(n) for n in self.net.node_ids)
        layout = new_layout(self.out / "cluster", self.node_count, hosts, RPC_PORT, KAFKA_PORT, namespaces)
        write_node_files(layout)
        layout.save()
        self.layout = layout
        started = {n.node_id: spawn_node(layout, n) for n in layout.nodes}
        try:
            wait_until_healthy(layout, START_TIMEOUT_S, started)
        except Exception as exc:
            raise CouldNotRun(f"the cluster did not start: {exc}") from None
        self.log(f"cluster {layout.cluster_id} healthy: {layout.bootstrap_servers}")
        created = self.cli(
            "topics", "create", TOPIC, "--dir", str(layout.dir), "--partitions", str(PARTITIONS),
            "--replication-factor", str(min(3, self.node_count)), "--config", "min_insync_replicas=2",
        )  # fmt: skip
        if created.returncode != 0:
            raise CouldNotRun(f"topics create failed: {created.stderr.strip()}")

    def kill(self, node: int) -> None:
        assert self.layout is not None
        pid = self.layout.read_pid(self.entry(node))
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def restart_dead(self) -> list[int]:
        assert self.layout is not None
        dead = [n for n in self.layout.nodes if self.layout.read_pid(n) is None]
        for entry in dead:
            spawn_node(self.layout, entry)
        return [n.node_id for n in dead]

    def in_sync(self) -> bool:
        assert self.layout is not None
        described = self.cli("topics", "describe", TOPIC, "--json", "--dir", str(self.layout.dir))
        if described.returncode != 0:
            return False
        want = min(3, self.node_count)
        return all(len(p["isr"]) == want and p["leader"] >= 0 for p in json.loads(described.stdout)["partitions"])

    # --- the nemesis ---------------------------------------------------------------------------------
    async def nemesis(self, history: HistoryWriter, end: RunEnd, rng: random.Random, done: Counter[str]) -> None:
        while not end.passed():
            fault: Fault = next_fault(self.nemeses, self.net.node_ids, rng)
            await asyncio.sleep(fault.quiet_s)
            if end.passed():
                break
            self.log(f"{fault.nemesis} start: {_summary(fault)}")
            history.nemesis(f"{fault.nemesis}-start", fault.describe())
            try:
                if fault.nemesis == "kill":
                    await asyncio.to_thread(self.kill, fault.node)
                else:
                    await asyncio.to_thread(self.net.apply, fault.drops)
                done[fault.nemesis] += 1
                await asyncio.sleep(fault.hold_s)
            finally:
                await asyncio.to_thread(self.net.heal)
                restarted = await asyncio.to_thread(self.restart_dead)
                history.nemesis(f"{fault.nemesis}-end", {"restarted": restarted})
                self.log(f"{fault.nemesis} end" + (f": restarted {restarted}" if restarted else ""))

    async def progress(self, end: RunEnd, history: HistoryWriter, done: Counter[str]) -> None:
        while not end.passed():
            await asyncio.sleep(5)
            self.log(f"history: {history.events} events; faults so far: {dict(done) or 'none'}")

    # --- the run -------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        result = RunResult(self.seed)
        rng = random.Random(self.seed)
        self.out.mkdir(parents=True, exist_ok=True)
        self.start()
        assert self.layout is not None
        result.history = self.out / "history.jsonl"
        history = HistoryWriter(result.history)
        try:
            asyncio.run(self._under_faults(history, rng, result))
            self.net.heal()
            restarted = self.restart_dead()
            self.log("healed" + (f"; restarted {restarted}" if restarted else "") + "; waiting for full ISRs")
            deadline = time.monotonic() + RECOVER_TIMEOUT_S
            while not self.in_sync():
                if time.monotonic() > deadline:
                    raise CouldNotRun(f"the ISRs did not recover within {RECOVER_TIMEOUT_S} s after the heal")
                time.sleep(0.5)
            self.log("every replica in sync; reading everything back")
            asyncio.run(read_all(history, self.layout.kafka_bootstrap_servers, TOPIC, PARTITIONS))
        finally:
            history.close()
        check = self.cli("check", str(result.history), "--model", "kafka", "--json")
        try:
            verdict = json.loads(check.stdout)
        except ValueError:
            raise CouldNotRun(f"kraftpy check failed: {check.stderr.strip()[:500]}") from None
        (self.out / "check.json").write_text(json.dumps(verdict, indent=2) + "\n")
        result.valid = bool(verdict.get("valid"))
        result.anomalies = {k: v for k, v in verdict.items() if k != "valid"} if not result.valid else {}
        return result

    async def _under_faults(self, history: HistoryWriter, rng: random.Random, result: RunResult) -> None:
        assert self.layout is not None
        end = RunEnd(self.time_limit_s, hard_limit_s=0)
        workload_rng = random.Random(rng.random())
        stats_box: list[Any] = []

        async def workload() -> None:
            stats = await produce(
                history, self.layout.kafka_bootstrap_servers, TOPIC, PARTITIONS, processes=PROCESSES, end=end,
                max_sends=int(self.time_limit_s * 2_000), rng=workload_rng, rate_per_s=self.rate_per_s,
            )  # fmt: skip
            stats_box.append(stats)

        await asyncio.gather(
            workload(), self.nemesis(history, end, rng, result.faults), self.progress(end, history, result.faults)
        )
        stats = stats_box[0]
        result.invoked, result.ok, result.info = stats.invoked, stats.ok, stats.info

    def close(self) -> None:
        """Stop every node (SIGTERM, SIGKILL after a bound), then remove the network."""
        if self.layout is not None:
            with contextlib.suppress(Exception):
                self.cli("cluster", "stop", "--dir", str(self.layout.dir), "--timeout-ms", "10000")
            for entry in self.layout.nodes:
                pid = self.layout.read_pid(entry)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        self.net.teardown()


def _summary(fault: Fault) -> str:
    if fault.node is not None:
        return f"node {fault.node}"
    cut = sorted({tuple(sorted(p)) for p in fault.drops})
    return "cut " + (", ".join(f"{a}-{b}" for a, b in cut) if cut else "nothing")
