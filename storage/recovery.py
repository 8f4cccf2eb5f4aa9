"""Recovery after an unclean shutdown: validate everything past the recovery point, cut off the rest.

Everything below the recovery point was fsynced, so it is trusted as is
(Kafka's rule; re-reading a terabyte on every restart is not an option). From
the segment holding the recovery point onwards every batch is validated
(ValidatingScan: length, magic, CRC32C, offsets and leader epochs never going
backwards) and indexed afresh. At the first bad batch the segment is cut there
(fsynced) and every later segment is deleted: offsets must stay contiguous, so
nothing after a hole can be served. The epochs of the validated batches are
handed back for the leader-epoch cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kraftpy.protocol.validate import INT64_MAX
from kraftpy.storage.scan import ValidatingScan, damaging_gap, span_of
from kraftpy.storage.segment import LogSegment

log = logging.getLogger(__name__)


@dataclass
class RecoveryOutcome:
    segments: list[LogSegment]
    recovery_point: int
    validated_bytes: int = 0
    truncated_bytes: int = 0
    deleted_segments: list[int] = field(default_factory=list)
    # (segment base offset, position, reason) of the first bad batch, if any.
    first_bad: tuple[int, int, str] | None = None
    # (epoch, start offset) each time the validated batches' leader epoch changed.
    epochs: list[tuple[int, int]] = field(default_factory=list)
    # Segments whose bytes were validated (and may need an fsync).
    recovered: list[LogSegment] = field(default_factory=list)


def recover_segments(
    segments: list[LogSegment],
    recovery_point: int,
    *,
    max_batch_bytes: int,
    allow_gaps_below: int = INT64_MAX,
    epoch_at: Callable[[int], int] | None = None,
    progress: Callable[[int], None] | None = None,
    preallocated: bool = False,
) -> RecoveryOutcome:
    """Validate `segments` (sorted, non-empty) from `recovery_point` (>= the first base offset).

    `allow_gaps_below` and `epoch_at` are ValidatingScan's extra checks. In a `preallocated`
    log (the `preallocate` config) zeros after a segment's last batch are space nothing was
    written to: trimmed, not a bad batch. Elsewhere they are a write that never reached the
    disk, cut as a bad batch is.
    """
    first = max(i for i, seg in enumerate(segments) if seg.base_offset <= recovery_point)
    outcome = RecoveryOutcome(list(segments), recovery_point)
    next_offset, epoch = 0, -1
    for i in range(first, len(segments)):
        seg = segments[i]
        if i == first:
            start = seg.prepare_recovery(recovery_point)
            next_offset, epoch = seg.next_offset, seg.last_epoch
        else:
            start = seg.reset_for_recovery()
            problem = _segment_start_problem(seg.base_offset, next_offset, allow_gaps_below)
            if problem is not None:
                _cut(outcome, segments, i, 0, problem)
                break
            next_offset = max(next_offset, seg.base_offset)
        scan = ValidatingScan(
            seg.fd,
            start,
            seg.size,
            next_offset=next_offset,
            leader_epoch=epoch,
            max_batch_bytes=max_batch_bytes,
            allow_gaps_below=allow_gaps_below,
            epoch_at=epoch_at,
        )
        for pos, header, _ in scan:
            seg.append_recovered(span_of(pos, header))
            batch_epoch = header.partition_leader_epoch
            if batch_epoch >= 0 and (not outcome.epochs or outcome.epochs[-1][0] != batch_epoch):
                outcome.epochs.append((batch_epoch, header.base_offset))
            if progress is not None:
                progress(header.size)
        outcome.validated_bytes += scan.valid_end - start
        outcome.recovered.append(seg)
        next_offset, epoch = scan.next_offset, scan.leader_epoch
        if scan.stopped_at is not None:
            assert scan.reason is not None
            _cut(outcome, segments, i, scan.stopped_at, scan.reason)
            break
        if scan.unwritten_at is not None:
            if not preallocated:
                _cut(outcome, segments, i, scan.unwritten_at, "nothing but zeros from here to the end of the file")
                break
            log.info("%s: preallocated space from position %d trimmed", seg.log_path, scan.unwritten_at)
            seg.truncate_at_position(scan.unwritten_at)
        if i < len(segments) - 1:
            seg.on_roll()
    if outcome.segments[-1] not in outcome.recovered:
        outcome.segments[-1].ensure_state()  # a trusted segment became the active one
    return outcome


def _segment_start_problem(base_offset: int, expected: int, allow_gaps_below: int) -> str | None:
    if base_offset < expected:
        return f"segment starts at offset {base_offset}, inside the previous segment (which ends at {expected})"
    if damaging_gap(base_offset, expected, allow_gaps_below):
        return f"segment starts at offset {base_offset}, leaving a gap after {expected} in a log without gaps"
    return None


def _cut(outcome: RecoveryOutcome, segments: list[LogSegment], i: int, position: int, reason: str) -> None:
    """Cut segment i at `position` and delete every later segment (and segment i itself if emptied)."""
    seg = segments[i]
    outcome.first_bad = (seg.base_offset, position, reason)
    log.warning(
        "%s: bad batch at position %d (%s); truncating %d bytes and %d later segment(s)",
        seg.log_path,
        position,
        reason,
        seg.size - position,
        len(segments) - i - 1,
    )
    outcome.truncated_bytes += seg.truncate_at_position(position)
    doomed = segments[i + 1 :]
    keep = i + 1
    if position == 0 and i > 0:
        # An emptied segment would move the log end to its base offset, past a hole.
        doomed = segments[i:]
        keep = i
    for later in reversed(doomed):
        outcome.truncated_bytes += later.size
        outcome.deleted_segments.append(later.base_offset)
        later.delete()
    outcome.segments = segments[:keep]
    outcome.recovered = [s for s in outcome.recovered if s in outcome.segments]
