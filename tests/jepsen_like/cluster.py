"""A 3-node cluster of real `kraftpy server` processes, each on its own 127.0.0.x, and the faults done to it.

Started as a user would (`kraftpy cluster start --host 127.0.0.2,127.0.0.3,127.0.0.4`,
through tests/integration's LocalCluster, which also stops it: `cluster stop`
then SIGKILL by pid). The faults:

- kill: SIGKILL a node's process; restart: spawn it again exactly as `cluster start` does.
- pause / resume: SIGSTOP / SIGCONT.
- isolate / heal: a blackhole route for the node's address in the kernel's local routing
  table (`ip route add blackhole 127.0.0.3/32 table local`). Nothing can reach the node any
  more: new connections fail, established ones go silent. The node's own outgoing
  connections leave from 127.0.0.1 and still work, so this is Jepsen's asymmetric
  partition (inbound isolation). It needs CAP_NET_ADMIN and the `ip` tool;
  `partition_supported()` says whether this machine allows it (docs/jepsen.md).

Everything started or changed is undone in `close()`, by pid and by route.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from kraftpy.tools.cluster_cmd import spawn_node
from kraftpy.tools.cluster_layout import NodeEntry
from tests.integration.test_cluster_support import LocalCluster, wait_for

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
IP_TIMEOUT_S = 10


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _blackhole(host: str, add: bool) -> bool:
    return _ip("route", "add" if add else "del", "blackhole", f"{host}/32", "table", "local").returncode == 0


def partition_supported() -> tuple[bool, str]:
    """Whether isolate() works here: the `ip` tool exists and may change routes (tried on an unused address)."""
    if shutil.which("ip") is None:
        return False, "the `ip` tool is not installed"
    probe = "127.0.0.254"
    if not _blackhole(probe, True):
        return False, "cannot add a route (needs root / CAP_NET_ADMIN)"
    _blackhole(probe, False)
    return True, "blackhole routes in the local table"


class JepsenCluster(LocalCluster):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, nodes=len(HOSTS))
        self.paused: set[int] = set()
        self.isolated: set[int] = set()
        for host in HOSTS:  # a route left behind by an earlier run that was killed
            _blackhole(host, False)

    def start_cluster(self) -> None:
        self.start("--host", ",".join(HOSTS))

    @property
    def bootstrap(self) -> str:
        return self.layout().bootstrap_servers

    def entry(self, node_id: int) -> NodeEntry:
        return next(n for n in self.layout().nodes if n.node_id == node_id)

    def restart(self, node_id: int) -> int:
        """Start a killed node again, as `cluster start` would (without waiting for health)."""
        layout = self.layout()
        assert layout.read_pid(self.entry(node_id)) is None, f"node {node_id} is still running"
        return spawn_node(layout, self.entry(node_id))

    def pause(self, node_id: int) -> None:
        pid = self.pid(node_id)
        assert pid is not None, f"node {node_id} is not running"
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        pid = self.pid(node_id)
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        self.paused.discard(node_id)

    def listening(self, node_id: int) -> bool:
        entry = self.entry(node_id)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            return s.connect_ex((entry.host, entry.port)) == 0

    def isolate(self, node_id: int) -> None:
        """Cut the node off. A node still starting must have bound its address first: under a blackhole
        route the address is not local any more, and its bind would fail (an artifact, not a fault)."""
        wait_for(f"node {node_id} listening before isolating it", lambda: self.listening(node_id), timeout_s=30)
        assert _blackhole(self.entry(node_id).host, True), f"cannot isolate node {node_id}"
        self.isolated.add(node_id)

    def heal(self, node_id: int) -> None:
        _blackhole(self.entry(node_id).host, False)
        self.isolated.discard(node_id)

    def heal_all(self) -> list[int]:
        """Undo every fault; start any node whose process is gone. Returns the nodes started."""
        for node_id in list(self.paused):
            self.resume(node_id)
        for node_id in list(self.isolated):
            self.heal(node_id)
        layout = self.layout()
        dead = [n.node_id for n in layout.nodes if layout.read_pid(n) is None]
        for node_id in dead:
            self.restart(node_id)
        return dead

    def close(self) -> None:
        """Undo every fault, then stop every node (gracefully, SIGKILL by pid after the timeout)."""
        with contextlib.suppress(Exception):
            self.heal_all()
        for host in HOSTS:
            _blackhole(host, False)
        self.stop()
