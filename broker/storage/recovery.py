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

from kraftpy.broker.storage.scan import ValidatingScan, span_of
from kraftpy.broker.storage.segment import LogSegment

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
    progress: Callable[[int], None] | None = None,
) -> RecoveryOutcome:
    """Validate `segments` (sorted, non-empty) from `recovery_point` (>= the first base offset)."""
    first = max(i for i, seg in enumerate(segments) if seg.base_offset <= recovery_point)
    outcome = RecoveryOutcome(list(segments), recovery_point)
    next_offset, epoch = 0, -1
    for i in range(first, len(segments)):
        seg = segments[i]
        start = seg.prepare_recovery(recovery_point) if i == first else seg.reset_for_recovery()
        if start > 0:
            next_offset, epoch = seg.next_offset, seg.last_epoch
        next_offset = max(next_offset, seg.base_offset)
        scan = ValidatingScan(
            seg.fd, start, seg.size, next_offset=next_offset, leader_epoch=epoch, max_batch_bytes=max_batch_bytes
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
            outcome.first_bad = (seg.base_offset, scan.stopped_at, scan.reason)
            log.warning(
                "%s: bad batch at position %d (%s); truncating %d bytes and %d later segment(s)",
                seg.log_path,
                scan.stopped_at,
                scan.reason,
                seg.size - scan.stopped_at,
                len(segments) - i - 1,
            )
            outcome.truncated_bytes += seg.truncate_at_position(scan.stopped_at)
            for later in reversed(segments[i + 1 :]):
                outcome.truncated_bytes += later.size
                outcome.deleted_segments.append(later.base_offset)
                later.delete()
            outcome.segments = segments[: i + 1]
            break
        if i < len(segments) - 1:
            seg.on_roll()
    return outcome
