"""A node that meets its full disk while it starts stops itself cleanly; the fault run must not call that a death.

Found by `kraftpy faults run --nemesis disk --seed 105` (docs/jepsen.md): the heal of a disk-full fault
restarts the node, a start takes seconds under load, and the next disk-full fault filled the disk while
the node was still starting. The node exits with its one-line start error (node/start_errors.py), as a
Kafka broker shuts down when its metadata log dir fails, and the run reported `node-died`.
Real processes on a real loop-mounted ext4 (root only; skipped where it cannot be mounted).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry
from kraftpy.tools.commands.cluster import new_layout, spawn_node, write_node_files
from kraftpy.tools.faults.disk import LoopDisk, loop_disk_supported, stopped_by_full_disk
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.netns import FaultNet, supported
from kraftpy.tools.faults.run import KAFKA_PORT, RPC_PORT
from kraftpy.tools.faults.schedule import Fault
from tests.conftest import FAULT_NET_GROUP
from tests.integration.test_start_errors import formatted, start_node
from tests.ports import reserved_ports

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(FAULT_NET_GROUP)]  # namespaces: with the fault runs
EXIT_TIMEOUT_S = 120  # a node that cannot start exits by itself; this only bounds a hang


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[LoopDisk]:
    ok, why = loop_disk_supported()
    if not ok:
        pytest.skip(f"no loop-mounted ext4 here: {why}")
    disk = LoopDisk(tmp_path / "disk", size_mib=32)
    disk.mount()
    try:
        yield disk
    finally:
        disk.close()


def test_a_node_starting_on_its_full_disk_stopped_itself_and_did_not_die(small_disk: LoopDisk) -> None:
    data_dir = formatted(small_disk.mount_point / "data")
    assert small_disk.fill() > 0
    with reserved_ports(1) as (port,):
        proc = start_node(data_dir, port)
    assert proc.returncode == 1, proc.stderr
    log = proc.stdout + proc.stderr  # the fault run sends both to server.log
    line = stopped_by_full_disk(log)
    assert line is not None, log
    assert line.startswith("Error: no space left on the device holding ") and str(data_dir) in line, line


def stuck(layout: ClusterLayout, entry: NodeEntry) -> str:
    """What a node that did not stop was doing: its log, its kernel state and its Python stacks."""
    pid = layout.read_pid(entry)
    out = [f"server.log: {layout.log_path(entry).read_text(errors='replace')[-3000:]!r}"]
    if pid is not None:
        for name in ("status", "wchan", "stack"):
            with contextlib.suppress(OSError):
                out.append(f"/proc/{pid}/{name}: {Path(f'/proc/{pid}/{name}').read_text(errors='replace')[:2000]}")
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            out.append(f"py-spy dump: {dump.stdout[-4000:]}{dump.stderr[-1000:]}")
    return "\n".join(out)


def test_the_disk_full_heal_restarts_a_node_its_full_disk_stopped_at_start(tmp_path: Path) -> None:
    """The nemesis as in a run (own namespace, small disk): before, the heal reported `died: [1]`."""
    for ok, why in (supported(), loop_disk_supported()):
        if not ok:
            pytest.skip(why)
    net = FaultNet(f"t{secrets.token_hex(4)}", (1,))
    net.setup()
    disk: LoopDisk | None = None
    nemesis: Nemesis | None = None
    try:
        layout = new_layout(tmp_path / "cluster", 1, net.address(1), RPC_PORT, KAFKA_PORT, net.namespace(1))
        entry = layout.nodes[0]
        disk = LoopDisk(layout.data_dir(entry), size_mib=32)
        disk.mount()
        write_node_files(layout)
        layout.save()
        disk.fill()
        spawn_node(layout, entry)  # the restart of the heal before, meeting the disk-full fault that follows
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while layout.read_pid(entry) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert layout.read_pid(entry) is None, f"the node did not stop on its full disk\n{stuck(layout, entry)}"
        nemesis = Nemesis(layout, net, "faults", cli=lambda *a: None, log=lambda m: None, disk=disk)  # type: ignore[arg-type]
        healed = nemesis.heal(Fault("disk-full", 1, frozenset(), hold_s=0, quiet_s=0))
        assert nemesis.died == [], nemesis.died
        assert healed["restarted"] == [1] and "died" not in healed, healed
        assert healed["stopped_by_full_disk"][1].startswith("Error: no space left on the device holding "), healed
    finally:
        if nemesis is not None and (pid := nemesis.pid(1)) is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + EXIT_TIMEOUT_S
            while nemesis.pid(1) is not None and time.monotonic() < deadline:
                time.sleep(0.1)
        if disk is not None:
            disk.close()
        net.teardown()


NODE_SERVED = "2026-11-27 01:49:12,822 INFO [node 3] kraftpy.node.process: node 3 serving on 10.207.77.13:19094"
FULL_DISK = (
    "Error: no space left on the device holding /d/node-3/data/__cluster_metadata-0 (No space left on device): "
    "free space there or move data_dir (/d/node-3/data) to a larger disk, then start the node again"
)


@pytest.mark.parametrize(
    ("log", "stopped"),
    [
        (f"WARNING recovered\n{FULL_DISK}\n", True),
        (f"{NODE_SERVED}\n{FULL_DISK}\n", False),  # it was serving: a full disk must not stop a running node
        (f"{NODE_SERVED}\nTraceback (most recent call last):\n  ...\nOSError: [Errno 5] I/O error\n", False),
        ("", False),  # killed before it logged anything: not the full disk's doing
    ],
)
def test_only_a_stop_at_start_on_a_full_disk_is_expected(log: str, stopped: bool) -> None:
    assert (stopped_by_full_disk(log) is not None) is stopped
