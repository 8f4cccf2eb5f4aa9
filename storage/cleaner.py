"""Log compaction: keep the latest record per key in closed segments, as Kafka's log cleaner does.

Design notes: docs/on-disk-format.md, section "storage/cleaner.py".
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import build_batch, decode_batch
from kraftpy.protocol.records.control import read_marker
from kraftpy.protocol.records.header import BatchHeader, crc_matches
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX
from kraftpy.storage import layout
from kraftpy.storage.checkpoints import OffsetCheckpoint
from kraftpy.storage.errors import CorruptCheckpointError, LogStorageError
from kraftpy.storage.log import CleanableSegment, PartitionLog
from kraftpy.storage.scan import CorruptSegmentError
from kraftpy.storage.segment import LogSegment, append_span
from kraftpy.storage.txn_index import AbortedTxn
from kraftpy.storage.validation import hard_max_batch_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanResult:
    first_dirty_offset: int  # where the next pass starts (the new checkpoint)
    dirty_ratio: float
    segments_read: int
    segments_written: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    tombstones_removed: int
    aborted_batches_removed: int = 0
    markers_removed: int = 0


@dataclass
class _TxnFilter:
    """Kafka's CleanedTransactionMetadata: fed the batches in offset order, it says which belong to
    aborted transactions (dropped) and whether a marker still guards data (kept) or may go."""

    pending: deque[AbortedTxn]
    aborted: set[int] = field(default_factory=set)  # producers inside an aborted transaction
    with_data: set[int] = field(default_factory=set)  # producers whose current transaction kept data

    @classmethod
    def of(cls, aborted: list[AbortedTxn]) -> _TxnFilter:
        return cls(deque(sorted(aborted, key=lambda a: a.first_offset)))

    def drops(self, header: BatchHeader) -> bool:
        """A data batch: True when its transaction was aborted."""
        while self.pending and self.pending[0].first_offset <= header.last_offset:
            self.aborted.add(self.pending.popleft().producer_id)
        return header.is_transactional and header.producer_id in self.aborted

    def kept(self, header: BatchHeader) -> None:
        if header.is_transactional:
            self.with_data.add(header.producer_id)

    def marker_guards_data(self, raw: memoryview, header: BatchHeader) -> bool:
        """A control batch ends its producer's transaction; True if data of it remains in the log."""
        self.drops(header)  # an abort that starts at the marker itself (an empty transaction)
        try:
            marker = read_marker(raw, header)
        except CorruptRecordError:
            marker = None
        if marker is not None and not marker.committed:
            self.aborted.discard(header.producer_id)
        had = header.producer_id in self.with_data
        self.with_data.discard(header.producer_id)
        return had


class LogCleaner:
    """Compacts logs whose cleanup_policy includes compact; clean() for one pass, start() for a thread."""

    def __init__(self, *, max_map_entries: int = 1_000_000, backoff_ms: int = 15_000) -> None:
        self.max_map_entries = max_map_entries
        self.backoff_ms = backoff_ms
        self._logs: list[PartitionLog] = []
        self._logs_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Per log directory: when the earliest tombstone kept by the last pass may go.
        self._tombstone_due: dict[Path, int] = {}

    # -- one pass ----------------------------------------------------------------------

    def clean(self, plog: PartitionLog, *, now_ms: int, force: bool = False) -> CleanResult | None:
        """Clean `plog` once if it is dirty enough (or `force`); None when there was nothing to do."""
        cfg = plog.config
        if not cfg.compact:
            return None
        segments, log_start, high_watermark = plog.cleanable_segments()
        unstable = plog.first_unstable_offset
        cleanable: list[CleanableSegment] = []
        for seg in segments:
            if seg.next_base_offset > high_watermark or (unstable is not None and seg.next_base_offset > unstable):
                break
            # (An empty segment, left by an earlier pass, has no records to be young.)
            if seg.size_bytes and seg.largest_timestamp > now_ms - cfg.min_compaction_lag_ms:
                break
            cleanable.append(seg)
        if not cleanable:
            return None
        checkpoint = OffsetCheckpoint(plog.directory / layout.CLEANER_OFFSET_CHECKPOINT)
        try:
            first_dirty = max(checkpoint.read() or 0, log_start)
        except CorruptCheckpointError as exc:
            log.warning("%s; cleaning the whole log", exc.message)
            first_dirty = log_start
        dirty = [s for s in cleanable if s.next_base_offset > first_dirty]
        total = sum(s.size_bytes for s in cleanable)
        ratio = sum(s.size_bytes for s in dirty) / total if total else 0.0
        # Kept tombstones expire later; a pass is due then even if nothing new is dirty (INT64_MAX: never).
        tombstones_due = now_ms >= self._tombstone_due.get(plog.directory, INT64_MAX)
        if not (force or tombstones_due) and (not dirty or ratio < cfg.min_cleanable_dirty_ratio):
            return None

        max_batch = hard_max_batch_bytes(cfg.max_message_bytes)
        aborted = plog.collect_aborted_txns(cleanable[0].base_offset, cleanable[-1].next_base_offset)
        offset_map, mapped = self._build_offset_map(dirty, max_batch, aborted)
        end_offset = mapped[-1].next_base_offset if mapped else first_dirty
        to_rewrite = [s for s in cleanable if s.base_offset < end_offset] if mapped else cleanable
        delete_horizon = now_ms - cfg.delete_retention_ms

        stats = {"written": 0, "after": 0, "removed": 0, "tombstones": 0, "due": INT64_MAX, "aborted": 0, "markers": 0}
        txns = _TxnFilter.of(aborted)
        scratch = plog.directory / layout.CLEANER_SCRATCH_DIR
        for group in _group_by_size(to_rewrite, cfg.segment_bytes):
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            try:
                built = self._rewrite(plog, group, scratch, offset_map, delete_horizon, max_batch, stats, txns)
                if built is None or not plog.swap_cleaned_segment([s.segment for s in group], scratch, built):
                    log.info("%s: log changed during cleaning; dropping this pass", plog.directory.name)
                    return None
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        checkpoint.write(end_offset)
        self._tombstone_due[plog.directory] = stats["due"]
        result = CleanResult(
            first_dirty_offset=end_offset,
            dirty_ratio=ratio,
            segments_read=len(to_rewrite),
            segments_written=stats["written"],
            bytes_before=sum(s.size_bytes for s in to_rewrite),
            bytes_after=stats["after"],
            records_removed=stats["removed"],
            tombstones_removed=stats["tombstones"],
            aborted_batches_removed=stats["aborted"],
            markers_removed=stats["markers"],
        )
        log.info("%s cleaned: %s", plog.directory.name, result)
        return result

    def _build_offset_map(
        self, dirty: list[CleanableSegment], max_batch: int, aborted: list[AbortedTxn]
    ) -> tuple[dict[bytes, int], list[CleanableSegment]]:
        """key -> latest offset over as many whole dirty segments as fit in max_map_entries.

        Records of aborted transactions never supersede anything (Kafka skips them too).
        """
        offset_map: dict[bytes, int] = {}
        mapped: list[CleanableSegment] = []
        txns = _TxnFilter.of(aborted)
        for seg in dirty:
            keys: dict[bytes, int] = {}
            for raw, header, batch in _decoded_batches(seg.segment, max_batch):
                if batch is None:
                    txns.marker_guards_data(raw, header)
                    continue
                if txns.drops(header):
                    continue
                for record in batch.records:
                    if record.key is not None:
                        keys[record.key] = record.offset
            if mapped and len(offset_map.keys() | keys.keys()) > self.max_map_entries:
                break  # the rest waits for the next pass
            offset_map.update(keys)
            mapped.append(seg)
        return offset_map, mapped

    def _rewrite(
        self,
        plog: PartitionLog,
        group: list[CleanableSegment],
        scratch: Path,
        offset_map: dict[bytes, int],
        delete_horizon: int,
        max_batch: int,
        stats: dict[str, int],
        txns: _TxnFilter,
    ) -> int | None:
        """Write the cleaned replacement of `group` into `scratch`; returns its base offset.

        Batches of aborted transactions go; a marker stays while data of its transaction remains or
        until delete_retention_ms after its segment's newest record (as a tombstone), and the .txnindex
        keeps the aborts whose marker stays (a reader must meet the marker that ends each one).
        """
        base = group[0].base_offset
        out = LogSegment.create(
            scratch, base, index_interval_bytes=plog.config.index_interval_bytes, now_ms=int(time.time() * 1000)
        )
        markers_kept: set[int] = set()
        try:
            for source in group:
                drop_tombstones = source.largest_timestamp < delete_horizon
                for raw, header, batch in _decoded_batches(source.segment, max_batch):
                    if batch is None:  # a control batch: a marker goes once its data did and its time is up
                        if not txns.marker_guards_data(raw, header) and drop_tombstones:
                            stats["markers"] += 1
                            continue
                        if not drop_tombstones:
                            due = source.largest_timestamp + plog.config.delete_retention_ms + 1
                            stats["due"] = min(stats["due"], due)
                        markers_kept.add(header.base_offset)
                        out.append(
                            [raw],
                            [append_span(header)],
                            header.size,
                        )
                        continue
                    if txns.drops(header):
                        stats["aborted"] += 1
                        stats["removed"] += len(batch.records)
                        continue
                    kept = []
                    for record in batch.records:
                        superseded = record.key is not None and offset_map.get(record.key, -1) > record.offset
                        expired_tombstone = record.value is None and drop_tombstones and record.key is not None
                        if superseded or expired_tombstone:
                            stats["removed"] += 1
                            stats["tombstones"] += record.value is None
                        else:
                            kept.append(record)
                            if record.value is None and record.key is not None:
                                due = source.largest_timestamp + plog.config.delete_retention_ms + 1
                                stats["due"] = min(stats["due"], due)
                    if not kept:
                        continue
                    txns.kept(header)
                    if len(kept) == len(batch.records):
                        data = bytes(raw)  # untouched: same bytes, same CRC
                    else:
                        data = build_batch(
                            kept,
                            base_offset=header.base_offset,
                            partition_leader_epoch=header.partition_leader_epoch,
                            compression=header.compression,
                            producer_id=header.producer_id,
                            producer_epoch=header.producer_epoch,
                            base_sequence=header.base_sequence,
                            is_transactional=header.is_transactional,
                            timestamp_type=header.timestamp_type,
                        )
                    last = kept[-1].offset
                    max_ts = max(r.timestamp for r in kept)
                    out.append(
                        [data],
                        [(header.base_offset, last, len(data), max_ts, header.partition_leader_epoch)],
                        len(data),
                    )
            out.txn_index.rewrite(
                [e for s in group for e in s.segment.txn_index.entries if e.last_offset in markers_kept]
            )
            out.on_roll()
            out.fsync()
            stats["after"] += out.size
            stats["written"] += 1
            return base
        finally:
            out.close()

    # -- background thread ----------------------------------------------------------------

    def add(self, plog: PartitionLog) -> None:
        with self._logs_lock:
            if plog not in self._logs:
                self._logs.append(plog)

    def remove(self, plog: PartitionLog) -> None:
        with self._logs_lock:
            if plog in self._logs:
                self._logs.remove(plog)

    def start(self) -> None:
        """Clean the added logs in a daemon thread, pausing backoff_ms between rounds."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kraftpy-log-cleaner", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._logs_lock:
                logs = list(self._logs)
            for plog in logs:
                if self._stop.is_set():
                    break
                if plog.closed:
                    self.remove(plog)
                    continue
                try:
                    self.clean(plog, now_ms=time.time_ns() // 1_000_000)
                except LogStorageError as exc:
                    log.error("cleaning %s failed: %s", plog.directory.name, exc)
                except Exception:
                    log.exception("cleaning %s failed", plog.directory.name)
            self._stop.wait(self.backoff_ms / 1000)


def _decoded_batches(segment: LogSegment, max_batch: int):
    """(raw bytes, header, decoded batch or None for a control batch) of a closed segment.

    A closed segment that fails its CRC or does not decode stops the pass: the
    cleaner never rewrites what it cannot read.
    """
    try:
        for pos, header, raw in segment.batches(max_batch_bytes=max_batch):
            if not crc_matches(raw, 0, header):
                raise LogStorageError(f"{segment.log_path}: CRC mismatch at position {pos}; not cleaning it")
            if header.is_control:
                yield raw, header, None
                continue
            try:
                yield raw, header, decode_batch(raw, 0, max_batch_bytes=max_batch)
            except CorruptRecordError as exc:
                raise LogStorageError(f"{segment.log_path}: batch at {pos} does not decode: {exc.message}") from exc
    except CorruptSegmentError as exc:
        raise LogStorageError(f"{segment.log_path}: {exc.message}; not cleaning it") from exc


def _group_by_size(segments: list[CleanableSegment], segment_bytes: int) -> list[list[CleanableSegment]]:
    """Consecutive segments whose total size fits one segment and whose offsets fit its index."""
    groups: list[list[CleanableSegment]] = []
    for seg in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size_bytes for s in group) + seg.size_bytes
            span = seg.next_base_offset - 1 - group[0].base_offset
            if size <= segment_bytes and span <= INT32_MAX:
                group.append(seg)
                continue
        groups.append([seg])
    return groups
