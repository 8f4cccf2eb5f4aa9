"""The leader-epoch cache: which leader epoch started at which offset, as Kafka keeps it.

Entries (epoch, start_offset) have strictly increasing epochs and strictly
increasing start offsets. They answer OffsetsForLeaderEpoch ("where does epoch
E end on this replica?"), which is how a follower finds the last offset it
shares with a new leader and truncates there instead of to the high watermark
(DESIGN.md principle 5). Every change is written to `leader-epoch-checkpoint`
(atomically) before the call returns, except when the owner batches changes
with `flush=False` during recovery and calls flush() once.

Thread-safety: an internal lock guards the entries, so a request thread may ask
end_offset_for() while the log's writer appends.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.checkpoints import read_checkpoint, write_checkpoint
from kraftpy.storage.errors import CorruptCheckpointError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset, persisted at `path` (None: in memory only, for tools and tests)."""

    def __init__(
        self,
        path: Path | None,
        log_end_offset: Callable[[], int],
        entries: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.path = path
        # The current epoch "ends" at the log end offset, which only the log knows.
        self._log_end_offset = log_end_offset
        self._lock = threading.Lock()
        # Serializes changes with their checkpoint writes, so an older snapshot can
        # never be written after a newer one; queries take only _lock.
        self._write_lock = threading.Lock()
        self._entries: list[EpochEntry] = []
        for epoch, start in entries:
            self._entries.append(EpochEntry(epoch, start))
        _check_monotonic(self._entries, str(path))

    @classmethod
    def load(cls, path: Path, log_end_offset: Callable[[], int]) -> LeaderEpochCache:
        """Read `path` (missing: empty cache). Raises CorruptCheckpointError for a bad file."""
        rows = read_checkpoint(path, 2)
        return cls(path, log_end_offset, [(int(e), int(o)) for e, o in rows or ()])

    def set_log_end_offset_source(self, log_end_offset: Callable[[], int]) -> None:
        """Where end_offset_for() learns the log end offset (the log, once it exists)."""
        self._log_end_offset = log_end_offset

    # -- queries ---------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        # No lock: changes replace the list or append/pop whole entries, and reading one
        # reference and indexing it are atomic under the GIL. This is on the append path.
        entries = self._entries
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range contains `offset`, or -1 when it is before every entry."""
        with self._lock:
            found = UNDEFINED_EPOCH
            for entry in self._entries:
                if entry.start_offset > offset:
                    break
                found = entry.epoch
            return found

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) exactly as Kafka's leader answers OffsetsForLeaderEpoch.

        - the latest epoch ends at the log end offset;
        - an older epoch: the largest known epoch <= requested, ending where the
          next known epoch starts;
        - an epoch below every entry: (requested, start of the first entry), since
          that history is gone and the follower must start from the leader's data;
        - unknown (undefined, above the latest, or an empty cache): (-1, -1).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries[-1].epoch == requested_epoch:
                return requested_epoch, self._log_end_offset()
            floor: EpochEntry | None = None
            higher: EpochEntry | None = None
            for entry in self._entries:
                if entry.epoch <= requested_epoch:
                    floor = entry
                elif higher is None:
                    higher = entry
                    break
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if floor is None:
                return requested_epoch, higher.start_offset
            return floor.epoch, higher.start_offset

    # -- changes -----------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether anything changed.

        As Kafka: a no-op when `epoch` is already the latest (and starts no later);
        otherwise every entry with an epoch >= `epoch` or a start >= `start_offset`
        is dropped first, so the entries stay monotonic.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        with self._write_lock:
            with self._lock:
                if self._entries:
                    last = self._entries[-1]
                    if last.epoch == epoch and last.start_offset <= start_offset:
                        return False
                removed = []
                while self._entries and (
                    self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
                ):
                    removed.append(self._entries.pop())
                if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
                    log.warning("%s: epoch %d at %d replaced entries %s", self.path, epoch, start_offset, removed)
                self._entries.append(EpochEntry(epoch, start_offset))
                snapshot = list(self._entries)
            if flush:
                self._write(snapshot)
            return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """Drop every entry starting at or after `end_offset` (the log was truncated there)."""
        with self._write_lock:
            with self._lock:
                keep = [e for e in self._entries if e.start_offset < end_offset]
                if len(keep) == len(self._entries):
                    return False
                self._entries = keep
                snapshot = list(keep)
            if flush:
                self._write(snapshot)
            return True

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> bool:
        """Forget history before `start_offset`; the epoch in force there now starts at it."""
        with self._write_lock:
            with self._lock:
                below = [e for e in self._entries if e.start_offset <= start_offset]
                if not below or (len(below) == 1 and below[0].start_offset == start_offset):
                    return False
                first = EpochEntry(below[-1].epoch, start_offset)
                self._entries = [first, *self._entries[len(below) :]]
                snapshot = list(self._entries)
            if flush:
                self._write(snapshot)
            return True

    def clear(self, *, flush: bool = True) -> None:
        with self._write_lock:
            with self._lock:
                self._entries = []
            if flush:
                self._write([])

    def flush(self) -> None:
        with self._write_lock:
            with self._lock:
                snapshot = list(self._entries)
            self._write(snapshot)

    def _write(self, entries: list[EpochEntry]) -> None:
        if self.path is not None:
            write_checkpoint(self.path, entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries})"


def _check_monotonic(entries: list[EpochEntry], source: str) -> None:
    for prev, cur in itertools.pairwise(entries):
        if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
            raise CorruptCheckpointError(f"{source} is corrupt: entries are not increasing at {prev} -> {cur}")
    for entry in entries:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise CorruptCheckpointError(f"{source} is corrupt: negative entry {entry}")
