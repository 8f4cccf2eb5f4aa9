"""The core's read view of the log, including writes it has emitted but the shell has not applied.

Within one input the core may append (a leader's new batch) and then read what
it appended (to answer a parked fetch). The view stages those writes on top of
the `RaftLog`; `sync()` at the start of the next input checks that the shell
applied them (the log's end offset is what the core expects) and drops the
overlay. A mismatch is a shell bug and raises `ShellContractError`.
"""

from __future__ import annotations

from kraftpy.raft.log import Entry, OffsetAndEpoch, RaftLog


class ShellContractError(RuntimeError):
    """The shell did not apply the core's log actions before feeding the next input."""


class LogView:
    def __init__(self, log: RaftLog) -> None:
        self.log = log
        self._cut: int | None = None  # underlying entries at or above this offset are gone
        self._tail: list[Entry] = []
        self._install: OffsetAndEpoch | None = None  # a snapshot installed in this step
        self._trim: int | None = None
        self._staged = False
        self._truncated = False

    def _stage(self) -> None:
        if not self._staged:
            self._staged = True
            self._cut = self.log.end_offset  # the overlay is relative to the log as it is now

    def sync(self) -> None:
        if self._staged:
            if self.log.end_offset != self.end_offset or self.log.log_start_offset != self.log_start_offset:
                raise ShellContractError(
                    f"log is [{self.log.log_start_offset}, {self.log.end_offset}) but the core expected "
                    f"[{self.log_start_offset}, {self.end_offset}): apply every log action before the next input"
                )
            self._cut, self._tail, self._install, self._trim, self._staged = None, [], None, None, False
            self._truncated = False

    # ---- staged writes -----------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        self._stage()
        self._tail.extend(entries)

    def truncate_to(self, offset: int) -> None:
        self._stage()
        base = self._base
        if offset >= base:
            del self._tail[offset - base :]
        else:
            self._tail = []
            self._cut = offset
            self._truncated = True

    def trim(self, before_offset: int) -> None:
        self._stage()
        self._trim = before_offset

    def install(self, snapshot_id: OffsetAndEpoch) -> None:
        self._stage()
        self._install = snapshot_id
        self._cut, self._tail, self._trim = None, [], None

    # ---- reads -------------------------------------------------------------------

    @property
    def _base(self) -> int:
        if self._install is not None:
            return self._install.offset
        return self.log.end_offset if self._cut is None else self._cut

    @property
    def log_start_offset(self) -> int:
        if self._install is not None:
            return self._install.offset
        return self._trim if self._trim is not None else self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._base + len(self._tail)

    @property
    def last_epoch(self) -> int:
        if self._tail:
            return self._tail[-1].epoch
        if self._install is not None:
            return self._install.epoch
        if self._cut is None or self._cut == self.log.end_offset:
            return self.log.last_epoch
        epoch = self.log.entry_epoch(self._cut - 1)
        return 0 if epoch is None else epoch

    def entry_epoch(self, offset: int) -> int | None:
        base = self._base
        if offset >= base:
            i = offset - base
            return self._tail[i].epoch if i < len(self._tail) else None
        if self._install is not None:
            return self._install.epoch if offset == self._install.offset - 1 else None
        return self.log.entry_epoch(offset)

    def end_offset_for(self, epoch: int) -> OffsetAndEpoch:
        if not self._staged:
            return self.log.end_offset_for(epoch)
        if self._truncated or self._install is not None:
            raise ShellContractError("end_offset_for over a staged truncation: the core reads it too early")
        # the last staged entry of `epoch` or older; the epoch after it starts at the entry that follows
        # (found from the end: linear in the entries staged in this step, usually one look)
        for i in range(len(self._tail) - 1, -1, -1):
            entry = self._tail[i]
            if entry.epoch <= epoch:
                nxt = self._tail[i + 1].offset if i + 1 < len(self._tail) else self.end_offset
                return OffsetAndEpoch(nxt, entry.epoch)
        found = self.log.end_offset_for(epoch)
        if self._tail and found.epoch >= 0 and found.epoch == self.log.last_epoch:
            return OffsetAndEpoch(self._tail[0].offset, found.epoch)
        return found

    def read(self, offset: int, max_bytes: int) -> list[Entry]:
        base = self._base
        out: list[Entry] = []
        if offset < base:
            out = [e for e in self.log.read(offset, max_bytes) if e.offset < base]
            if not out or out[-1].offset != base - 1:
                return out
            offset = base
        size = sum(e.size_bytes for e in out)
        for entry in self._tail[offset - base :]:
            if out and size + entry.size_bytes > max_bytes:
                break
            out.append(entry)
            size += entry.size_bytes
        return out

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return self._install if self._install is not None else self.log.latest_snapshot()

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        return self.log.snapshot_size(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.log.read_snapshot(snapshot_id, position, max_bytes)
