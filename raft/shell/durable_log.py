"""The durable Raft log: `RaftLog` over the storage engine's `PartitionLog` plus the LMDB snapshot store.

Design notes: docs/raft.md, section "raft/shell/durable_log.py".
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from pathlib import Path

import cbor2
import crc32c

from kraftpy.protocol.errors import RESOURCE_ERRNOS, ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.raft.actions import Action, apply_log_action
from kraftpy.raft.entry_batches import decode_entries, encode_entries
from kraftpy.raft.log import Entry, OffsetAndEpoch
from kraftpy.raft.shell.snapshot_store import DIR_NAME as SNAPSHOT_DIR_NAME
from kraftpy.raft.shell.snapshot_store import SnapshotStore
from kraftpy.storage import LogConfig, PartitionLog
from kraftpy.storage.files import fsync_dir

log = logging.getLogger(__name__)

METADATA_LOG_DIR = "__cluster_metadata-0"
TRUNCATION_JOURNAL = "raft-truncation-journal"
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
CHECKPOINT_INTERVAL_S = 1.0

# The metadata log keeps everything until a snapshot covers it: no time or size retention.
RAFT_LOG_CONFIG = LogConfig(
    segment_bytes=16 * 1024 * 1024,
    retention_ms=-1,
    retention_bytes=-1,
    max_message_bytes=8 * 1024 * 1024,
    # every commit waits for a follower's fdatasync; into preallocated space it commits no
    # file-system journal (docs/perf-raft.md, session 29)
    preallocate=True,
)


class DurableLogError(KafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class DurableLog:
    """A RaftLog on disk. Create with `DurableLog.open(directory)`."""

    def __init__(self, directory: Path, plog: PartitionLog, snapshots: SnapshotStore, cache_bytes: int) -> None:
        self.directory = directory
        self._plog = plog
        self._snapshots = snapshots
        self._cache_limit = cache_bytes
        # decoded batches of the log's tail: parallel lists, batch i covers [bases[i], bases[i] + len)
        self._cbatches: list[list[Entry]] = []
        self._cbases: list[int] = []
        self._cbytes = 0
        self._start_epoch = 0
        self._last_checkpoint = 0.0
        self._checkpoint_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        log_config: LogConfig = RAFT_LOG_CONFIG,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        snapshots_keep: int = 2,
    ) -> DurableLog:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        plog = PartitionLog.open(directory, log_config)
        try:
            snapshots = SnapshotStore(directory / SNAPSHOT_DIR_NAME, keep=snapshots_keep)
        except BaseException:
            plog.close()
            raise
        self = cls(directory, plog, snapshots, cache_bytes)
        try:
            self._finish_truncation()
            self._reconcile_snapshots()
        except BaseException:
            self.close()
            raise
        return self

    # ---- RaftLog (reads) ------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._plog.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._plog.log_end_offset

    @property
    def high_watermark(self) -> int:
        """The last high watermark this node exposed, as checkpointed (a replay bound on start)."""
        return self._plog.high_watermark

    @property
    def last_epoch(self) -> int:
        plog = self._plog
        if plog.log_end_offset > plog.log_start_offset:
            return plog.latest_epoch
        return self._start_epoch

    def _epoch_entries(self) -> list[tuple[int, int]]:
        end = self._plog.log_end_offset
        return [(e.epoch, e.start_offset) for e in self._plog.leader_epoch_cache.entries if e.start_offset < end]

    def end_offset_for(self, epoch: int) -> OffsetAndEpoch:
        plog = self._plog
        end = plog.log_end_offset
        if end > plog.log_start_offset:
            latest = plog.latest_epoch
            if 0 <= latest <= epoch:
                return OffsetAndEpoch(end, latest)  # the common case: the fetcher is on our last epoch
        entries = self._epoch_entries()
        i = bisect.bisect_right([e for e, _ in entries], epoch) - 1
        if i >= 0:
            stop = entries[i + 1][1] if i + 1 < len(entries) else end
            return OffsetAndEpoch(stop, entries[i][0])
        start = plog.log_start_offset
        if (start > 0 or self._start_epoch > 0) and self._start_epoch <= epoch:
            return OffsetAndEpoch(start, self._start_epoch)
        return OffsetAndEpoch(-1, -1)

    def entry_epoch(self, offset: int) -> int | None:
        start, end = self._plog.log_start_offset, self._plog.log_end_offset
        if start <= offset < end:
            entries = self._epoch_entries()
            i = bisect.bisect_right([s for _, s in entries], offset) - 1
            return entries[i][0] if i >= 0 else None
        if offset == start - 1:
            return self._start_epoch
        return None

    def read(self, offset: int, max_bytes: int) -> list[Entry]:
        start, end = self._plog.log_start_offset, self._plog.log_end_offset
        if offset < start or offset > end:
            raise DurableLogError(f"read at {offset} outside the log [{start}, {end}]")
        if offset == end:
            return []
        if self._cbases and offset >= self._cbases[0]:
            return self._read_cache(offset, max_bytes)
        return self._read_disk(offset, max_bytes)

    def _read_cache(self, offset: int, max_bytes: int) -> list[Entry]:
        i = bisect.bisect_right(self._cbases, offset) - 1
        out = [e for e in self._cbatches[i] if e.offset >= offset]
        size = sum(e.size_bytes for e in out)
        for batch in self._cbatches[i + 1 :]:
            batch_size = sum(e.size_bytes for e in batch)
            if size + batch_size > max_bytes:
                break
            out.extend(batch)
            size += batch_size
        return out

    def _read_disk(self, offset: int, max_bytes: int) -> list[Entry]:
        data = self._plog.read(offset, max(max_bytes, 1))
        out: list[Entry] = []
        size = 0
        for batch in decode_entries(data):
            kept = [e for e in batch if e.offset >= offset]
            batch_size = sum(e.size_bytes for e in kept)
            if out and size + batch_size > max_bytes:
                break
            out.extend(kept)
            size += batch_size
        return out

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return self._snapshots.latest()

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        return self._snapshots.size(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self._snapshots.read(snapshot_id, position, max_bytes)

    def snapshot_data(self, snapshot_id: OffsetAndEpoch) -> bytes:
        """A whole complete snapshot, CRC-checked (loading the state machine)."""
        return self._snapshots.read_all(snapshot_id)

    @property
    def snapshots(self) -> SnapshotStore:
        return self._snapshots

    # ---- writes (the shell performs the core's actions) -----------------------------------

    def apply(self, action: Action) -> bool:
        """Perform a log action of the core; False if `action` is not a log action."""
        return apply_log_action(self, action)

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None:
        self._snapshots.write_chunk(snapshot_id, position, data)

    def append(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        if not entries:
            return
        self._plog.append_as_follower(encode_entries(entries, wall_ms()))
        self._cache_append(list(entries))

    def flush(self, up_to_offset: int) -> None:
        """fsync everything below `up_to_offset` (the shell's flush thread); checkpoints now and then."""
        self._plog.flush(up_to_offset)
        now = time.monotonic()
        if now - self._last_checkpoint >= CHECKPOINT_INTERVAL_S and self._checkpoint_lock.acquire(blocking=False):
            try:
                self._plog.write_checkpoints()  # recovery point and high watermark: a shorter scan on open
                self._last_checkpoint = now
            except OSError as exc:
                if exc.errno not in RESOURCE_ERRNOS:
                    raise
                # Only an optimisation: the old checkpoint stays whole (atomic write) and recovery from an
                # older recovery point is always safe. A full disk must not stop Raft; try again later.
                log.warning("checkpoints of %s not written (%s); the log stays correct, retrying", self.directory, exc)
            finally:
                self._checkpoint_lock.release()

    def set_high_watermark(self, offset: int) -> None:
        self._plog.high_watermark = offset

    def truncate_to(self, offset: int) -> None:
        """Drop entries at and above `offset`, durably; entries below it survive any crash."""
        start, end = self._plog.log_start_offset, self._plog.log_end_offset
        if offset < start:
            raise DurableLogError(f"truncate to {offset} below the log start {start}")
        if offset >= end:
            self._plog.truncate_to(offset)  # drops an epoch that starts at the log end, as Kafka
            return
        holding = list(decode_entries(self._plog.read(offset, 1)))  # the whole batch holding `offset`
        batch_base = holding[0][0].offset if holding and holding[0] else offset
        if batch_base == offset:
            self._plog.truncate_to(offset)
        else:
            # the batch also holds entries below the cut (and maybe below the log start, which stay gone)
            base = max(batch_base, start)
            kept = [e for e in holding[0] if base <= e.offset < offset]
            self._write_journal(base, offset, kept)
            self._truncate_and_restore(base, kept)
            self._remove_journal()
        self._cache_truncate(offset)
        if self._plog.log_end_offset != offset:
            raise DurableLogError(f"truncation to {offset} left the log end at {self._plog.log_end_offset}")

    def _truncate_and_restore(self, base: int, kept: list[Entry]) -> None:
        """Cut the log at `base` (a batch start, or the log start inside the first batch), then
        append `kept` again and fsync it."""
        if base <= self._plog.log_start_offset:
            self._plog.truncate_fully_and_start_at(self._plog.log_start_offset)
        else:
            self._plog.truncate_to(base)
        if kept:
            self._plog.append_as_follower(encode_entries(kept, wall_ms()))
            self._plog.flush(kept[-1].offset + 1)

    def _write_journal(self, base: int, offset: int, kept: list[Entry]) -> None:
        body = cbor2.dumps({"base": base, "offset": offset, "batch": encode_entries(kept, wall_ms()) if kept else b""})
        path = self.directory / TRUNCATION_JOURNAL
        with open(path, "wb") as f:
            f.write(crc32c.crc32c(body).to_bytes(4, "big") + body)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)

    def _remove_journal(self) -> None:
        (self.directory / TRUNCATION_JOURNAL).unlink(missing_ok=True)
        fsync_dir(self.directory)

    def _finish_truncation(self) -> None:
        """Complete a mid-batch truncation a crash interrupted (the journal is its intent)."""
        path = self.directory / TRUNCATION_JOURNAL
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return
        body = raw[4:]
        if len(raw) < 4 or int.from_bytes(raw[:4], "big") != crc32c.crc32c(body):
            # torn journal: it was never complete, so the truncation had not started
            log.warning("%s: ignoring a torn truncation journal", self.directory)
            self._remove_journal()
            return
        intent = cbor2.loads(body)
        kept = [e for batch in decode_entries(intent["batch"]) for e in batch]
        base = int(intent["base"])
        log.warning("%s: finishing a truncation to %d interrupted by a crash", self.directory, intent["offset"])
        # A log that now ends before the batch lost an unflushed tail in the crash; the kept
        # entries were above it, so they were never durable and there is nothing to restore.
        if self._plog.log_start_offset <= base <= self._plog.log_end_offset:
            self._truncate_and_restore(base, kept)
        self._remove_journal()

    def trim(self, before_offset: int) -> None:
        """Drop the log below `before_offset`; the latest snapshot must end exactly there."""
        snapshot = self._snapshots.latest()
        if snapshot is None or snapshot.offset != before_offset:
            raise DurableLogError(f"trim to {before_offset} without a snapshot ending there ({snapshot})")
        if before_offset <= self._plog.log_start_offset:
            return
        if before_offset > self._plog.log_end_offset:
            raise DurableLogError(f"trim to {before_offset} beyond the log end {self._plog.log_end_offset}")
        self._plog.high_watermark = max(self._plog.high_watermark, before_offset)
        self._plog.increment_log_start_offset(before_offset)
        self._start_epoch = snapshot.epoch
        self._plog.delete_retention_segments(wall_ms())
        self._cache_trim(before_offset)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        """Store a complete snapshot of the state machine durably (the core then trims)."""
        self._snapshots.create(snapshot_id, payload)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Make the fetched snapshot durable, then restart the log empty at its end offset."""
        self._snapshots.install_pending(snapshot_id)
        self._restart_at(snapshot_id)

    def _restart_at(self, snapshot_id: OffsetAndEpoch) -> None:
        self._plog.truncate_fully_and_start_at(snapshot_id.offset)
        self._start_epoch = snapshot_id.epoch
        self._cbatches, self._cbases, self._cbytes = [], [], 0

    def _reconcile_snapshots(self) -> None:
        plog = self._plog
        snapshot = self._snapshots.latest()
        if snapshot is not None and snapshot.offset > plog.log_start_offset:
            if (
                snapshot.offset <= plog.log_end_offset
                and self.entry_epoch(snapshot.offset - 1) == snapshot.epoch
                and plog.log_start_offset < snapshot.offset
            ):
                log.info("%s: trimming the log to snapshot %s (a crash came before the trim)", self.directory, snapshot)
                self._start_epoch = snapshot.epoch
                self.trim(snapshot.offset)
            else:
                log.info("%s: restarting the log at snapshot %s (crash in its install)", self.directory, snapshot)
                self._restart_at(snapshot)
        start = plog.log_start_offset
        if start > 0 and (snapshot is None or snapshot.offset != start):
            raise DurableLogError(
                f"{self.directory}: the log starts at offset {start} but no snapshot ends there "
                f"(latest {snapshot}); the Raft log is damaged: remove this directory to refetch it from the leader"
            )
        self._start_epoch = snapshot.epoch if snapshot is not None and start > 0 else 0

    # ---- the tail cache -------------------------------------------------------------------

    def _cache_append(self, entries: list[Entry]) -> None:
        # one cached batch per run the log wrote, so cache reads keep batch boundaries
        batch: list[Entry] = []
        for entry in entries:
            if batch and (entry.epoch != batch[0].epoch or entry.kind != batch[0].kind):
                self._cache_push(batch)
                batch = []
            batch.append(entry)
        if batch:
            self._cache_push(batch)
        if self._cbytes > self._cache_limit:
            drop = 0
            while self._cbytes > self._cache_limit // 2 and drop < len(self._cbatches) - 1:
                self._cbytes -= sum(e.size_bytes for e in self._cbatches[drop])
                drop += 1
            del self._cbatches[:drop]
            del self._cbases[:drop]

    def _cache_push(self, batch: list[Entry]) -> None:
        if self._cbases and self._cbases[-1] + len(self._cbatches[-1]) != batch[0].offset:
            self._cbatches, self._cbases, self._cbytes = [], [], 0  # not contiguous: start afresh
        self._cbatches.append(batch)
        self._cbases.append(batch[0].offset)
        self._cbytes += sum(e.size_bytes for e in batch)

    def _cache_truncate(self, offset: int) -> None:
        while self._cbases and self._cbases[-1] >= offset:
            self._cbytes -= sum(e.size_bytes for e in self._cbatches.pop())
            self._cbases.pop()
        if self._cbatches and self._cbases[-1] + len(self._cbatches[-1]) > offset:
            last = self._cbatches[-1]
            keep = [e for e in last if e.offset < offset]
            self._cbytes -= sum(e.size_bytes for e in last) - sum(e.size_bytes for e in keep)
            self._cbatches[-1] = keep

    def _cache_trim(self, before_offset: int) -> None:
        while self._cbases and self._cbases[0] + len(self._cbatches[0]) <= before_offset:
            self._cbytes -= sum(e.size_bytes for e in self._cbatches.pop(0))
            self._cbases.pop(0)
        if self._cbases and self._cbases[0] < before_offset:
            first = [e for e in self._cbatches[0] if e.offset >= before_offset]
            self._cbytes -= sum(e.size_bytes for e in self._cbatches[0]) - sum(e.size_bytes for e in first)
            self._cbatches[0] = first
            self._cbases[0] = before_offset

    # ---- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        try:
            if not self._plog.closed:
                self._plog.close()
        finally:
            self._snapshots.close()
