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

- lose_tail: SIGKILL, then what a power loss does to the unsynced tails (disk.py), then a
  restart at once: the restarted node must never lead or be a truncation source with the
  shorter log while an in-sync replica holds the acknowledged data.
- fill_disk / free_disk: the node given `small_disk_node` keeps its data directory on a small
  ext4 of its own (disk.py), which the fault fills to the last byte. The heal frees it and
  restarts the node gracefully, as an operator does in Kafka after a log directory failed
  (its partitions stay offline until then); the node must not die of the full disk itself.

Everything started or changed is undone in `close()`, by pid and by route; the small disk in
`release_disk()`, once the audit has read it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from kraftpy.tools.cluster_layout import NodeEntry, process_is_node
from kraftpy.tools.commands.cluster import spawn_node
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.jepsen_like.disk import Cut, LoopDisk, cut_unsynced_tails

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
IP_TIMEOUT_S = 10
GRACEFUL_STOP_S = 30
SMALL_DISK_MIB = 256  # room for a CI run's data several times over; the fault takes what is left


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _blackhole(host: str, add: bool) -> bool:
    return _ip("route", "add" if add else "del", "blackhole", f"{host}/32", "table", "local").returncode == 0


def wait_for_exit(pid: int, config_path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_is_node(pid, config_path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


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
    def __init__(self, directory: Path, *, small_disk_node: int | None = None) -> None:
        super().__init__(directory, nodes=len(HOSTS))
        self.paused: set[int] = set()
        self.isolated: set[int] = set()
        self.small_disk_node = small_disk_node
        self.disk: LoopDisk | None = None
        for host in HOSTS:  # a route left behind by an earlier run that was killed
            _blackhole(host, False)

    def start_cluster(self) -> None:
        if self.small_disk_node is not None:  # mounted before `cluster start` formats the directory
            self.disk = LoopDisk(self.dir / f"node-{self.small_disk_node}" / "data", size_mib=SMALL_DISK_MIB)
            self.disk.mount()
        self.start("--host", ",".join(HOSTS))

    @property
    def bootstrap(self) -> str:
        return self.layout().kafka_bootstrap_servers

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

    def lose_tail(self, node_id: int, topic: str, rng: random.Random) -> list[Cut]:
        """SIGKILL, cut the unsynced tails as a power loss would, restart at once."""
        self.kill(node_id)
        cuts = cut_unsynced_tails(self.layout().data_dir(self.entry(node_id)), topic, rng)
        self.restart(node_id)
        return cuts

    def fill_disk(self, node_id: int) -> int:
        assert self.disk is not None and node_id == self.small_disk_node, f"node {node_id} has no small disk"
        return self.disk.fill()

    def free_disk(self) -> None:
        if self.disk is not None:
            self.disk.free()

    def restart_gracefully(self, node_id: int) -> None:
        """SIGTERM, wait (bounded) for the exit, start again: Kafka's procedure after a log directory failed
        (its partitions stay offline until the broker restarts)."""
        pid = self.pid(node_id)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            layout = self.layout()
            entry = self.entry(node_id)
            if not wait_for_exit(pid, layout.config_path(entry), GRACEFUL_STOP_S):
                self.kill(node_id)
        self.restart(node_id)

    def heal_all(self) -> list[int]:
        """Undo every fault; start any node whose process is gone. Returns the nodes started."""
        self.free_disk()
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

    def release_disk(self) -> None:
        """Unmount the small disk: after the audit has read the files on it."""
        if self.disk is not None:
            self.disk.close()
