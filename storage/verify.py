"""Checking a node's data directory offline, for `kraftpy log verify`: every batch, index entry and checkpoint.

Design notes: docs/on-disk-format.md, section "storage/verify.py".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kraftpy.storage import layout
from kraftpy.storage.inspection import IndexFileReader, read_checkpoint_file
from kraftpy.storage.scan import ValidatingScan
from kraftpy.storage.validation import hard_max_batch_bytes

PARTITIONS_DIR = "partitions"  # log_manager.PARTITIONS_DIR (the broker package sits above storage)
METADATA_LOG_DIR = "__cluster_metadata-0"  # raft.durable_log.METADATA_LOG_DIR


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    position: int | None  # byte position in the file, when one is known
    message: str

    def __str__(self) -> str:
        where = f" at byte {self.position}" if self.position is not None else ""
        return f"{self.path}{where}: {self.message}"


@dataclass
class Report:
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    log_bytes: int = 0
    index_entries: int = 0
    checkpoints: int = 0
    problems: list[Problem] = field(default_factory=list)


def _segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.iterdir():
        parsed = layout.parse_segment_name(p.name)
        if parsed is not None and parsed[1] == layout.LOG_SUFFIX:
            out.append((parsed[0], p))
    return sorted(out)


def partition_directories(root: Path) -> list[Path]:
    """The partition directories under a data directory (or `root` itself when it is one)."""
    if _segments(root):
        return [root]
    found = []
    partitions = root / PARTITIONS_DIR
    if partitions.is_dir():
        # Deleted (`...-delete`) and stray (`...-stray`) directories no longer parse as partitions: not served.
        found = sorted(p for p in partitions.iterdir() if p.is_dir() and layout.parse_partition_dir_name(p.name))
    metadata = root / METADATA_LOG_DIR
    if metadata.is_dir():
        found.append(metadata)
    return found


def log_bytes_of(directories: list[Path]) -> int:
    return sum(p.stat().st_size for d in directories for _, p in _segments(d))


def _checkpoint_offset(directory: Path, name: str) -> int | None:
    entries, problem = read_checkpoint_file(directory / name)
    return entries[0][0] if problem is None and entries else None


def verify_partition(directory: Path, report: Report, progress: Callable[[int], None] | None = None) -> None:
    """Check one partition directory; problems and counts go to `report`."""
    report.partitions += 1
    for name in layout.CHECKPOINT_NAMES:
        if (directory / name).exists():
            report.checkpoints += 1
            _, problem = read_checkpoint_file(directory / name)
            if problem is not None:
                report.problems.append(Problem(directory / name, None, problem.message))
    epoch_entries, problem = read_checkpoint_file(directory / layout.LEADER_EPOCH_CHECKPOINT)
    log_start = _checkpoint_offset(directory, layout.LOG_START_OFFSET_CHECKPOINT) or 0
    epochs = [(start, epoch) for epoch, start in epoch_entries] if problem is None else []

    def epoch_at(offset: int) -> int:
        found = -1
        for start, epoch in epochs:
            if start > offset:
                break
            found = epoch
        return found

    next_offset, leader_epoch = 0, -1
    for base, path in _segments(directory):
        report.segments += 1
        if base < next_offset:
            report.problems.append(Problem(path, 0, f"segment starts at offset {base}, inside the previous one"))
            return
        next_offset = base
        fd = os.open(path, os.O_RDONLY)
        try:
            scan = ValidatingScan(
                fd,
                0,
                os.fstat(fd).st_size,
                next_offset=next_offset,
                leader_epoch=leader_epoch,
                max_batch_bytes=hard_max_batch_bytes(0),
                # Batches below the log start may predate the checkpoint's first entry.
                epoch_at=epoch_at if epochs and base >= log_start else None,
            )
            for _pos, header, _view in scan:
                report.batches += 1
                report.log_bytes += header.size
                if progress is not None:
                    progress(header.size)
        finally:
            os.close(fd)
        if scan.stopped_at is not None:
            report.problems.append(Problem(path, scan.stopped_at, scan.reason or "bad batch"))
            return
        next_offset, leader_epoch = scan.next_offset, scan.leader_epoch
        for suffix in (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX):
            index_path = layout.segment_path(directory, base, suffix)
            if not index_path.exists():
                continue  # rebuilt from the log when missing
            reader = IndexFileReader(index_path)
            report.index_entries += sum(1 for _ in reader)
            if reader.problem is not None:
                report.problems.append(Problem(index_path, reader.problem.position, reader.problem.message))


def verify(root: Path, report: Report, progress: Callable[[int], None] | None = None) -> Iterator[Path]:
    """Check every partition under `root` into `report`; yields each partition directory once checked."""
    for directory in partition_directories(root):
        verify_partition(directory, report, progress)
        yield directory
