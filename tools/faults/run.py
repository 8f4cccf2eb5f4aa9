"""One fault run (the shell): network, cluster, workload under the nemesis, heal, read back, check, audit, report.

Everything it starts it stops (nodes by pid, the network by name, the small disk by mount point) in
`FaultRun.close()`, on any exit. The process enters the client namespace after making the network, so
the workload and every command it runs reach the nodes through the run's bridge, like any client.

The judges, all of which must find nothing for a valid run: the workload's own view (every acknowledged
message read back at its offset), `kraftpy check --model kafka` over the history, no node dead on its
own, no poison batch of the hostile client stored, and (unless --no-audit) `kraftpy audit` over the
replicas' files after a graceful stop, each replica holding as many records as were read back.
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

from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.commands.cluster import new_layout, spawn_node, wait_until_healthy, write_node_files
from kraftpy.tools.faults.checks import CHECK_TIMEOUT_S, CheckFailed, run_check, run_verdict
from kraftpy.tools.faults.disk import LoopDisk, boot_id_path, new_boot_id
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.netns import FaultNet, LoopbackNet, enter_namespace
from kraftpy.tools.faults.partitions import CLIENT
from kraftpy.tools.faults.schedule import Schedule, plan_overlapping
from kraftpy.tools.faults.workload import read_all
from kraftpy.tools.faults.workloads import Beside, RunCluster, Workload, WorkloadContext, workload
from kraftpy.tools.faults.workloads.runner import DRAIN_TIMEOUT_S, PREPARE_TIMEOUT_S, WorkloadStats

TOPIC = "faults"
PARTITIONS = 3
RPC_PORT = 19092  # the run's addresses are its own: no other process can hold these ports there
KAFKA_PORT = 9092
CLI_TIMEOUT_S = 90
AUDIT_TIMEOUT_S = 600
START_TIMEOUT_S = 90
RECOVER_TIMEOUT_S = 120
FIRST_ROUND_LIMIT_S = 120  # how long past the time limit the run waits for each nemesis to have run once
SMALL_DISK_MIB = 256  # room for a run's data several times over; disk-full takes what is left
MAX_SENDS_PER_S = 2_000  # bounds the send count however fast the cluster is
# What a run may take beyond its time limit: each phase's own bound (start, the first client, the
# nemeses' first round, the recovery, the drain, the read back and check as CLI calls), and a margin.
# Past it the run is stuck where no timeout of its own can act, and its watchdog ends it (watchdog.py).
RUN_MARGIN_S = 300


def run_bound_s(time_limit_s: float, audit: bool) -> float:
    """The longest a whole `faults run` may take."""
    phases = START_TIMEOUT_S + PREPARE_TIMEOUT_S + FIRST_ROUND_LIMIT_S + RECOVER_TIMEOUT_S + DRAIN_TIMEOUT_S
    return time_limit_s + phases + 3 * CLI_TIMEOUT_S + (AUDIT_TIMEOUT_S if audit else 0) + RUN_MARGIN_S


def kraftpy_cli(*args: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`kraftpy ARGS...` as a subprocess (from the run's client namespace once the run entered it)."""
    return subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *args], capture_output=True, text=True,
        timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip


class CouldNotRun(Exception):
    """The run could not happen (exit 2): the machine, the cluster's start, a stuck recovery, the audit."""


@dataclass
class RunResult:
    seed: int
    network: str = "netns"
    valid: bool | None = None
    faults: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)  # faults the model refused (a lose-tail on the last copy)
    invoked: int = 0
    ok: int = 0
    info: int = 0
    fail: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    allowed: dict[str, int] = field(default_factory=dict)  # reported classes the workload allows, by count
    anomalies: dict[str, Any] = field(default_factory=dict)
    undecided: dict[str, Any] = field(default_factory=dict)  # checks that could decide nothing (valid: None)
    history: Path | None = None
    audit: dict[str, Any] | None = None
    hostile: dict[str, Any] | None = None
    phases_s: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "network": self.network,
            "valid": self.valid,
            "faults": dict(self.faults),
            "skipped": dict(self.skipped),
            "sends": {"invoked": self.invoked, "ok": self.ok, "info": self.info, "fail": self.fail},
            "ops": self.ops,
            "anomalies": self.anomalies,
            "undecided": self.undecided,
            "allowed": self.allowed,
            "audit": None if self.audit is None else {"ok": self.audit["ok"], "findings": self.audit["findings"]},
            "hostile": self.hostile,
            "phases_s": self.phases_s,
        }


@dataclass
class FaultRun:
    out: Path
    seed: int
    time_limit_s: float
    node_count: int
    nemeses: tuple[str, ...]
    rate_per_s: float | None
    say: Callable[[str], None]
    hostile: bool = False
    audit: bool = True
    replay: str = ""
    schedule: str = "one-at-a-time"  # or "overlapping" (schedule.SCHEDULES)
    network: str = "netns"  # or "loopback" (netns.choose_network)
    workload: str = "queue"  # a name in workloads.WORKLOADS
    client: str = "kraftpy"  # kraftpy | confluent
    sub_via: str = "assign"  # assign | subscribe
    lose_tail_unsafe: bool = False  # lose tails without waiting for another clean in-sync copy (the old model)
    net: FaultNet | LoopbackNet = field(init=False)
    layout: ClusterLayout | None = None
    disk: LoopDisk | None = None
    disk_node: int | None = None
    nemesis: Nemesis | None = None
    _t0: float = field(default_factory=time.monotonic)
    _phase_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        net = LoopbackNet if self.network == "loopback" else FaultNet
        self.net = net(f"r{secrets.token_hex(4)}", tuple(range(1, self.node_count + 1)))

    @property
    def spec(self) -> Workload:
        return workload(self.workload)

    def cluster(self) -> RunCluster:
        assert self.layout is not None
        return RunCluster(self.layout, TOPIC, PARTITIONS, self.out, self.client)

    def log(self, message: str) -> None:
        self.say(f"[{time.monotonic() - self._t0:6.1f}s] {message}")

    def phase(self, result: RunResult, name: str) -> None:
        now = time.monotonic()
        result.phases_s[name] = round(now - self._phase_at, 1)
        self._phase_at = now

    # --- the cluster ---------------------------------------------------------------------------------
    cli = staticmethod(kraftpy_cli)

    def start(self, rng: random.Random) -> None:
        self.net.setup()
        if isinstance(self.net, FaultNet):
            self.log(f"network {self.net.run_id}: {self.net.subnet}, namespaces {', '.join(self.net.namespaces())}")
            enter_namespace(self.net.namespace(CLIENT))
        else:
            self.log(f"loopback mode: nodes on {self.net.subnet}, no namespaces, no partitions")
        hosts = ",".join(self.net.address(n) for n in self.net.node_ids)
        namespaces = ",".join(self.net.namespace(n) for n in self.net.node_ids if self.net.namespace(n))
        layout = new_layout(self.out / "cluster", self.node_count, hosts, RPC_PORT, KAFKA_PORT, namespaces)
        self.layout = layout
        if "disk-full" in self.nemeses:  # mounted before the node's directory is formatted
            self.disk_node = rng.choice(self.net.node_ids)
            entry = next(n for n in layout.nodes if n.node_id == self.disk_node)
            self.disk = LoopDisk(layout.data_dir(entry), size_mib=SMALL_DISK_MIB)
            try:
                self.disk.mount()
            except RuntimeError as exc:
                raise CouldNotRun(f"the disk-full nemesis needs a loop-mounted ext4 (root, mkfs.ext4): {exc}") from None
            self.log(f"node {self.disk_node} keeps its data on a {SMALL_DISK_MIB} MiB file system of its own")
        # Each node reads its own boot id file, so lose-tail can reboot one node (docs/jepsen.md, lose-tail).
        boot_ids = {n.node_id: boot_id_path(layout, n) for n in layout.nodes}
        for path in boot_ids.values():
            new_boot_id(path)
        write_node_files(layout, {node: {"boot_id_path": str(path)} for node, path in boot_ids.items()})
        layout.save()
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
        self.nemesis = Nemesis(
            layout, self.net, TOPIC, self.cli, self.log, self.disk, lose_tail_unsafe=self.lose_tail_unsafe
        )

    def in_sync(self) -> bool:
        assert self.layout is not None
        described = self.cli("topics", "describe", TOPIC, "--json", "--dir", str(self.layout.dir))
        if described.returncode != 0:
            return False
        want = min(3, self.node_count)
        return all(len(p["isr"]) == want and p["leader"] >= 0 for p in json.loads(described.stdout)["partitions"])

    # --- the run -------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        result = RunResult(self.seed, self.network)
        rng = random.Random(self.seed)
        self.out.mkdir(parents=True, exist_ok=True)
        self.start(rng)
        self.phase(result, "cluster start")
        assert self.layout is not None and self.nemesis is not None
        result.history = self.out / "history.jsonl"
        history = HistoryWriter(result.history)
        spec = self.spec
        readback = HistoryWriter(self.out / "readback.jsonl") if spec.readback_apart else None
        try:
            if spec.warm_up is not None:
                asyncio.run(spec.warm_up(self.cluster()))
            workers = asyncio.run(self._under_faults(history, rng, result))
            self.phase(result, "workload under faults")
            restarted = self.nemesis.heal_all()
            self.log("healed" + (f"; restarted {restarted}" if restarted else "") + "; waiting for full ISRs")
            deadline = time.monotonic() + RECOVER_TIMEOUT_S
            while not self.in_sync():
                if time.monotonic() > deadline:
                    raise CouldNotRun(f"the ISRs did not recover within {RECOVER_TIMEOUT_S} s after the heal")
                time.sleep(0.5)
            self.phase(result, "ISRs full again")
            self.log("every replica in sync; every consumer drains, then reading everything back")
            asyncio.run(workers.drain())
            seen = asyncio.run(
                read_all(
                    readback or history, self.layout.kafka_bootstrap_servers, TOPIC, PARTITIONS,
                    read_committed=spec.read_committed,
                )
            )  # fmt: skip
            if spec.after_read is not None:
                asyncio.run(spec.after_read(self.cluster(), history))
            self.phase(result, "read back")
        finally:
            history.close()
            if readback is not None:
                readback.close()
        self._judge(result, workers.stats, seen)
        self.phase(result, "kraftpy check")
        self.stop_cluster(graceful=self.audit)  # only the audit needs the final checkpoints
        self.phase(result, "cluster stop")
        if self.audit:
            self._audit(result, seen)
            self.phase(result, "kraftpy audit")
        result.valid = run_verdict(result.anomalies, result.undecided)
        (self.out / "summary.json").write_text(json.dumps({**result.summary(), "replay": self.replay}, indent=2) + "\n")
        from kraftpy.tools.faults.report import write_report

        write_report(self.out, result, self.replay)
        return result

    def _judge(self, result: RunResult, stats: WorkloadStats, seen: dict[int, dict[int, str]]) -> None:
        assert self.nemesis is not None
        assert result.history is not None
        try:
            check = run_check(self.cli, result.history, self.spec.check_args(self.sub_via), CHECK_TIMEOUT_S)
        except CheckFailed as exc:
            raise CouldNotRun(str(exc)) from None
        verdict = check.body
        (self.out / "check.json").write_text(json.dumps(verdict, indent=2) + "\n")
        for anomaly in check.failures:  # by class, as Jepsen reports them; allowed classes do not fail a run
            result.anomalies.setdefault(anomaly["type"], []).append(anomaly)
        if check.valid is False and not result.anomalies:
            result.anomalies["check"] = verdict
        if check.valid is None:
            result.undecided["check"] = check.undecided
        if self.spec.judge is not None:
            judged = self.spec.judge(self.cli, self.out)
            result.anomalies.update(judged.anomalies)
            result.undecided.update(judged.undecided)
        result.allowed = dict(Counter(a["type"] for a in verdict.get("anomalies", []) if not a.get("failure", True)))
        lost = {}
        for partition, acked in stats.acked.items():  # the workload's own view, apart from the checker's
            at = {m: o for o, m in seen[partition].items()}
            moved = sorted(m for m, o in acked.items() if at.get(m) != o)
            if moved:
                lost[partition] = moved[:20]
        if lost:
            result.anomalies["workload-acked-not-read-at-offset"] = lost
        if self.nemesis.died:
            result.anomalies["node-died"] = self.nemesis.died
        if result.hostile and result.hostile["poison_accepted"]:
            result.anomalies["poison-accepted"] = result.hostile["poison_accepted"]

    def _audit(self, result: RunResult, seen: dict[int, dict[int, str]]) -> None:
        assert self.layout is not None and result.history is not None
        self.log("kraftpy audit: the replicas' files (a JVM start takes a while)")
        done = self.cli(
            "audit", "--cluster-dir", str(self.layout.dir), "--history", str(result.history), "--topic", TOPIC,
            "--json", "--html", str(self.out / "audit.html"), timeout_s=AUDIT_TIMEOUT_S,
        )  # fmt: skip
        if done.returncode not in (0, 1):
            raise CouldNotRun(f"kraftpy audit could not run: {done.stderr.strip()[-500:]}")
        audit = json.loads(done.stdout)
        (self.out / "audit.json").write_text(json.dumps(audit, indent=2) + "\n")
        result.audit = audit
        if audit["findings"]:
            result.anomalies["audit"] = audit["findings"][:50]
        records = {(r["topic"], r["partition"], r["node"]): r["records"] for r in audit["replicas"]}
        if self.spec.read_committed:  # the logs also hold aborted records and markers
            return
        short = {
            f"{TOPIC}-{p} node {n}": {"records": records.get((TOPIC, p, n)), "read_back": len(seen[p])}
            for p in range(PARTITIONS)
            for n in self.net.node_ids
            if records.get((TOPIC, p, n)) not in (None, len(seen[p]))
        }
        if short:
            result.anomalies["replica-records"] = short

    async def _under_faults(self, history: HistoryWriter, rng: random.Random, result: RunResult) -> Any:
        assert self.layout is not None and self.nemesis is not None
        workload_rng = random.Random(rng.random())
        workers = self.spec.make(
            WorkloadContext(
                history, self.layout.kafka_bootstrap_servers, TOPIC, PARTITIONS,
                int(self.time_limit_s * MAX_SENDS_PER_S), workload_rng, self.rate_per_s, self.client, self.sub_via,
            )
        )  # fmt: skip
        await workers.prepare()
        end = RunEnd(self.time_limit_s, hard_limit_s=FIRST_ROUND_LIMIT_S)
        schedule_rng = random.Random(rng.random())
        if self.schedule == "overlapping":
            plan = plan_overlapping(
                self.nemeses, self.net.node_ids, schedule_rng, self.time_limit_s, disk_node=self.disk_node,
                partition_count=PARTITIONS,
            )  # fmt: skip
            nemesis_task = self.nemesis.run_overlapping(plan, self.net.node_ids, history, end)
        else:
            schedule = Schedule(
                self.nemeses, self.net.node_ids, schedule_rng, disk_node=self.disk_node, partition_count=PARTITIONS
            )
            nemesis_task = self.nemesis.run(schedule, history, end)
        tasks: dict[str, Any] = {
            "workers": workers.run(end),
            "nemesis": nemesis_task,
            "progress": self._progress(end, history),
        }
        if self.spec.beside is not None:  # the workload's own processes: group members, register clients
            tasks["beside"] = self.spec.beside(Beside(self.cluster(), history, end, random.Random(rng.random())))
        if self.hostile:
            from kraftpy.tools.faults.hostile import HostileClient

            nodes = {n.node_id: (n.host, n.port) for n in self.layout.nodes}
            kafka = {n.node_id: (n.host, n.kafka_port) for n in self.layout.nodes if n.kafka_port}
            hostile = HostileClient(nodes, kafka, self.layout.cluster_id, TOPIC, random.Random(rng.random()))
            tasks["hostile"] = hostile.run(end)
        found = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
        stats: WorkloadStats = found["workers"]
        result.faults = Counter(self.nemesis.done)
        result.skipped = Counter(self.nemesis.skipped)
        if "hostile" in found:
            result.hostile = found["hostile"].summary()
        result.faults.update(found.get("beside") or {})
        result.invoked, result.ok, result.info, result.fail = stats.invoked, stats.ok, stats.info, stats.fail
        result.ops = dict(sorted(stats.ops.items()))
        return workers

    async def _progress(self, end: RunEnd, history: HistoryWriter) -> None:
        assert self.nemesis is not None
        while not end.passed():
            await asyncio.sleep(5)
            self.log(f"history: {history.events} events; faults so far: {dict(self.nemesis.done) or 'none'}")

    def stop_cluster(self, *, graceful: bool = True) -> None:
        """Graceful (every replica checkpoints its final high watermark, which the audit reads), then SIGKILL."""
        if self.layout is None:
            return
        if self.nemesis is not None:
            self.nemesis.close()
        if graceful:
            with contextlib.suppress(Exception):
                self.cli("cluster", "stop", "--dir", str(self.layout.dir), "--timeout-ms", "10000")
        for entry in self.layout.nodes:
            pid = self.layout.read_pid(entry)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop every node, release the small disk, then remove the network."""
        try:
            self.stop_cluster()
            if self.disk is not None:
                self.disk.close()
        finally:
            self.net.teardown()
