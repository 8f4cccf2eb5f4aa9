"""PartitionLog: one partition's segmented log: append, read, roll, flush, truncate, retention.

Design notes: docs/on-disk-format.md, section "storage/log.py".
"""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.records.header import LOG_OVERHEAD
from kraftpy.protocol.validate import INT32_MAX
from kraftpy.storage import layout
from kraftpy.storage.checkpoints import OffsetCheckpoint
from kraftpy.storage.config import LogConfig
from kraftpy.storage.errors import (
    LogStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kraftpy.storage.files import DirectoryLock, HandleClosedError, fsync_dir, remove_if_exists
from kraftpy.storage.leader_epoch_cache import LeaderEpochCache
from kraftpy.storage.recovery import RecoveryOutcome
from kraftpy.storage.retention import SegmentStats, deletable_prefix
from kraftpy.storage.scan import BatchSpan
from kraftpy.storage.segment import AppendSpan, LogSegment, append_span
from kraftpy.storage.swap import commit_swap, finish_swap
from kraftpy.storage.txn_index import AbortedTxn
from kraftpy.storage.validation import Batches, validate_batches

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2  # Kafka's ListOffsets sentinels
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # KIP-734: the record with the log's largest timestamp

# baseOffset, batchLength, partitionLeaderEpoch: the 16 bytes a leader rewrites (outside the CRC).
_PREFIX = struct.Struct(">qii")
_PREFIX_SIZE = _PREFIX.size


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendInfo(NamedTuple):
    """What an append wrote: offsets first..last (inclusive) in `batch_count` batches.

    (A NamedTuple rather than a frozen dataclass: one is built per append, and
    it costs a fifth as much.)
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batch_count: int
    record_count: int
    size_bytes: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    size_bytes: int
    next_offset: int | None  # known for the active segment


@dataclass(frozen=True, slots=True)
class CleanableSegment:
    segment: LogSegment
    base_offset: int
    next_base_offset: int
    size_bytes: int
    largest_timestamp: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A ListOffsets answer: the record found, and the leader epoch of its batch."""

    timestamp: int
    offset: int
    leader_epoch: int


class PartitionLog:
    """A partition's log directory. Create with PartitionLog.open()."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        dir_lock: DirectoryLock,
        segments: list[LogSegment],
        epochs: LeaderEpochCache,
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        now_ms: int,
        checkpoints: tuple[OffsetCheckpoint, OffsetCheckpoint, OffsetCheckpoint] | None = None,
    ) -> None:
        self.directory = directory
        self._config = config
        self._dir_lock = dir_lock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._epochs = epochs
        self._log_start = log_start_offset
        self._leo = segments[-1].next_offset
        self._recovery_point = recovery_point
        self._hw = high_watermark
        self._lock = threading.Lock()  # (not reentrant: no method calls another under it)
        self._flush_lock = threading.Lock()
        self._closed = False
        self._failed: str | None = None
        self._truncations = 0  # bumped by every in-place truncation; reads compare it
        self._dir_dirty = False
        self._index_checked = -1  # the active segment's index_entries_added when last checked
        self._unflushed_records = 0
        self._last_flush_ms = now_ms
        # (log start, recovery point, high watermark); objects that remember what they
        # last read or wrote, so an unchanged value costs no fsync.
        self._ckpt_log_start, self._ckpt_recovery, self._ckpt_hw = checkpoints or (
            OffsetCheckpoint(directory / layout.LOG_START_OFFSET_CHECKPOINT),
            OffsetCheckpoint(directory / layout.RECOVERY_POINT_CHECKPOINT),
            OffsetCheckpoint(directory / layout.HIGH_WATERMARK_CHECKPOINT),
        )
        self.last_recovery: RecoveryOutcome | None = None
        # Whether appends apply the flush_messages / flush_ms policy themselves (an fsync on the
        # appending thread). A broker that appends on its event loop turns this off and runs
        # maybe_flush() from a worker thread instead.
        self.flush_inline = True
        # Set by the broker: the first offset of a transaction not yet decided (None: none). The cleaner
        # compacts nothing from there on, as it cannot know yet which records survive.
        self.first_unstable_offset: int | None = None

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def open(cls, dir: Path, config: LogConfig | None = None, *, now_ms: int | None = None) -> PartitionLog:
        """Open the log in `dir`, creating it if needed and recovering it after a crash."""
        from kraftpy.storage.opening import open_log

        return open_log(cls, Path(dir), config or LogConfig(), _wall_ms() if now_ms is None else now_ms)

    # -- properties --------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply a topic config change; index_interval_bytes affects batches appended from now on."""
        with self._lock:
            self._config = config
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Set the HW, clamped to [log_start_offset, log_end_offset] as Kafka does."""
        with self._lock:
            self._hw = min(max(offset, self._log_start), self._leo)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._epochs

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= `epoch`, its end offset), (-1, -1) if unknown."""
        return self._epochs.end_offset_for(epoch)

    @property
    def active_segment(self) -> SegmentInfo:
        with self._lock:
            seg = self._segments[-1]
            return SegmentInfo(seg.base_offset, seg.size, seg.next_offset)

    @property
    def active_segment_base_offset(self) -> int:
        """Base offset of the active segment, without the lock: a changed value means the log rolled."""
        return self._bases[-1]

    @property
    def segments(self) -> list[SegmentInfo]:
        with self._lock:
            last = self._segments[-1]
            return [SegmentInfo(s.base_offset, s.size, s.next_offset if s is last else None) for s in self._segments]

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    # -- appends -----------------------------------------------------------------------

    def append_as_leader(self, batches: bytes, leader_epoch: int, *, now_ms: int) -> AppendInfo:
        """Validate producer batches, assign offsets from the log end and stamp `leader_epoch`.

        Offsets and the epoch are patched into each batch's header while it is
        written (they sit outside the CRC), without copying the batch.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} must be >= 0")
        checked = validate_batches(
            batches,
            segment_bytes=self._config.segment_bytes,
            max_message_bytes=self._config.max_message_bytes,
            dense_offsets=True,
        )
        view = memoryview(batches)
        with self._lock:
            if self._closed or self._failed is not None:
                self._check_writable()
            if not checked:
                return self._empty_append_info()
            latest = self._epochs.latest_epoch
            if leader_epoch < latest:
                raise KafkaError(
                    f"leader epoch {leader_epoch} is older than epoch {latest} already in the log",
                    ErrorCode.FENCED_LEADER_EPOCH,
                )
            first = offset = self._leo
            buffers: list[bytes | memoryview] = []
            spans: list[AppendSpan] = []
            records, max_ts, offset_of_max = 0, -1, -1
            for pos, header in checked:
                last = offset + header.last_offset_delta
                batch_size = header.batch_length + LOG_OVERHEAD
                buffers.append(_PREFIX.pack(offset, header.batch_length, leader_epoch))
                buffers.append(view[pos + _PREFIX_SIZE : pos + batch_size])
                spans.append((offset, last, batch_size, header.max_timestamp, leader_epoch))
                records += header.records_count
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, offset
                offset = last + 1
            self._maybe_roll(len(batches), first, last, max_ts, now_ms)
            if leader_epoch != latest:
                self._epochs.assign(leader_epoch, first)  # before the data, as Kafka: recovery trims it if needed
            self._write(buffers, spans, len(batches), last + 1)
            self._unflushed_records += records
            info = AppendInfo(first, last, max_ts, offset_of_max, len(checked), records, len(batches), leader_epoch)
        self._apply_flush_policy(now_ms)
        return info

    def append_as_follower(self, batches: bytes, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        The first batch must start at the log end offset. In a compacted log it may
        start later (the leader's cleaner leaves gaps between batches); offsets
        never go backwards. Leader epochs must not be older than the log's latest.
        """
        checked = validate_batches(
            batches, segment_bytes=self._config.segment_bytes, max_message_bytes=None, dense_offsets=False
        )
        now_ms = _wall_ms() if now_ms is None else now_ms
        view = memoryview(batches)
        with self._lock:
            self._check_writable()
            if not checked:
                return self._empty_append_info()
            self._check_follower_batches(checked)
            spans: list[AppendSpan] = []
            records = 0
            max_ts, offset_of_max = -1, -1
            new_epochs: list[tuple[int, int]] = []
            latest = self._epochs.latest_epoch
            for _pos, header in checked:
                spans.append(append_span(header))
                records += header.records_count
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, header.base_offset
                epoch = header.partition_leader_epoch
                if epoch > latest:
                    new_epochs.append((epoch, header.base_offset))
                    latest = epoch
            first, last = checked[0][1].base_offset, checked[-1][1].last_offset
            self._maybe_roll(len(batches), first, last, max_ts, now_ms)
            for epoch, start in new_epochs:
                self._epochs.assign(epoch, start)
            self._write([view], spans, len(batches), last + 1)
            self._unflushed_records += records
            info = AppendInfo(first, last, max_ts, offset_of_max, len(checked), records, len(batches), latest)
        self._apply_flush_policy(now_ms)
        return info

    def _check_follower_batches(self, checked: Batches) -> None:
        gaps_allowed = self._config.compact
        expected = self._leo
        epoch = self._epochs.latest_epoch
        for pos, header in checked:
            base = header.base_offset
            if base < expected or (base > expected and not gaps_allowed):
                where = "log end offset" if pos == 0 else "end of the previous batch"
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.directory.name}: batch at position {pos} starts at offset {base}, "
                    f"but the {where} is {expected}" + ("" if gaps_allowed else " (appends must be contiguous)"),
                    expected_offset=expected,
                    first_offset=base,
                )
            batch_epoch = header.partition_leader_epoch
            if 0 <= batch_epoch < epoch:
                raise KafkaError(
                    f"follower append to {self.directory.name}: batch at offset {base} has leader epoch "
                    f"{batch_epoch}, older than epoch {epoch} already in the log",
                    ErrorCode.FENCED_LEADER_EPOCH,
                )
            epoch = max(epoch, batch_epoch)
            expected = header.next_offset

    def _empty_append_info(self) -> AppendInfo:
        return AppendInfo(self._leo, self._leo - 1, -1, -1, 0, 0, 0, self._epochs.latest_epoch)

    def _write(
        self,
        buffers: list[bytes | memoryview],
        spans: list[AppendSpan],
        size: int,
        next_offset: int,
    ) -> None:
        try:
            self._segments[-1].append(buffers, spans, size)
        except LogStorageError as exc:
            # Memory still matches the (cut back) file, but a disk that fails writes is not
            # to be trusted with more: the partition goes offline, as Kafka's log dir would.
            self._failed = exc.message
            raise
        self._leo = next_offset

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now_ms: int) -> None:
        seg = self._segments[-1]
        if seg.size == 0:
            return
        cfg = self._config
        # Kafka's timeWaitedForRoll: the new batches' timestamp against the segment's first one, so
        # records with old CreateTimes do not roll a segment per batch; the wall clock only without them.
        rolling_base = seg.first_batch_timestamp
        if rolling_base is None or rolling_base < 0:
            waited_ms = now_ms - seg.created_ms
        else:
            waited_ms = max_timestamp - rolling_base
        if (
            seg.size + size <= cfg.segment_bytes
            and waited_ms <= cfg.segment_ms
            and last_offset - seg.base_offset <= INT32_MAX
            and (seg.index_entries_added == self._index_checked or seg.index_bytes < cfg.segment_index_bytes)
        ):
            self._index_checked = seg.index_entries_added  # (len() of the index only when it grew)
            return
        if seg.size + size > cfg.segment_bytes:
            reason = "segment_bytes"
        elif waited_ms > cfg.segment_ms:
            reason = "segment_ms"
        elif last_offset - seg.base_offset > INT32_MAX:
            reason = "relative offsets would overflow"
        else:
            reason = "segment_index_bytes"
        log.debug("%s: rolling segment %d (%s)", self.directory.name, seg.base_offset, reason)
        self._roll_locked(first_offset, now_ms)

    def roll(self, *, now_ms: int | None = None) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_writable()
            if self._segments[-1].size > 0:
                self._roll_locked(self._leo, _wall_ms() if now_ms is None else now_ms)

    def _roll_locked(self, base_offset: int, now_ms: int) -> None:
        old = self._segments[-1]
        old.on_roll()
        try:
            new = LogSegment.create(
                self.directory,
                base_offset,
                index_interval_bytes=self._config.index_interval_bytes,
                now_ms=now_ms,
                preallocate_bytes=self._config.preallocate_bytes,
            )
        except FileExistsError:
            raise LogStorageError(f"cannot roll {self.directory}: segment {base_offset} already exists") from None
        self._segments.append(new)
        self._bases.append(base_offset)
        self._index_checked = -1
        self._dir_dirty = True

    # -- reads -------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True) -> bytes:
        """Whole batches starting with the one holding `offset`, at most `max_bytes` of them.

        `max_offset` (exclusive; consumers pass the high watermark) bounds the read:
        no batch whose last offset is at or above it is returned. With
        `min_one_batch`, a first batch larger than `max_bytes` is returned whole.
        Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        """
        while True:
            with self._lock:
                self._check_open()
                if offset < self._log_start or offset > self._leo:
                    raise OffsetOutOfRangeError(
                        f"offset {offset} is outside [{self._log_start}, {self._leo}] of {self.directory.name}",
                        log_start_offset=self._log_start,
                        log_end_offset=self._leo,
                    )
                upper = self._leo if max_offset is None else min(max_offset, self._leo)
                if offset >= upper:
                    return b""
                generation = self._truncations
                found = None
                for i in range(bisect_right(self._bases, offset) - 1, len(self._segments)):
                    seg = self._segments[i]
                    start, end = seg.plan_read(
                        offset,
                        max_bytes,
                        max_offset=None if max_offset is None else upper,
                        min_one_batch=min_one_batch,
                        limit=seg.size,
                    )
                    if end > start:
                        found = (seg, start, end)
                        break
                if found is None:
                    return b""
            seg, start, end = found
            try:
                data = seg.read_bytes(start, end)
            except HandleClosedError:
                continue  # deleted or cleaned meanwhile: plan again on the current segments
            if generation == self._truncations and len(data) == end - start:
                return data

    # -- aborted transactions (storage/txn_index.py) --------------------------------------

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index an abort whose marker was just appended, in the segment holding the marker; durable on return."""
        with self._lock:
            self._check_writable()
            if not self._log_start <= entry.last_offset < self._leo:
                raise ValueError(f"abort marker at {entry.last_offset} is not in the log of {self.directory.name}")
            self._segments[bisect_right(self._bases, entry.last_offset) - 1].txn_index.append(entry)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [fetch_offset, upper_bound_offset) (Kafka's collectAbortedTxns).

        Their markers may sit in later segments than their data, so the search walks on from the segment
        holding fetch_offset until an entry's LSO shows no later abort can concern the range.
        """
        if upper_bound_offset <= fetch_offset:
            return []
        with self._lock:
            self._check_open()
            first = max(bisect_right(self._bases, fetch_offset) - 1, 0)
            found: list[AbortedTxn] = []
            for seg in self._segments[first:]:
                entries, complete = seg.txn_index.collect(fetch_offset, upper_bound_offset)
                found += entries
                if complete:
                    break
            return found

    def load_aborted_txn_indexes(self) -> None:
        """Read every segment's .txnindex; TxnIndexCorruptError names the first that does not load."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                seg.txn_index.entries  # noqa: B018 (loads and checks the file)

    def replace_aborted_txns(self, from_offset: int, entries: list[AbortedTxn]) -> None:
        """Make the index hold exactly `entries` for markers at or past `from_offset` (a replay found them)."""
        with self._lock:
            self._check_writable()
            first = max(bisect_right(self._bases, from_offset) - 1, 0)
            for i in range(first, len(self._segments)):
                seg = self._segments[i]
                end = self._bases[i + 1] if i + 1 < len(self._segments) else self._leo
                current = seg.txn_index.entries_or_none()
                wanted = [e for e in current or [] if e.last_offset < from_offset]
                wanted += [e for e in entries if seg.base_offset <= e.last_offset < end]
                if wanted != current:
                    seg.txn_index.rewrite(wanted)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3) or the first record with
        timestamp >= `timestamp`.

        LATEST is the log end offset; the caller applies the high watermark for
        consumers. MAX_TIMESTAMP is the first record holding the largest timestamp
        of the log (Kafka's: the first segment with that maxTimestamp, and in it the
        first record reaching it). None when no record is that new (or has a timestamp).
        """
        with self._lock:
            self._check_open()
            if timestamp == EARLIEST_TIMESTAMP:
                start = self._log_start
                return TimestampOffset(-1, start, self._epochs.epoch_for_offset(start))
            if timestamp == LATEST_TIMESTAMP:
                return TimestampOffset(-1, self._leo, self._epochs.latest_epoch)
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_record()
            if timestamp < 0:
                raise KafkaError(f"timestamp {timestamp} is not a time, -1, -2 or -3", ErrorCode.INVALID_REQUEST)
            for seg in self._segments:
                if seg.size == 0 or seg.largest_timestamp() < timestamp:
                    continue
                span = seg.find_timestamp(timestamp, self._log_start, seg.size)
                if span is None:
                    continue
                return self._record_at_timestamp(seg, span, timestamp)
            return None

    def _max_timestamp_record(self) -> TimestampOffset | None:
        best: tuple[LogSegment, int] | None = None
        for seg in self._segments:
            if seg.size == 0:
                continue
            seg.ensure_state()
            # Strictly larger: on a tie the earlier segment holds the first such record (Kafka's maxBy).
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                best = (seg, seg.max_timestamp)
        if best is None:
            return None
        seg, largest = best
        span = seg.find_timestamp(largest, self._log_start, seg.size)
        return None if span is None else self._record_at_timestamp(seg, span, largest)

    def _record_at_timestamp(self, seg: LogSegment, span: BatchSpan, timestamp: int) -> TimestampOffset:
        # The batch is found from headers alone; which record in it is first at or
        # after the timestamp takes decoding, off the hot path.
        from kraftpy.protocol.records.batch import decode_batch

        decoded = decode_batch(seg.read_bytes(span.position, span.end), 0)
        for record in decoded.records:
            if record.timestamp >= timestamp and record.offset >= self._log_start:
                return TimestampOffset(record.timestamp, record.offset, span.leader_epoch)
        return TimestampOffset(span.max_timestamp, max(span.base_offset, self._log_start), span.leader_epoch)

    # -- flush -------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments and indexes holding offsets below `up_to_offset` (default: all).

        One fsync per file covers every batch appended before the call (group
        commit); appends continue while it runs. Moves the recovery point.
        """
        with self._flush_lock:
            with self._lock:
                self._check_open()
                target = self._leo if up_to_offset is None else min(up_to_offset, self._leo)
                if target <= self._recovery_point and not self._dir_dirty:
                    return
                todo = []
                for i, seg in enumerate(self._segments):
                    next_base = self._bases[i + 1] if i + 1 < len(self._bases) else None
                    if seg.base_offset < target and (next_base is None or next_base > self._recovery_point):
                        seg.write_indexes()
                        todo.append(seg)
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                generation = self._truncations
                records = self._unflushed_records
            try:
                for seg in todo:
                    # A segment deleted meanwhile has nothing left to make durable.
                    with contextlib.suppress(HandleClosedError):
                        seg.fsync()
                if dir_dirty:
                    fsync_dir(self.directory)
            except OSError as exc:
                self._failed = f"fsync failed: {exc}"
                raise LogStorageError(f"flush of {self.directory} failed: {exc}") from exc
            with self._lock:
                if generation == self._truncations:
                    self._recovery_point = max(self._recovery_point, target)
                self._unflushed_records = max(0, self._unflushed_records - records)
                self._last_flush_ms = _wall_ms()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush_messages or flush_ms says so; the broker calls this periodically."""
        cfg = self._config
        due = (cfg.flush_messages is not None and self._unflushed_records >= cfg.flush_messages) or (
            cfg.flush_ms is not None
            and self._leo > self._recovery_point
            and now_ms - self._last_flush_ms >= cfg.flush_ms
        )
        if due:
            self.flush()
        return due

    def _apply_flush_policy(self, now_ms: int) -> None:
        if self.flush_inline and (self._config.flush_messages is not None or self._config.flush_ms is not None):
            self.maybe_flush(now_ms)

    def write_checkpoints(self) -> None:
        """Persist the recovery point and high watermark (the log start offset is always current)."""
        with self._lock:
            self._check_open()
            self._write_checkpoints_locked()

    def checkpointed_high_watermark(self) -> int:
        """The high watermark last written to the checkpoint file (0 before the first)."""
        return self._ckpt_hw.read() or 0

    def _write_checkpoints_locked(self) -> None:
        self._ckpt_recovery.write(self._recovery_point)
        self._ckpt_hw.write(self._hw)
        self._ckpt_log_start.write(self._log_start)

    # -- truncation ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or past `offset` (a follower matching its leader).

        A batch holding `offset` goes whole, so the log end may end up below it.
        Below the log start offset this is truncate_fully_and_start_at(offset). At
        or past the log end only epoch-cache entries starting at the log end go.
        Durable on return. Returns whether any batch was removed.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_writable()
            if offset >= self._leo:
                # As Kafka: the log stays, but an epoch that starts at the log end (a leader
                # recorded its epoch, then lost leadership before appending) must go, or
                # this replica keeps naming an epoch it holds no data for.
                self._epochs.truncate_from_end(self._leo)
                return False
            if offset < self._log_start:
                self._truncate_fully_locked(offset)
                return True
            self._truncations += 1
            self._drop_segments_from(bisect_right(self._bases, offset))
            self._segments[-1].truncate_to(offset)
            self._segments[-1].preallocate(self._config.preallocate_bytes)
            self._leo = self._segments[-1].next_offset
            self._after_truncation()
            log.info("%s truncated to %d (log end offset now %d)", self.directory.name, offset, self._leo)
            return True

    def _drop_segments_from(self, keep: int) -> None:
        """Delete segments keep.. (newest first: a crash midway leaves a shorter prefix) and fsync the directory."""
        removed = self._segments[keep:]
        for seg in reversed(removed):
            seg.delete()
        del self._segments[keep:]
        del self._bases[keep:]
        if removed:
            fsync_dir(self.directory)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at `offset` (log start = end = offset)."""
        if offset < 0:
            raise ValueError(f"cannot start at negative offset {offset}")
        with self._lock:
            self._check_writable()
            self._truncate_fully_locked(offset)

    def truncate_at_position(self, base_offset: int, position: int) -> bool:
        """Cut the log at byte `position` of segment `base_offset` and drop every later segment.

        For a batch found corrupt (its offsets may be unreadable, so the cut is by
        position, as recovery's). Durable on return. Returns False, changing
        nothing, when no segment starts at `base_offset` any more.
        """
        with self._lock:
            self._check_writable()
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset or position > self._segments[i].size:
                return False
            if position == 0 and i == 0:
                self._truncate_fully_locked(self._log_start)
                return True
            self._truncations += 1
            # An emptied segment would leave the log end past a hole: it goes too.
            self._drop_segments_from(i + 1 if position > 0 else i)
            if position > 0:
                self._segments[i].truncate_at_position(position)
            self._segments[-1].ensure_state()  # a closed segment may have become the active one
            self._leo = self._segments[-1].next_offset
            if self._leo < self._log_start:
                self._truncate_fully_locked(self._log_start)
                return True
            self._after_truncation()
            log.warning(
                "%s cut at position %d of segment %d (log end offset now %d)",
                self.directory.name,
                position,
                base_offset,
                self._leo,
            )
            return True

    def scan_view(self) -> tuple[int, list[tuple[LogSegment, int, int, int]]]:
        """What a background scan reads outside the lock: (truncation generation, segments).

        Each segment as (segment, start position, first offset there, size): the
        first starts at the batch holding the log start offset (nothing below it
        is served). A scan that finds damage checks `truncation_generation`
        afterwards: a truncation meanwhile may have rewritten what it read.
        """
        with self._lock:
            self._check_open()
            view = [(seg, 0, seg.base_offset, seg.size) for seg in self._segments]
            first = self._segments[0]
            if first.base_offset < self._log_start:
                try:
                    span = first.find_batch(self._log_start, first.size)
                except CorruptRecordError:
                    span = None  # damaged below the log start too: the scan reads from 0 and says so
                if span is not None:
                    view[0] = (first, span.position, span.base_offset, first.size)
            return self._truncations, view

    @property
    def truncation_generation(self) -> int:
        return self._truncations

    def _truncate_fully_locked(self, offset: int) -> None:
        self._truncations += 1
        # Newest first: a crash midway leaves a shorter prefix of the old log, still consistent.
        for seg in reversed(self._segments):
            seg.delete()
        fsync_dir(self.directory)
        seg = LogSegment.create(
            self.directory,
            offset,
            index_interval_bytes=self._config.index_interval_bytes,
            now_ms=_wall_ms(),
            preallocate_bytes=self._config.preallocate_bytes,
        )
        fsync_dir(self.directory)
        self._segments, self._bases = [seg], [offset]
        self._leo = self._log_start = offset
        self._epochs.clear()
        self._after_truncation()
        log.info("%s truncated fully, restarting at offset %d", self.directory.name, offset)

    def _after_truncation(self) -> None:
        self._index_checked = -1
        self._recovery_point = max(min(self._recovery_point, self._leo), self._log_start)
        self._hw = max(min(self._hw, self._leo), self._log_start)
        self._epochs.truncate_from_end(self._leo)
        # Durable now: a recovery point above the cut would let a crash resurrect the cut data.
        self._write_checkpoints_locked()
        remove_if_exists(self.directory / layout.CLEANER_OFFSET_CHECKPOINT)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords, a Raft snapshot, the leader's log start).

        Records below it are no longer served; whole segments below it go at the
        next retention run. Refused above the high watermark, as Kafka does.
        """
        with self._lock:
            self._check_writable()
            if offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.directory.name} to {offset}, "
                    f"above the high watermark {self._hw}",
                    log_start_offset=self._log_start,
                    high_watermark=self._hw,
                )
            if offset <= self._log_start:
                return False
            self._log_start = offset
            self._ckpt_log_start.write(offset)
            self._epochs.truncate_from_start(offset)
            return True

    # -- retention -----------------------------------------------------------------------

    def delete_retention_segments(self, now_ms: int) -> int:
        """Delete closed segments past retention_ms / retention_bytes or below the log start.

        Never the active segment, never data at or above the high watermark. The
        log start offset advances and is checkpointed before any file goes.
        Returns the number of segments deleted.
        """
        with self._lock:
            self._check_writable()
            segs = self._segments
            closed = [SegmentStats(s.base_offset, self._bases[i + 1], s.size) for i, s in enumerate(segs[:-1])]
            count, reason = deletable_prefix(
                closed,
                total_bytes=sum(s.size for s in segs),
                log_start_offset=self._log_start,
                high_watermark=self._hw,
                config=self._config,
                now_ms=now_ms,
                largest_timestamp=lambda i: segs[i].largest_timestamp(),
            )
            if count == 0:
                return 0
            doomed = segs[:count]
            new_start = max(self._log_start, self._bases[count])
            if new_start != self._log_start:
                self._log_start = new_start
                self._ckpt_log_start.write(new_start)
                self._epochs.truncate_from_start(new_start)
            self._recovery_point = max(self._recovery_point, new_start)
            self._hw = max(self._hw, new_start)
            del self._segments[:count]
            del self._bases[:count]
            for seg in doomed:
                seg.delete()
            fsync_dir(self.directory)
            log.info(
                "%s: deleted %d segment(s) %s; log start offset now %d",
                self.directory.name,
                count,
                reason,
                new_start,
            )
            return count

    # -- the cleaner's hooks -------------------------------------------------------------

    def cleanable_segments(self) -> tuple[list[CleanableSegment], int, int]:
        """(closed segments with their stats, log start offset, high watermark), for the cleaner."""
        with self._lock:
            self._check_writable()
            out = [
                CleanableSegment(seg, seg.base_offset, self._bases[i + 1], seg.size, seg.largest_timestamp())
                for i, seg in enumerate(self._segments[:-1])
            ]
            return out, self._log_start, self._hw

    def swap_cleaned_segment(self, sources: list[LogSegment], scratch: Path, base_offset: int) -> bool:
        """Replace `sources` (consecutive closed segments) by the segment built in `scratch`.

        Returns False, changing nothing, if the log moved on meanwhile (retention or
        truncation removed a source). Holds the lock only for renames and deletes;
        readers that planned on the old segments keep reading their (unlinked) files.
        """
        with self._lock:
            self._check_writable()
            try:
                i = next(k for k, seg in enumerate(self._segments) if seg is sources[0])
            except StopIteration:
                return False
            current = self._segments[i : i + len(sources)]
            if i + len(sources) >= len(self._segments) or any(
                a is not b for a, b in zip(current, sources, strict=True)
            ):
                return False
            commit_swap(self.directory, scratch, base_offset)
            finish_swap(self.directory, base_offset, [s.base_offset for s in sources])
            new = LogSegment.open(self.directory, base_offset, index_interval_bytes=self._config.index_interval_bytes)
            for seg in sources:
                seg.discard()
            self._segments[i : i + len(sources)] = [new]
            self._bases[i : i + len(sources)] = [base_offset]
            return True

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, write the checkpoints, release the directory.

        A flush that fails is raised after the files and the directory are released anyway: a log
        whose close failed is closed (without its checkpoints), so nothing keeps it half open.
        """
        with self._lock:
            if self._closed:
                return
        flush_error: BaseException | None = None
        if self._failed is None:
            try:
                self.flush()
            except BaseException as exc:  # raised again below, once the files are released
                flush_error = exc
        with self._lock:
            if self._closed:
                if flush_error is not None:
                    raise flush_error
                return
            try:
                if self._failed is None and flush_error is None:
                    self._recovery_point = max(self._recovery_point, self._leo)
                    for seg in self._segments:
                        seg.trim()  # the files at rest are exactly their batches
                        seg.write_indexes()
                        seg.fsync()
                    self._write_checkpoints_locked()
            finally:
                for seg in self._segments:
                    seg.close()
                self._closed = True
                self._dir_lock.release()
        if flush_error is not None:
            raise flush_error

    def discard(self) -> None:
        """Release the files without flushing or writing checkpoints: the directory is about to be deleted.

        After this nothing writes into the directory again, so it can be renamed
        and removed while a new log opens at the same path.
        """
        with self._lock:
            if self._closed:
                return
            try:
                for seg in self._segments:
                    seg.discard()
            finally:
                self._closed = True
                self._dir_lock.release()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> str | None:
        """Why the log stopped taking writes after an I/O error (its close then skips the flush), else None."""
        return self._failed

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError(f"log {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failed is not None:
            raise LogStorageError(f"log {self.directory} is offline after an I/O error: {self._failed}")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory.name}, start={self._log_start}, end={self._leo}, "
            f"hw={self._hw}, segments={len(self._segments)})"
        )
