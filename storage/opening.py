"""Opening a partition directory: tidy interrupted operations, read checkpoints, recover, assemble.

Design notes: docs/on-disk-format.md, section "storage/opening.py".
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from kraftpy.protocol.validate import INT64_MAX
from kraftpy.storage import layout
from kraftpy.storage.checkpoints import OffsetCheckpoint
from kraftpy.storage.config import LogConfig
from kraftpy.storage.errors import CorruptCheckpointError
from kraftpy.storage.files import DirectoryLock, fsync_dir, remove_if_exists
from kraftpy.storage.leader_epoch_cache import LeaderEpochCache
from kraftpy.storage.recovery import recover_segments
from kraftpy.storage.segment import LogSegment
from kraftpy.storage.validation import hard_max_batch_bytes

if TYPE_CHECKING:
    from kraftpy.storage.log import PartitionLog

log = logging.getLogger(__name__)


def open_log(cls: type[PartitionLog], directory: Path, config: LogConfig, now_ms: int) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    dir_lock = DirectoryLock(directory)
    try:
        return _open_locked(cls, directory, config, now_ms, dir_lock)
    except BaseException:
        dir_lock.release()
        raise


def _open_locked(
    cls: type[PartitionLog], directory: Path, config: LogConfig, now_ms: int, dir_lock: DirectoryLock
) -> PartitionLog:
    changed_dir = tidy_directory(directory)

    log_start_ckpt = OffsetCheckpoint(directory / layout.LOG_START_OFFSET_CHECKPOINT)
    try:
        stored_start = log_start_ckpt.read()
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(
            f"{exc.message}. The log start offset cannot be derived from the segments; delete the file to "
            "fall back to the first segment's base offset (records deleted by DeleteRecords may reappear)",
            path=str(log_start_ckpt.path),
        ) from exc
    recovery_ckpt = OffsetCheckpoint(directory / layout.RECOVERY_POINT_CHECKPOINT)
    hw_ckpt = OffsetCheckpoint(directory / layout.HIGH_WATERMARK_CHECKPOINT)
    recovery_point = _read_or_fallback(recovery_ckpt)
    high_watermark = _read_or_fallback(hw_ckpt)

    holder: list[int] = [0]  # the log end offset, once known; the cache asks for it lazily
    epoch_path = directory / layout.LEADER_EPOCH_CHECKPOINT
    rebuild_epochs = not epoch_path.exists()
    try:
        epochs = LeaderEpochCache.load(epoch_path, lambda: holder[0])
    except CorruptCheckpointError as exc:
        log.warning("%s; rebuilding it from the batches' leader epochs", exc.message)
        epochs = LeaderEpochCache(epoch_path, lambda: holder[0])
        rebuild_epochs = True
    if rebuild_epochs and any(directory.glob("*" + layout.LOG_SUFFIX)):
        log.warning("%s: no usable %s; validating the whole log to rebuild it", directory.name, epoch_path.name)

    bases = sorted(
        base
        for base, suffix in (layout.parse_segment_name(p.name) or (None, None) for p in directory.iterdir())
        if suffix == layout.LOG_SUFFIX and base is not None
    )
    interval = config.index_interval_bytes
    created: list[LogSegment] = []  # new and empty: their names need the directory fsync, their bytes nothing
    if not bases:
        start = stored_start or 0
        segments = [LogSegment.create(directory, start, index_interval_bytes=interval, now_ms=now_ms)]
        created = list(segments)
        changed_dir = True
    else:
        segments = [LogSegment.open(directory, b, index_interval_bytes=interval) for b in bases]
    log_start = max(stored_start or 0, segments[0].base_offset)

    while len(segments) > 1 and segments[1].base_offset <= log_start:
        log.info(
            "%s: deleting segment %d, below the log start offset %d", directory.name, segments[0].base_offset, log_start
        )
        segments.pop(0).delete()
        changed_dir = True

    if recovery_point is None or rebuild_epochs:
        recovery_point = log_start
    recovery_point = max(recovery_point, log_start)

    # Gaps between batches are normal where the cleaner has been (and anywhere in a
    # compacted log, whose followers copy the leader's gaps); elsewhere a gap is a
    # damaged baseOffset.
    cleaned_below = _read_or_fallback(OffsetCheckpoint(directory / layout.CLEANER_OFFSET_CHECKPOINT)) or 0
    allow_gaps_below = INT64_MAX if config.compact else cleaned_below

    def epoch_at(offset: int) -> int:
        return epochs.epoch_for_offset(max(offset, log_start))

    outcome = recover_segments(
        segments,
        recovery_point,
        max_batch_bytes=hard_max_batch_bytes(config.max_message_bytes),
        allow_gaps_below=allow_gaps_below,
        # A rebuilt cache comes from the batches themselves: nothing to check against.
        epoch_at=None if rebuild_epochs else epoch_at,
        preallocated=config.preallocate,
    )
    segments = outcome.segments
    changed_dir = changed_dir or bool(outcome.deleted_segments)
    log_end = segments[-1].next_offset

    if log_start > log_end:
        # The log start was checkpointed past data that did not survive the crash:
        # nothing below the log start may be served, so start empty there.
        log.warning(
            "%s: log start offset %d is past the recovered end %d; restarting empty at %d",
            directory.name,
            log_start,
            log_end,
            log_start,
        )
        for seg in reversed(segments):
            seg.delete()
        segments = [LogSegment.create(directory, log_start, index_interval_bytes=interval, now_ms=now_ms)]
        created = list(segments)
        outcome.recovered = list(segments)
        log_end = log_start
        epochs.clear(flush=False)
        rebuild_epochs = True  # written below
        changed_dir = True
    holder[0] = log_end

    epochs_changed = rebuild_epochs
    if outcome.epochs:
        # The scan began at the recovery point, usually inside an epoch: what it saw first is where that
        # epoch resumed, not where it started. Entries from there on are rebuilt from the batches; the ones
        # before stay (assigning the resumed epoch onto the full cache would drop its true start).
        epochs_changed |= epochs.truncate_from_end(outcome.epochs[0][1], flush=False)
    for epoch, start_offset in outcome.epochs:
        epochs_changed |= epochs.assign(epoch, start_offset, flush=False)
    epochs_changed |= epochs.truncate_from_end(log_end, flush=False)
    epochs_changed |= epochs.truncate_from_start(log_start, flush=False)
    if epochs_changed:
        epochs.flush()

    # What recovery validated may still sit only in the page cache (a process
    # crash, not a power cut): make it durable before calling it recovered.
    for seg in outcome.recovered:
        if seg in created:
            continue
        seg.write_indexes()
        seg.fsync()
    # Aborts are indexed as their markers are written, before the log bytes are flushed: an entry whose
    # marker did not survive the crash goes (the producer-state replay writes back any that is missing).
    segments[-1].txn_index.truncate_to(log_end)
    if changed_dir:
        fsync_dir(directory)

    high_watermark = min(max(high_watermark if high_watermark is not None else log_start, log_start), log_end)
    segments[-1].preallocate(config.preallocate_bytes)  # after recovery trimmed what an earlier run left
    plog = cls(
        directory,
        config,
        dir_lock,
        segments,
        epochs,
        log_start_offset=log_start,
        recovery_point=log_end,
        high_watermark=high_watermark,
        now_ms=now_ms,
        checkpoints=(log_start_ckpt, recovery_ckpt, hw_ckpt),
    )
    epochs.set_log_end_offset_source(lambda: plog.log_end_offset)
    plog.last_recovery = outcome
    plog.write_checkpoints()
    if outcome.first_bad is not None:
        base, position, reason = outcome.first_bad
        log.warning(
            "%s recovered: cut at segment %d position %d (%s), %d bytes dropped; log end offset %d",
            directory.name,
            base,
            position,
            reason,
            outcome.truncated_bytes,
            log_end,
        )
    return plog


def _read_or_fallback(checkpoint: OffsetCheckpoint) -> int | None:
    try:
        return checkpoint.read()
    except CorruptCheckpointError as exc:
        log.warning("%s; falling back to the log start offset", exc.message)
        return None


def tidy_directory(directory: Path) -> bool:
    """Resolve what interrupted operations left behind; returns whether anything changed."""
    from kraftpy.storage.swap import complete_interrupted_swaps

    changed = complete_interrupted_swaps(directory)
    scratch = directory / layout.CLEANER_SCRATCH_DIR
    if scratch.exists():
        shutil.rmtree(scratch)
        changed = True
    names = {p.name for p in directory.iterdir()}
    for name in sorted(names):
        path = directory / name
        if name.endswith(layout.TEMP_SUFFIX) or name.endswith(layout.CLEANED_SUFFIX):
            changed |= remove_if_exists(path)
            continue
        parsed = layout.parse_segment_name(name)
        if parsed is None and name.endswith(layout.TXN_INDEX_SUFFIX):
            parsed = layout.parse_segment_name(name.removesuffix(layout.TXN_INDEX_SUFFIX) + layout.LOG_SUFFIX)
        orphan = parsed is not None and layout.segment_file_name(parsed[0], layout.LOG_SUFFIX) not in names
        if orphan:
            changed |= remove_if_exists(path)
    return changed
