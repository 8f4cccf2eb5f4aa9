"""One log segment: a `.log` file of whole v2 batches plus its offset and time indexes.

A segment knows positions and offsets inside itself; the partition log decides
which segment to use, when to roll and what is durable. All methods except
fsync() and read_bytes() are called under the log's lock (see log.py); those
two use the refcounted FileHandle so that a concurrent delete cannot pull the
fd out from under them.

Tail state (next offset, largest timestamp, bytes and batch spans since the last
index entry) is known for the active segment and scanned ones, else computed on
first need by load_state(); the spans let reads at the log end skip the header
walk (docs/on-disk-format.md, "Index files in memory").
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path

from kraftpy.protocol.records.header import BatchHeader
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX
from kraftpy.storage.errors import LogStorageError
from kraftpy.storage.files import FileHandle, pread_exact, pwrite_all, remove_if_exists
from kraftpy.storage.layout import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_path
from kraftpy.storage.offset_index import IndexCorruptError, OffsetIndex
from kraftpy.storage.scan import BatchSpan, CorruptSegmentError, iter_file_batches, walk_headers
from kraftpy.storage.time_index import TimeIndex
from kraftpy.storage.txn_index import TxnIndex

log = logging.getLogger(__name__)


# Spans kept in memory past the last index entry; index_interval_bytes (4 KiB) keeps them to about 70.
MAX_TAIL_SPANS = 4096
_POSITION = itemgetter(0)
_LAST_OFFSET = itemgetter(3)


# What LogSegment.append is told of each batch: (base offset, last offset, size, max timestamp, leader epoch).
AppendSpan = tuple[int, int, int, int, int]


def append_span(header: BatchHeader) -> AppendSpan:
    """The AppendSpan of a batch written as it is (its header's own offsets and epoch)."""
    return header.base_offset, header.last_offset, header.size, header.max_timestamp, header.partition_leader_epoch


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        handle: FileHandle,
        *,
        size: int,
        index_interval_bytes: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._handle = handle
        self.size = size  # the bytes written; the file may be longer (preallocated space, see `preallocate`)
        self._file_bytes = size
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.txn_index = TxnIndex(self.txn_index_path)
        # Tail state; meaningful once _state_known.
        self._state_known = False
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0
        self.last_epoch = -1
        # Bumped with each new index entry: the log re-checks segment_index_bytes only then.
        self.index_entries_added = 0
        # The batches from the last offset-index entry (or position 0 before the first) to the end, in
        # order; None while unknown (an opened segment, until its next index entry; after a truncation).
        self._tail: list[BatchSpan] | None = [] if size == 0 else None

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int, preallocate_bytes: int = 0
    ) -> LogSegment:
        """A new empty segment; fails if its .log already exists. `preallocate_bytes`: see `preallocate`."""
        path = segment_path(directory, base_offset, LOG_SUFFIX)
        handle = FileHandle(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        seg = cls(directory, base_offset, handle, size=0, index_interval_bytes=index_interval_bytes, created_ms=now_ms)
        seg.preallocate(preallocate_bytes)
        seg._offset_index = OffsetIndex(seg.index_path, base_offset)
        seg._time_index = TimeIndex(seg.time_index_path, base_offset)
        # Index files of an older incarnation of this base offset would lie about the new log.
        for index_path in (seg.index_path, seg.time_index_path):
            fd = os.open(index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
        seg.txn_index.delete()
        seg._state_known = True
        return seg

    @classmethod
    def open(cls, directory: Path, base_offset: int, *, index_interval_bytes: int) -> LogSegment:
        """An existing segment, taken to be as long as its file: recovery finds a preallocated tail."""
        path = segment_path(directory, base_offset, LOG_SUFFIX)
        handle = FileHandle(path, os.O_RDWR)
        st = os.fstat(handle.fd)
        return cls(
            directory,
            base_offset,
            handle,
            size=st.st_size,
            index_interval_bytes=index_interval_bytes,
            created_ms=st.st_mtime_ns // 1_000_000,
        )

    @property
    def log_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return segment_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX)

    @property
    def fd(self) -> int:
        return self._handle.fd

    def close(self) -> None:
        if self._handle.closed:
            return
        self.write_indexes()
        self._handle.close()

    def preallocate(self, file_bytes: int) -> None:
        """Make the file `file_bytes` long ahead of the writes (Kafka's `preallocate`; sparse, as
        Kafka's setLength): an append then changes no file size, so its fdatasync commits no
        file-system journal. The space past `size` reads as zeros; a reader walking the file stops
        there (scan.unwritten_from) and recovery cuts it off. The log trims it when the segment
        stops being active (`trim`)."""
        if file_bytes > self._file_bytes:
            os.ftruncate(self._handle.fd, file_bytes)
            self._file_bytes = file_bytes

    def trim(self) -> bool:
        """Cut preallocated space off the end, so the file is exactly its batches; whether it cut."""
        if self._file_bytes <= self.size:
            return False
        os.ftruncate(self._handle.fd, self.size)
        self._file_bytes = self.size
        return True

    def discard(self) -> None:
        """Drop the handle without touching the files (they were replaced by a cleaned segment)."""
        self._handle.close()

    def delete(self) -> None:
        """Remove the files; the .log goes first, so a crash midway leaves only orphan indexes."""
        self._handle.close()
        remove_if_exists(self.log_path)
        remove_if_exists(self.index_path)
        remove_if_exists(self.time_index_path)
        self.txn_index.delete()

    # -- indexes and tail state ------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._load_indexes()
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def _load_indexes(self) -> None:
        """Load both index files, checking them against the log; rebuild both if either fails."""
        try:
            offsets = OffsetIndex.load(self.index_path, self.base_offset, log_size=self.size)
            times = TimeIndex.load(self.time_index_path, self.base_offset, max_offset=INT64_MAX)
            self._check_index_against_log(offsets, times)
        except IndexCorruptError as exc:
            log.warning("rebuilding the indexes of %s: %s", self.log_path, exc)
            self._fresh_indexes()
            self._state_known = False
            try:
                self.load_state(self.size, from_scratch=True)
            except CorruptSegmentError as bad:
                raise LogStorageError(
                    f"{self.log_path} is corrupt below the recovery point at position {bad.position}: {bad.message}"
                ) from bad
            return
        self._offset_index, self._time_index = offsets, times

    def _fresh_indexes(self) -> None:
        """Empty in-memory indexes whose files are rewritten on the next write_indexes()."""
        self._offset_index = OffsetIndex(self.index_path, self.base_offset)
        self._time_index = TimeIndex(self.time_index_path, self.base_offset)
        self._tail = None
        self._offset_index.forget_file()
        self._time_index.forget_file()

    def _check_index_against_log(self, offsets: OffsetIndex, times: TimeIndex) -> None:
        last = offsets.last_entry
        if last is not None:
            try:
                span = next(walk_headers(self.fd, last.position, self.size, chunk_bytes=4096))
            except (CorruptSegmentError, StopIteration):
                raise IndexCorruptError(f"last entry {last} does not point at a batch") from None
            if span.base_offset != last.offset:
                raise IndexCorruptError(f"last entry {last} points at a batch with base offset {span.base_offset}")
        last_time = times.last_entry
        if last_time is not None:
            start = offsets.lookup(last_time.offset).position
            try:
                for span in walk_headers(self.fd, start, self.size):
                    if span.base_offset >= last_time.offset:
                        break
                else:
                    span = None
            except CorruptSegmentError:
                span = None
            if span is None or span.base_offset != last_time.offset or span.max_timestamp != last_time.timestamp:
                raise IndexCorruptError(f"last time index entry {last_time} does not match the log")

    def load_state(self, upto: int, *, from_scratch: bool = False) -> None:
        """Trust the batches in [0, upto): fit the indexes to them and compute the tail state.

        Walks only from the last offset-index entry below `upto` (or from 0 when
        `from_scratch` or there is none, rebuilding the indexes). Raises
        CorruptSegmentError if a header in that range is not sane.
        """
        offsets, times = self.offset_index, self.time_index
        offsets.truncate_to_position(upto)
        last = offsets.last_entry
        self.last_epoch = -1
        self._tail = None  # rebuilt below from position 0, else from the next index entry on
        if from_scratch or last is None:
            offsets.reset()
            times.reset()
            self._tail = []
            self.max_timestamp, self.offset_of_max_timestamp = -1, -1
            self._bytes_since_index = 0
            self.next_offset = self.base_offset
            self.first_batch_timestamp = None
            for span in walk_headers(self.fd, 0, upto):
                self._check_offsets(span, self.next_offset)
                self._note_batch(span)
                self.last_epoch = span.leader_epoch
            self._state_known = True
            return
        spans = list(walk_headers(self.fd, last.position, upto))
        if spans[0].base_offset != last.offset:
            raise CorruptSegmentError(f"index entry {last} points at base offset {spans[0].base_offset}", last.position)
        for previous, span in itertools.pairwise(spans):
            self._check_offsets(span, previous.last_offset + 1)
        self.next_offset = spans[-1].last_offset + 1
        self.last_epoch = spans[-1].leader_epoch
        self._tail = spans if len(spans) <= MAX_TAIL_SPANS else None
        times.truncate_to_offset(self.next_offset)
        # The time index holds the largest timestamp up to the batch at `last`;
        # the batches walked from there hold the rest.
        last_time = times.last_entry
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time.timestamp, last_time.offset
        else:
            self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        for span in spans:
            if span.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = span.max_timestamp, span.base_offset
        # As if just appended: the batch at `last` was indexed, then all walked batches counted.
        self._bytes_since_index = upto - last.position
        self.first_batch_timestamp = self._first_batch_max_timestamp(upto)
        self._state_known = True

    def _check_offsets(self, span: BatchSpan, next_offset: int) -> None:
        """baseOffset lies outside the batch CRC: offsets that go back, or that no index
        entry of this segment can hold, mean a damaged header, never a batch to trust."""
        if span.base_offset < next_offset or not 0 <= span.last_offset - self.base_offset <= INT32_MAX:
            raise CorruptSegmentError(
                f"batch offsets {span.base_offset}..{span.last_offset} do not follow {next_offset - 1} "
                f"in a segment based at {self.base_offset}",
                span.position,
            )

    def _first_batch_max_timestamp(self, upto: int) -> int | None:
        if upto == 0:
            return None
        first = next(walk_headers(self.fd, 0, upto, chunk_bytes=4096))
        return first.max_timestamp

    def ensure_state(self) -> None:
        if not self._state_known:
            self.load_state(self.size)

    def _note_batch(self, span: BatchSpan) -> None:
        """Account for one batch written at span.position (Kafka's LogSegment.append bookkeeping)."""
        base_offset, position, size, max_ts = span.base_offset, span.position, span.size, span.max_timestamp
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, base_offset
        if self._bytes_since_index > self.index_interval_bytes:
            assert self._offset_index is not None and self._time_index is not None
            self._offset_index.append(base_offset, position)
            self.index_entries_added += 1
            if self.max_timestamp >= 0:
                self._time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
            self._tail = [span]
        elif self._tail is not None:
            self._tail.append(span)
            if len(self._tail) > MAX_TAIL_SPANS:  # a huge index_interval_bytes: back to walking the file
                self._tail = None
        self._bytes_since_index += size
        if position == 0:
            self.first_batch_timestamp = max_ts
        self.next_offset = span.last_offset + 1

    def on_roll(self) -> None:
        """The segment stops being active: record its largest timestamp, write out the indexes and
        trim preallocated space."""
        if self.trim():
            # durable now: a flush that finds this segment already flushed would not fsync it
            # again, and a segment below the recovery point is never validated on open
            os.fdatasync(self._handle.fd)
        self.ensure_state()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.write_indexes()
        self._tail = None  # only the active segment's tail is read that often

    def write_indexes(self) -> None:
        if self._offset_index is not None:
            self._offset_index.write_pending()
        if self._time_index is not None:
            self._time_index.write_pending()

    @property
    def index_bytes(self) -> int:
        """Bytes the time index (the larger: 12-byte entries, at most one per offset entry + 1) may reach."""
        return (len(self.offset_index) + 1) * 12

    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's mtime for a segment without timestamps (as Kafka)."""
        self.ensure_state()
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    # -- appends ---------------------------------------------------------------------

    def append(self, buffers: Sequence[bytes | memoryview], spans: Sequence[AppendSpan], total_bytes: int) -> None:
        """Write `buffers` (`total_bytes` long) at the end and index the batches.

        `spans` = (base offset, last offset, size, max timestamp, leader epoch) of each
        batch. On an I/O error the file is cut back to its old size, so memory and disk agree.
        """
        position = self.size
        try:
            pwrite_all(self._handle.fd, buffers, position, total_bytes)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._handle.fd, position)
                self._file_bytes = position
            raise LogStorageError(f"write to {self.log_path} failed: {exc}") from exc
        self._file_bytes = max(self._file_bytes, position + total_bytes)
        for base, last, size, max_ts, epoch in spans:
            self._note_batch(BatchSpan(position, size, base, last, epoch, max_ts))
            position += size
        self.size = position

    def append_recovered(self, span: BatchSpan) -> None:
        """Account for a batch recovery found sound at span.position (already on disk)."""
        self._note_batch(span)
        self.last_epoch = span.leader_epoch

    # -- recovery ----------------------------------------------------------------------

    def prepare_recovery(self, recovery_point: int) -> int:
        """Load what is trusted below `recovery_point`; returns the position to validate from.

        Index entries at or past the recovery point are dropped unread (they may
        describe bytes that never reached the disk); the rest are checked against
        the log. If anything below the recovery point looks wrong, the whole
        segment is validated instead (returns 0): slower, never wrong.
        """
        try:
            offsets = OffsetIndex.load(self.index_path, self.base_offset, log_size=self.size)
            times = TimeIndex.load(self.time_index_path, self.base_offset, max_offset=INT64_MAX)
        except IndexCorruptError as exc:
            log.info("%s: index unusable (%s); validating the whole segment", self.log_path, exc)
            return self.reset_for_recovery()
        offsets.truncate_to_offset(recovery_point)
        times.truncate_to_offset(recovery_point)
        self._offset_index, self._time_index = offsets, times
        start = 0 if offsets.last_entry is None else offsets.last_entry.position
        upto = start
        try:
            for span in walk_headers(self.fd, start, self.size):
                if span.last_offset >= recovery_point:
                    break
                upto = span.end
        except CorruptSegmentError:
            pass  # a torn batch at or below the recovery point: the validating scan cuts it off
        try:
            self.load_state(upto)
        except CorruptSegmentError as exc:
            log.warning("%s: index disagrees with the log (%s); validating the whole segment", self.log_path, exc)
            return self.reset_for_recovery()
        if self.next_offset < recovery_point and upto < self.size:
            log.error(
                "%s: data ends at offset %d, below the recovery point %d",
                self.log_path,
                self.next_offset,
                recovery_point,
            )
        return upto

    def reset_for_recovery(self) -> int:
        """Forget indexes and state: recovery validates this segment from position 0."""
        self._fresh_indexes()
        self.load_state(0)
        return 0

    # -- lookups (under the log's lock) -------------------------------------------------

    def _walk_from_index(self, start: int, limit: int, boundary: int = 0) -> Iterator[BatchSpan]:
        """Walk batch headers from an index position.

        Opening checks only the last index entry (as Kafka's sanity check does), so a
        damaged entry in the middle can point inside a batch. When the header there is
        not sane, walk from `boundary` instead: a known batch start at or below `start`
        (position 0, the segment start, always is one).
        """
        if start != boundary:
            try:
                next(walk_headers(self._handle.fd, start, limit), None)
            except CorruptSegmentError:
                log.warning("index of %s points inside a batch at %d; scanning from %d", self.log_path, start, boundary)
                start = boundary
        yield from walk_headers(self._handle.fd, start, limit)

    def _spans_from(self, start: int, limit: int, boundary: int = 0) -> Iterable[BatchSpan]:
        """The batches in [start, limit) from a batch boundary `start`: from memory when the tail holds
        them, else walked on disk (_walk_from_index)."""
        tail = self._tail
        if tail is not None and (tail[0].position if tail else self.size) <= start:
            lo = bisect_left(tail, start, key=_POSITION)
            hi = bisect_left(tail, limit, lo, key=_POSITION)
            if hi == lo or tail[hi - 1].end <= limit:
                return tail[lo:hi]
        return self._walk_from_index(start, limit, boundary)

    def find_batch(self, offset: int, limit: int) -> BatchSpan | None:
        """The first batch in [0, limit) whose last offset >= `offset`."""
        start = self.offset_index.lookup(offset).position
        tail = self._tail
        if tail and tail[0].position <= start and limit >= self.size:
            # The common case, a lookup past the last index entry of the whole segment: a bisection.
            at = bisect_left(tail, offset, key=_LAST_OFFSET)
            return tail[at] if at < len(tail) else None
        for span in self._spans_from(start, limit):
            if span.last_offset >= offset:
                return span
        return None

    def plan_read(
        self, offset: int, max_bytes: int, *, max_offset: int | None, min_one_batch: bool, limit: int
    ) -> tuple[int, int]:
        """(start, end) positions of the whole batches a read returns; start == end for none.

        The range starts at the batch holding `offset`, never holds a batch whose
        last offset is >= `max_offset`, and ends at the last batch boundary within
        `max_bytes` (or after the first batch, if it alone is larger and
        `min_one_batch`).
        """
        first = self.find_batch(offset, limit)
        if first is None or (max_offset is not None and first.last_offset >= max_offset):
            return 0, 0
        start = first.position
        end_bound = limit
        if max_offset is not None:
            stop = self.find_batch(max_offset, limit)
            if stop is not None:
                end_bound = stop.position
        target = start + max_bytes
        if target >= end_bound:
            return start, end_bound
        if first.end >= target:  # the first batch alone fills max_bytes (or exceeds it)
            return (start, first.end) if first.end == target or min_one_batch else (start, start)
        # The last indexed batch start at or below the target is a boundary; walk from there.
        end = max(self.offset_index.lookup_position(target).position, start)
        for span in self._spans_from(end, end_bound, boundary=start):
            if span.end > target:
                break
            end = span.end
        if end == start and min_one_batch:
            end = first.end
        return start, end

    def find_timestamp(self, timestamp: int, min_offset: int, limit: int) -> BatchSpan | None:
        """The first batch with maxTimestamp >= `timestamp` and last offset >= `min_offset`."""
        entry = self.time_index.lookup(timestamp)
        from_offset = max(min_offset, entry.offset if entry is not None else self.base_offset)
        start = self.offset_index.lookup(from_offset).position
        for span in self._spans_from(start, limit):
            if span.max_timestamp >= timestamp and span.last_offset >= min_offset:
                return span
        return None

    # -- bulk reads and fsync (outside the log's lock) ------------------------------------

    def read_bytes(self, start: int, end: int) -> bytes:
        fd = self._handle.acquire()  # (not `with use()`: this is every fetch's path)
        try:
            return pread_exact(fd, end - start, start)
        finally:
            self._handle.release()

    def batches(self, *, max_batch_bytes: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Every batch of this (closed) segment with its bytes; for the cleaner, outside the log's lock.

        Raises CorruptSegmentError at a malformed batch; the caller checks CRCs.
        """
        with self._handle.use() as fd:
            yield from iter_file_batches(fd, 0, self.size, max_batch_bytes=max_batch_bytes)

    def reading(self) -> contextlib.AbstractContextManager[int]:
        """The fd for a read outside the log's lock (a scrub); HandleClosedError once the segment is gone."""
        return self._handle.use()

    def fsync(self) -> None:
        with self._handle.use() as fd:
            os.fdatasync(fd)
        if self._offset_index is not None:
            self._offset_index.fsync()
        if self._time_index is not None:
            self._time_index.fsync()

    # -- truncation (under the log's lock) ---------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset` (a batch holding it goes whole).

        Durable before returning: the cut and the index files are fsynced. Returns
        the number of bytes removed.
        """
        span = self.find_batch(offset, self.size)
        if span is None:
            return 0
        return self.truncate_at_position(span.position)

    def truncate_at_position(self, position: int) -> int:
        removed = self.size - position
        if removed <= 0:
            return 0
        os.ftruncate(self._handle.fd, position)
        os.fdatasync(self._handle.fd)
        self.size = self._file_bytes = position
        self.load_state(position)
        self.txn_index.truncate_to(self.next_offset)
        self.write_indexes()
        self.offset_index.fsync()
        self.time_index.fsync()
        return removed

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size})"
