"""Producer-state snapshot files of one partition, and rebuilding the state from them and the log.

Design notes: docs/replication.md, section "broker/shell/producer_snapshots.py".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from kraftpy.broker.replication import ProducerStateManager
from kraftpy.broker.replication.producer_state import CompletedTxn
from kraftpy.protocol.errors import CorruptRecordError, KafkaError
from kraftpy.protocol.records.control import TxnMarker, read_marker
from kraftpy.protocol.records.header import BatchHeader, iter_batches
from kraftpy.storage import OffsetOutOfRangeError, PartitionLog
from kraftpy.storage.txn_index import AbortedTxn, TxnIndexCorruptError

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


def iter_log_headers(plog: PartitionLog, start: int, end: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
    """Headers of the batches holding offsets in [start, end), read in bounded chunks, with each marker."""
    offset = max(start, plog.log_start_offset)
    while offset < end:
        try:
            data = plog.read(offset, REPLAY_READ_BYTES, max_offset=end)
        except OffsetOutOfRangeError:
            return
        if not data:
            return
        progressed = False
        for pos, header in iter_batches(data, check_crc=False):
            marker = None
            if header.is_control:
                try:
                    marker = read_marker(data, header, pos)
                except CorruptRecordError as exc:
                    log.warning("%s: unreadable control batch at %d: %s", plog.directory.name, header.base_offset, exc)
            yield header, marker
            if header.next_offset > offset:
                offset, progressed = header.next_offset, True
        if not progressed:
            return


def rebuild_producer_state(
    plog: PartitionLog, end_offset: int, *, batches_to_retain: int, producer_id_expiration_ms: int
) -> ProducerStateManager:
    """The producer state of the log below `end_offset` (clamped to the log end).

    The replay also rebuilds the aborted-transactions index of the range it covers (Kafka rebuilds a
    segment's .txnindex as it recovers it); an index file that does not load costs a replay from the start.
    """
    directory = plog.directory
    end = min(end_offset, plog.log_end_offset)
    delete_snapshots(directory, above=end)
    offsets = list(reversed(list_snapshots(directory)))
    try:
        plog.load_aborted_txn_indexes()
    except TxnIndexCorruptError as exc:
        log.warning("%s: %s; rebuilding the aborted-transaction index from the log start", directory.name, exc)
        offsets = []
    for offset in offsets:
        try:
            data = snapshot_path(directory, offset).read_bytes()
            return _replay(plog, data, offset, end, batches_to_retain, producer_id_expiration_ms)
        except (KafkaError, ValueError, OSError) as exc:
            log.warning(
                "%s: producer snapshot at %d is unusable (%s); trying an older one", directory.name, offset, exc
            )
    return _replay(plog, None, plog.log_start_offset, end, batches_to_retain, producer_id_expiration_ms)


def _replay(
    plog: PartitionLog, snapshot: bytes | None, start: int, end: int, batches_to_retain: int, expiration_ms: int
) -> ProducerStateManager:
    aborted: list[AbortedTxn] = []

    def on_aborted(done: CompletedTxn, lso: int) -> None:
        aborted.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))

    producers = ProducerStateManager.rebuild(
        snapshot, iter_log_headers(plog, start, end), end, batches_to_retain, expiration_ms, on_aborted=on_aborted
    )
    if not plog.closed and start < end:
        plog.replace_aborted_txns(start, aborted)
    return producers
