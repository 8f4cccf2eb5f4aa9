"""Producer-state snapshot files of one partition, and rebuilding the state from them and the log.

Design notes: docs/replication.md, section "broker/shell/producer_snapshots.py".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from kraftpy.broker.replication import ProducerStateManager
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.records.header import BatchHeader, iter_batches
from kraftpy.storage import OffsetOutOfRangeError, PartitionLog

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
# Bytes read per step while replaying batch headers.
REPLAY_READ_BYTES = 1 << 20


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    offsets = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
    return sorted(offsets)


def write_snapshot(directory: Path, offset: int, data: bytes) -> None:
    """Write atomically (temp file + rename); storage's open removes stray *.tmp files."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def delete_snapshots(directory: Path, *, above: int | None = None, below: int | None = None) -> int:
    """Delete snapshots with offset > `above` and/or < `below`; returns how many went."""
    count = 0
    for offset in list_snapshots(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            try:
                snapshot_path(directory, offset).unlink()
                count += 1
            except FileNotFoundError:
                pass
    return count


def delete_snapshots_below(directory: Path, log_start_offset: int) -> int:
    """Retention moved the log start: drop older snapshots, but keep the newest one at or below it.

    That one still saves replaying the log from the start; the ones before it are useless.
    """
    offsets = list_snapshots(directory)
    keep = [o for o in offsets if o <= log_start_offset][-1:]
    below = keep[0] if keep else log_start_offset
    return delete_snapshots(directory, below=below)


def iter_log_headers(plog: PartitionLog, start: int, end: int) -> Iterator[BatchHeader]:
    """Headers of the batches holding offsets in [start, end), read in bounded chunks."""
    offset = max(start, plog.log_start_offset)
    while offset < end:
        try:
            data = plog.read(offset, REPLAY_READ_BYTES, max_offset=end)
        except OffsetOutOfRangeError:
            return
        if not data:
            return
        progressed = False
        for _pos, header in iter_batches(data, check_crc=False):
            yield header
            if header.next_offset > offset:
                offset, progressed = header.next_offset, True
        if not progressed:
            return


def rebuild_producer_state(
    plog: PartitionLog, end_offset: int, *, batches_to_retain: int, producer_id_expiration_ms: int
) -> ProducerStateManager:
    """The producer state of the log below `end_offset` (clamped to the log end)."""
    directory = plog.directory
    end = min(end_offset, plog.log_end_offset)
    delete_snapshots(directory, above=end)
    for offset in reversed(list_snapshots(directory)):
        try:
            data = snapshot_path(directory, offset).read_bytes()
            return ProducerStateManager.rebuild(
                data,
                iter_log_headers(plog, offset, end),
                end,
                batches_to_retain,
                producer_id_expiration_ms,
            )
        except (KafkaError, ValueError, OSError) as exc:
            log.warning(
                "%s: producer snapshot at %d is unusable (%s); trying an older one", directory.name, offset, exc
            )
    return ProducerStateManager.rebuild(
        None, iter_log_headers(plog, plog.log_start_offset, end), end, batches_to_retain, producer_id_expiration_ms
    )
