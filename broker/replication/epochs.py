"""Leader-epoch cache arithmetic: Kafka's LeaderEpochFileCache, in memory, without the file.

The storage engine keeps the durable cache; this is the same math as a pure
object, used by the simulator's in-memory logs and as the reference the
tests pin down. An entry (epoch, start_offset) says the first batch written
by the leader of `epoch` is at `start_offset`; epochs and start offsets both
rise strictly along the list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from kraftpy.broker.replication.model import UNDEFINED_EPOCH, UNDEFINED_EPOCH_END, EpochEndOffset


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Kafka's epoch cache semantics: assign, end_offset_for, truncate_from_end, truncate_from_start."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def copy(self) -> LeaderEpochCache:
        clone = LeaderEpochCache()
        clone._entries = list(self._entries)
        return clone

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether the cache changed.

        As Kafka: nothing happens when the latest entry already has this epoch
        at an equal or lower start; otherwise every entry that is not strictly
        below the new one (epoch >= it or start >= it) is dropped first, so the
        list stays monotonic even when a leader re-assigns after a truncation.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must not be negative")
        if self._entries:
            latest = self._entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's endOffsetFor: (largest epoch <= requested, start offset of the next epoch or the LEO).

        - the latest epoch ends at the LEO;
        - an epoch above every known one is UNDEFINED (a leader never sees it: fencing stops it first);
        - an epoch below every known one answers (requested, first start offset): the older data is gone,
          so the asker must truncate to where this log's history begins.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH_END
        if self._entries[-1].epoch == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH_END
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._entries[0].start_offset)
        return EpochEndOffset(self._entries[higher - 1].epoch, self._entries[higher].start_offset)

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset`, UNDEFINED_EPOCH before the first entry."""
        starts = [e.start_offset for e in self._entries]
        index = bisect.bisect_right(starts, offset) - 1
        return self._entries[index].epoch if index >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated to it)."""
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: entries wholly below it go, the one spanning it starts there."""
        last_removed: EpochEntry | None = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            last_removed = self._entries.pop(0)
        if last_removed is not None:
            self._entries.insert(0, EpochEntry(last_removed.epoch, start_offset))

    def clear(self) -> None:
        """The log was emptied (truncate_fully_and_start_at): no epoch history is left."""
        self._entries.clear()
