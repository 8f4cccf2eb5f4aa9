"""`kraftpy server` that cannot start says why in one line, names the file or directory, exits 1 (issue 11 §9).

Real processes on real files: a snapshot store made by SnapshotStore and then
damaged on disk; a data directory on a 1 MiB tmpfs that is full (root only:
skipped when this process cannot mount one); a port someone else holds.
Before: a raw MDB_CORRUPTED traceback, and "cannot serve on HOST:PORT:
[Errno 28]" for a full disk (every OSError was taken for a listen error).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftpy.node import meta_properties
from kraftpy.protocol.shell.credential_files import create_cluster_secrets
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR
from kraftpy.raft.shell.snapshot_store import DIR_NAME, SnapshotStore
from tests.ports import reserved_ports

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 120  # a node that fails at start exits by itself; this only bounds a hang


def formatted(data_dir: Path) -> Path:
    """A data dir as `kraftpy storage format` leaves it, with the cluster's credentials beside it."""
    meta_properties.write(data_dir, meta_properties.MetaProperties(meta_properties.random_cluster_id(), 1))
    create_cluster_secrets(secrets_of(data_dir))
    return data_dir


def secrets_of(data_dir: Path) -> Path:
    return data_dir.parent / f"{data_dir.name}-secrets"


def start_node(data_dir: Path, port: int, *settings: str) -> subprocess.CompletedProcess[str]:
    extra = [arg for setting in settings for arg in ("--set", setting)]
    return subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "server", "--node-id", "1", "--roles", "broker,controller",
         "--voters", f"1@127.0.0.1:{port}", "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(data_dir), "--set", f"secrets_dir={secrets_of(data_dir)}", *extra],
        capture_output=True, text=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def the_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_a_damaged_snapshot_store_is_one_line_naming_it(tmp_path: Path) -> None:
    data_dir = formatted(tmp_path / "data")
    store_dir = data_dir / METADATA_LOG_DIR / DIR_NAME
    store = SnapshotStore(store_dir)
    store.create(OffsetAndEpoch(3, 1), b"metadata image" * 50)
    store.close()
    data = store_dir / "data.mdb"
    raw = bytearray(data.read_bytes())
    raw[8192:] = os.urandom(len(raw) - 8192)  # the pages after LMDB's two meta pages
    data.write_bytes(bytes(raw))
    with reserved_ports(1) as (port,):
        line = the_error_line(start_node(data_dir, port))
    assert str(store_dir) in line and "damaged" in line and "move that directory aside" in line, line


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_a_full_disk_at_start_is_one_line_naming_the_file(tiny_tmpfs: Path) -> None:
    data_dir = formatted(tiny_tmpfs / "data")
    with contextlib.suppress(OSError), open(tiny_tmpfs / "filler", "wb") as filler:
        while True:  # until ENOSPC
            filler.write(bytes(65536))
            filler.flush()
    with reserved_ports(1) as (port,):
        line = the_error_line(start_node(data_dir, port))
    assert "no space left on the device holding" in line and str(data_dir) in line, line
    assert "cannot serve on" not in line and "cannot listen on" not in line, line


@contextlib.contextmanager
def listening_on(port: int) -> Iterator[None]:
    """Another server on a reserved port (SO_REUSEADDR, as the reservation lets through)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        yield


def test_a_port_in_use_is_one_line_naming_the_address(tmp_path: Path) -> None:
    data_dir = formatted(tmp_path / "data")
    with reserved_ports(1) as (port,), listening_on(port):
        line = the_error_line(start_node(data_dir, port))
    assert f"cannot listen on 127.0.0.1:{port}" in line and "address already in use" in line, line


def test_a_kafka_listener_port_in_use_is_one_line_naming_the_listener(tmp_path: Path) -> None:
    data_dir = formatted(tmp_path / "data")
    with reserved_ports(2) as (port, kafka_port), listening_on(kafka_port):
        line = the_error_line(start_node(data_dir, port, f"listeners=PLAINTEXT://127.0.0.1:{kafka_port}"))
    assert f"cannot listen on 127.0.0.1:{kafka_port}" in line and "address already in use" in line, line
    assert "listeners" in line, line
