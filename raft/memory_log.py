"""An in-memory `RaftLog` with a model of the disk under it, for the simulator and unit tests.

Writes land in a volatile tail (the page cache); `flush(up_to)` makes a prefix
durable; `crash()` throws away whatever was not flushed, as a power loss or a
SIGKILL before fsync does. Truncation, trimming and snapshot installs are
durable at once: the shell performs them synchronously (truncate + fsync)
before it carries on with the next action, and the model holds it to that.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from kraftpy.raft.actions import Action, apply_log_action
from kraftpy.raft.log import Entry, OffsetAndEpoch


class LogError(Exception):
    """A write that breaks the log's rules (a gap, an epoch going back, ...): a core bug."""


class MemoryLog:
    def __init__(self) -> None:
        self._start = 0
        self._entries: list[Entry] = []
        self._durable = 0  # entries[:_durable] survive a crash
        # epoch starts of the entries in the log: parallel sorted lists
        self._epochs: list[int] = []
        self._epoch_starts: list[int] = []
        self._start_epoch = 0  # the snapshot's epoch when the log starts at a snapshot
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        self._partial: dict[OffsetAndEpoch, bytearray] = {}

    # ---- RaftLog (reads) ------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._start_epoch

    @property
    def durable_end_offset(self) -> int:
        return self._start + self._durable

    def end_offset_for(self, epoch: int) -> OffsetAndEpoch:
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i >= 0:
            end = self._epoch_starts[i + 1] if i + 1 < len(self._epochs) else self.end_offset
            return OffsetAndEpoch(end, self._epochs[i])
        if (self._start > 0 or self._start_epoch > 0) and self._start_epoch <= epoch:
            return OffsetAndEpoch(self._start, self._start_epoch)
        return OffsetAndEpoch(-1, -1)

    def read(self, offset: int, max_bytes: int) -> list[Entry]:
        if offset < self._start or offset > self.end_offset:
            raise LogError(f"read at {offset} outside [{self._start}, {self.end_offset}]")
        out: list[Entry] = []
        size = 0
        for entry in self._entries[offset - self._start :]:
            if out and size + entry.size_bytes > max_bytes:
                break
            out.append(entry)
            size += entry.size_bytes
        return out

    def entry_epoch(self, offset: int) -> int | None:
        if self._start <= offset < self.end_offset:
            return self._entries[offset - self._start].epoch
        if offset == self._start - 1:
            return self._start_epoch
        return None

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return max(self._snapshots) if self._snapshots else None

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self._snapshots[snapshot_id][position : position + max_bytes]

    def snapshot_data(self, snapshot_id: OffsetAndEpoch) -> bytes:
        return self._snapshots[snapshot_id]

    # ---- writes (the shell's side) --------------------------------------------------

    def append(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise LogError(f"append at {entry.offset}, log end is {self.end_offset}")
            if entry.epoch < self.last_epoch:
                raise LogError(f"append of epoch {entry.epoch} after epoch {self.last_epoch}")
            if not self._epochs or entry.epoch > self._epochs[-1]:
                self._epochs.append(entry.epoch)
                self._epoch_starts.append(entry.offset)
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise LogError(f"truncate to {offset} below the log start {self._start}")
        if offset >= self.end_offset:
            return
        del self._entries[offset - self._start :]
        self._durable = min(self._durable, len(self._entries))
        while self._epoch_starts and self._epoch_starts[-1] >= offset:
            self._epochs.pop()
            self._epoch_starts.pop()

    def flush(self, up_to_offset: int) -> None:
        self._durable = max(self._durable, min(up_to_offset - self._start, len(self._entries)))

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a complete snapshot durably (the state machine wrote it)."""
        self._snapshots[snapshot_id] = bytes(data)
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]

    def trim(self, before_offset: int) -> None:
        """Drop the entries below `before_offset`; a snapshot must end exactly there."""
        snapshot = self.latest_snapshot()
        if snapshot is None or snapshot.offset != before_offset:
            raise LogError(f"trim to {before_offset} without a snapshot ending there ({snapshot})")
        if before_offset <= self._start:
            return
        if before_offset > self.end_offset:
            raise LogError(f"trim to {before_offset} beyond the log end {self.end_offset}")
        cut = before_offset - self._start
        del self._entries[:cut]
        self._durable = max(0, self._durable - cut)
        self._start = before_offset
        self._start_epoch = snapshot.epoch
        self._rebuild_epochs()

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None:
        if position == 0:
            self._partial[snapshot_id] = bytearray()  # position 0 (re)starts the pending snapshot
        buf = self._partial.setdefault(snapshot_id, bytearray())
        if position != len(buf):
            raise LogError(f"snapshot chunk at {position}, have {len(buf)} bytes")
        buf.extend(data)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Make a fetched snapshot durable and restart the log at its end offset."""
        data = self._partial.pop(snapshot_id, None)
        if data is None:
            raise LogError(f"install of snapshot {snapshot_id} that was never written")
        self._snapshots = {snapshot_id: bytes(data)}
        self._partial.clear()
        self._entries = []
        self._durable = 0
        self._start = snapshot_id.offset
        self._start_epoch = snapshot_id.epoch
        self._rebuild_epochs()

    def apply(self, action: Action) -> bool:
        """Apply a log action from the core; False if the action is not a log action."""
        return apply_log_action(self, action)

    def crash(self) -> None:
        """Lose everything that was not flushed (and any half-fetched snapshot)."""
        del self._entries[self._durable :]
        self._partial.clear()
        self._rebuild_epochs()

    def _rebuild_epochs(self) -> None:
        self._epochs, self._epoch_starts = [], []
        for entry in self._entries:
            if not self._epochs or entry.epoch > self._epochs[-1]:
                self._epochs.append(entry.epoch)
                self._epoch_starts.append(entry.offset)
