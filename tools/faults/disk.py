"""Disk faults of a fault run: a node's data directory on a small disk that can be filled, and power loss.

`LoopDisk` puts one node's data directory on its own loop-mounted ext4 (real fsync), so `fill()`
makes that node alone see ENOSPC and `free()` ends it. `cut_unsynced_tail` is what a power loss
does to a SIGKILLed node: partitions flush only on segment roll (as Kafka), so the active segment
is cut at a random position above the recovery point; the Raft log fsyncs every entry, so only a
torn copy of an append in flight is left there; `new_boot_id` gives the node the new kernel boot id
a reboot would (its `boot_id_path`). `stopped_by_full_disk` tells a node that stopped itself at start
on its full disk (a clean stop) from one that died. Details: docs/jepsen.md.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from kraftpy.broker.shell.log_manager import PARTITIONS_DIR
from kraftpy.storage import layout as storage_layout
from kraftpy.storage.checkpoints import read_checkpoint
from kraftpy.storage.scan import BatchSpan, CorruptSegmentError, walk_headers
from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry

CMD_TIMEOUT_S = 30
METADATA_DIR = "__cluster_metadata-0"
# What `kraftpy server` prints when it cannot start on a full disk (node/start_errors.py), and what
# node/process.py logs once a start is done.
FULL_DISK_AT_START = "Error: no space left on the device holding "
SERVING_MARK = " serving on "
BOOT_ID_FILE = "boot_id"


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT_S)


def loop_disk_supported() -> tuple[bool, str]:
    """Whether a loop-mounted ext4 can be made here (root, mkfs.ext4, a free loop device)."""
    if shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        return False, "mkfs.ext4 or mount is missing"
    probe = LoopDisk(Path(f"/tmp/kraftpy-loop-probe-{os.getpid()}"), size_mib=8)
    try:
        probe.mount()
    except RuntimeError as exc:
        return False, str(exc)
    finally:
        probe.close()
    return True, "ext4 in a loop-mounted image"


class LoopDisk:
    """A small ext4 file system mounted at `mount_point`; the image lives beside it."""

    def __init__(self, mount_point: Path, *, size_mib: int) -> None:
        self.mount_point = mount_point
        self.image = mount_point.with_name(mount_point.name + ".img")
        self.size_mib = size_mib
        self.mounted = False
        self._filler = mount_point / ".disk-full-filler"

    def mount(self) -> None:
        self.mount_point.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as f:
            f.truncate(self.size_mib * 1024 * 1024)
        # -m 0: no blocks reserved for root (the nodes run as root and would fill those too)
        for cmd in (
            ("mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)),
            ("mount", "-o", "loop", str(self.image), str(self.mount_point)),
        ):
            done = _run(*cmd)
            if done.returncode != 0:
                raise RuntimeError(f"{cmd[0]} failed: {done.stderr.strip()}")
        self.mounted = True
        (self.mount_point / "lost+found").rmdir()  # the node would take it for a partition directory

    def fill(self) -> int:
        """Take every free byte; returns how many were taken."""
        free = shutil.disk_usage(self.mount_point).free
        with self._filler.open("ab") as f:
            with contextlib.suppress(OSError):
                os.posix_fallocate(f.fileno(), 0, free)
            chunk = b"\0" * 4096
            try:  # fallocate leaves the odd block; write until the file system says no
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        return free - shutil.disk_usage(self.mount_point).free

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.mounted:
            self.free()
            done = _run("umount", str(self.mount_point))
            if done.returncode != 0:  # a process still holds a file: detach lazily rather than leak the mount
                _run("umount", "-l", str(self.mount_point))
            self.mounted = False
        self.image.unlink(missing_ok=True)


@dataclass(frozen=True)
class Cut:
    """What a power loss did to one file: the bytes from `at` to `was` lost, then `torn_bytes` of a torn append."""

    path: Path
    at: int
    was: int
    torn_bytes: int = 0

    def describe(self) -> dict[str, object]:
        return {
            "file": f"{self.path.parent.name}/{self.path.name}",
            "cut_at": self.at,
            "lost_bytes": self.was - self.at,
            "torn_bytes": self.torn_bytes,
        }


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))


def _spans(segment: Path) -> list[BatchSpan]:
    """The whole batches at the start of a segment (a torn tail left by the kill itself ends the walk)."""
    spans: list[BatchSpan] = []
    with segment.open("rb") as f, contextlib.suppress(CorruptSegmentError):
        spans.extend(walk_headers(f.fileno(), 0, os.fstat(f.fileno()).st_size))
    return spans


def unsynced_start(partition_dir: Path) -> tuple[Path, int] | None:
    """The active segment and the first byte of it above the recovery point (None without a segment)."""
    segments = _segments(partition_dir)
    if not segments:
        return None
    active = segments[-1]
    entries = read_checkpoint(partition_dir / storage_layout.RECOVERY_POINT_CHECKPOINT, 1)
    recovery_point = entries[0][0] if entries else 0
    position = 0
    for span in _spans(active):
        if span.last_offset >= recovery_point:
            break
        position = span.end
    return active, position


def cut_partition_tail(partition_dir: Path, rng: random.Random) -> Cut | None:
    """Cut the active segment at a random byte above the recovery point."""
    found = unsynced_start(partition_dir)
    if found is None:
        return None
    segment, start = found
    size = segment.stat().st_size
    if size <= start:
        return None
    at = rng.randrange(start, size)
    os.truncate(segment, at)
    return Cut(segment, at, size)


def tear_raft_tail(data_dir: Path, rng: random.Random) -> Cut | None:
    """Leave a torn copy of the Raft log's last batch at its end (an append cut off by the power loss)."""
    segments = _segments(data_dir / METADATA_DIR)
    if not segments:
        return None
    active = segments[-1]
    spans = _spans(active)
    if not spans:
        return None
    last = spans[-1]
    with active.open("rb") as f:
        f.seek(last.position)
        batch = f.read(last.size)
    torn = batch[: rng.randrange(1, len(batch))]
    # right after the last whole batch: the file may run on past it (preallocated space, zeros)
    with active.open("r+b") as f:
        f.seek(last.end)
        f.write(torn)
    return Cut(active, last.end, last.end, torn_bytes=len(torn))


def partition_dirs(data_dir: Path, topic: str) -> list[tuple[int, Path]]:
    """The partitions of `topic` a node's data directory holds, with their directories, by partition."""
    found = []
    for d in (data_dir / PARTITIONS_DIR).glob(f"{topic}-*"):
        number = d.name.removeprefix(f"{topic}-")
        if d.is_dir() and number.isdigit():
            found.append((int(number), d))
    return sorted(found)


def cut_unsynced_tails(data_dir: Path, topic: str, rng: random.Random) -> list[Cut]:
    """Power loss on a stopped node: one random partition of `topic` loses its unsynced tail, the Raft log
    a torn append. Returns what was cut (an empty cut means the random position was the end)."""
    partitions = [d for _, d in partition_dirs(data_dir, topic)]
    cuts = []
    if partitions:
        cut = cut_partition_tail(rng.choice(partitions), rng)
        if cut is not None:
            cuts.append(cut)
    torn = tear_raft_tail(data_dir, rng)
    if torn is not None:
        cuts.append(torn)
    return cuts


def boot_id_path(layout: ClusterLayout, entry: NodeEntry) -> Path:
    """A node's stand-in for /proc/sys/kernel/random/boot_id: in its node folder, off its (maybe small) disk."""
    return layout.node_dir(entry) / BOOT_ID_FILE


def new_boot_id(path: Path) -> str:
    """Write a fresh boot id (uuid4) to `path`, replacing the old one whole: what a reboot does to the node."""
    boot_id = str(uuid.uuid4())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(boot_id + "\n")
    os.replace(tmp, path)
    return boot_id


def stopped_by_full_disk(log_since_start: str) -> str | None:
    """The start-up error line when a node stopped itself at start on its full disk, else None.

    Under load a start takes seconds, so a disk-full fault often fills the disk while the node is
    still starting (the heal of the fault before restarted it). The node then exits with one line
    (node/start_errors.py), as a Kafka broker shuts down when its metadata log dir fails; the heal
    frees the disk and starts it again, as an operator would. A node that was serving first, or that
    stopped with anything else, died.
    """
    lines = [line for line in log_since_start.splitlines() if line.strip()]
    if not lines or not lines[-1].startswith(FULL_DISK_AT_START):
        return None
    if any(SERVING_MARK in line for line in lines):
        return None
    return lines[-1]
