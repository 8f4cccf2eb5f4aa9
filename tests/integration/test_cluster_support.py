"""Helpers for the cluster integration tests (no tests here): real `kraftpy` processes on 127.0.0.1.

`LocalCluster` drives the CLI exactly as a user does (`python -m
kraftpy.tools.cli ...` in a subprocess, so every call also tests argument
parsing, output and exit codes), reads node status over `/admin/status`, and
always cleans up: `cluster stop`, then SIGKILL by pid for any node process
still alive (only the pids its own pid files name).

Every wait is a bounded poll (`wait_for`) that fails with what it last saw;
no test asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.shell.credential_files import load_credential
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.tools.cluster_layout import ClusterLayout, process_is_node
from tests.ports import PortReservation

T = TypeVar("T")
CLI_TIMEOUT_S = 90


@dataclass
class CliResult:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return f"kraftpy {' '.join(self.args)} -> {self.code}\nstdout: {self.stdout}\nstderr: {self.stderr}"


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30, interval_s: float = 0.2) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # a probe may hit a node that is restarting
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        time.sleep(interval_s)


class LocalCluster:
    def __init__(self, directory: Path, nodes: int = 3) -> None:
        self.dir = directory
        self.nodes = nodes
        # Held while this object lives: a restart finds its ports still free.
        self._ports = (PortReservation(nodes, consecutive=True), PortReservation(nodes, consecutive=True))
        for reservation in self._ports:
            weakref.finalize(self, reservation.release)
        self.base_port, self.kafka_base_port = (r.ports[0] for r in self._ports)
        self.env = {**os.environ, "KRAFTPY_DIR": str(directory), "COLUMNS": "200"}

    # --- the CLI ---------------------------------------------------------------------------------
    def cli(self, *args: str, timeout_s: float = CLI_TIMEOUT_S) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "kraftpy.tools.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(tuple(args), proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str) -> CliResult:
        result = self.cli(*args)
        assert result.code == 0, str(result)
        return result

    def start(self, *extra: str) -> CliResult:
        return self.ok(
            "cluster", "start", "--nodes", str(self.nodes), "--dir", str(self.dir),
            "--base-port", str(self.base_port), "--kafka-base-port", str(self.kafka_base_port), *extra,
        )  # fmt: skip

    def __enter__(self) -> LocalCluster:
        """`with LocalCluster(d) as c:` starts it and always stops it (module fixtures use this)."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """`cluster stop`, then SIGKILL whatever node process is left (by its pid file)."""
        with contextlib.suppress(Exception):
            self.cli("cluster", "stop", "--dir", str(self.dir), "--timeout-s", "10")
        with contextlib.suppress(Exception):
            layout = self.layout()
            for entry in layout.nodes:
                pid = layout.read_pid(entry)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)

    def layout(self) -> ClusterLayout:
        return ClusterLayout.load(self.dir)

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' Kafka listeners, as Kafka clients take them ("127.0.0.1:p1,127.0.0.1:p2,...")."""
        return self.layout().kafka_bootstrap_servers

    def credential(self, name: str = "admin") -> Credential:
        """A credential `cluster start` made: "admin" (role admin) or "node" (role cluster)."""
        return load_credential(self.layout().secrets_dir / f"{name}.credential")

    # --- nodes -----------------------------------------------------------------------------------
    def pid(self, node_id: int) -> int | None:
        layout = self.layout()
        return layout.read_pid(next(n for n in layout.nodes if n.node_id == node_id))

    def kill(self, node_id: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal one node (SIGKILL; SIGTERM stops it gracefully) and wait (bounded) until its process is gone."""
        layout = self.layout()
        entry = next(n for n in layout.nodes if n.node_id == node_id)
        pid = layout.read_pid(entry)
        assert pid is not None, f"node {node_id} is not running"
        os.kill(pid, sig)
        wait_for(f"node {node_id} (pid {pid}) to die", lambda: not process_is_node(pid, layout.config_path(entry)))

    def bring_back(self, timeout_s: float = 90) -> None:
        """Start every stopped node, then put leadership back where it was before a node was killed.

        Waits (bounded) until every partition, the internal topics' included, has its whole replica set
        in its ISR, then elects the preferred leaders at once. Otherwise the controller moves them back
        itself `preferred_leader_election_delay_ms` later, and the group and transaction coordinators
        with them: under the next test, whose client then meets NOT_COORDINATOR (a LeaveGroup that
        fails so leaves its member in the group until the session times out).
        """
        self.start()

        def partitions() -> list[dict[str, Any]]:
            return [p for t in self.ok("topics", "describe", "--json").json()["topics"] for p in t["partitions"]]

        def in_sync() -> bool | None:
            return all(sorted(p["isr"]) == sorted(p["replicas"]) for p in partitions()) or None

        wait_for("every replica back in its partition's ISR", in_sync, timeout_s=timeout_s)
        self.ok("topics", "elect-leaders", "--type", "preferred")

        def preferred() -> bool | None:
            return all(p["leader"] == p["replicas"][0] for p in partitions()) or None

        wait_for("every partition led by its preferred replica", preferred, timeout_s=timeout_s)

    def status(self, node_id: int) -> dict[str, Any] | None:
        entry = next(n for n in self.layout().nodes if n.node_id == node_id)

        async def fetch() -> dict[str, Any] | None:
            client = RpcClient(request_timeout_ms=1000)
            try:
                return await client.call((entry.host, entry.port), "/admin/status", {})
            except Exception:
                return None
            finally:
                await client.close()

        return asyncio.run(fetch())

    def health(self) -> dict[str, Any]:
        return self.cli("cluster", "status", "--json").json()

    def controller_id(self) -> int:
        """The active controller (the quorum leader every live controller agrees on)."""

        def probe() -> int | None:
            health = self.health()
            return health["controller"]["leader_id"] if health["healthy"] else None

        return wait_for("a healthy cluster with a controller", probe)

    def describe(self, topic: str) -> dict[str, Any]:
        return self.ok("topics", "describe", topic, "--json").json()

    def start_with(self, settings: dict[str, int]) -> None:
        """`cluster start`, then every node restarted with `settings` in its node.toml (what `cluster start`
        writes, plus the settings a test shortens: intervals, snapshot sizes)."""
        self.start()
        self.ok("cluster", "stop", "--dir", str(self.dir))
        for key, value in settings.items():
            self.write_setting(key, value)
        self.start()

    def write_setting(self, key: str, value: int | str, node_ids: Iterable[int] | None = None) -> None:
        """Set a setting in every node's config, or in `node_ids`' (takes effect at the nodes' next start).

        `value` is written as a TOML literal: a string value brings its own quotes."""
        wanted = None if node_ids is None else set(node_ids)
        for entry in self.layout().nodes:
            if wanted is not None and entry.node_id not in wanted:
                continue
            path = self.layout().config_path(entry)
            lines = [line for line in path.read_text().splitlines() if not line.startswith(f"{key} =")]
            path.write_text("\n".join([*lines, f"{key} = {value}"]) + "\n")

    def log_text(self, node_id: int) -> str:
        entry = next(n for n in self.layout().nodes if n.node_id == node_id)
        return self.layout().log_path(entry).read_text(errors="replace")


FAILURE_LOG_TAIL_BYTES = 8_000
SIGNAL_STATUS_FIELDS = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def hung_process_report(pid: int) -> str:
    """What a process that did not stop when told is doing: its state and signal masks from /proc (a SIGINT
    pending but blocked or ignored shows there), then its Python stacks if py-spy is installed."""
    lines = []
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        lines += [line for line in status.splitlines() if line.startswith(SIGNAL_STATUS_FIELDS)]
    except OSError as exc:
        lines.append(f"no /proc/{pid}/status: {exc}")
    spy = shutil.which("py-spy")
    if spy is not None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            lines.append(dump.stdout[-6000:] or dump.stderr[-500:])
    return "\n".join(lines)


def failure_log_sections(fixtures: Iterable[object]) -> list[tuple[str, str]]:
    """The end of each node's log, for every LocalCluster among a failed test's fixtures: a module's cluster
    outlives the test, but its temporary directory does not outlive the next runs (a post-mortem needs it now)."""
    sections = []
    for value in fixtures:
        if not isinstance(value, LocalCluster):
            continue
        try:
            layout = value.layout()
        except Exception:  # never started: nothing to show
            continue
        for entry in layout.nodes:
            path = layout.log_path(entry)
            try:
                tail = path.read_bytes()[-FAILURE_LOG_TAIL_BYTES:]
            except OSError:
                continue
            title = f"node {entry.node_id}: the last {len(tail)} bytes of {path}"
            sections.append((title, tail.decode(errors="replace")))
    return sections
