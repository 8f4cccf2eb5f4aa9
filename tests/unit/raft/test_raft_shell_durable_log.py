"""The durable Raft log answers exactly as the simulator's MemoryLog under the same operations.

A hypothesis state machine drives both logs through the core's log actions
(appends of several epochs and kinds, truncations inside and between batches,
snapshots with trims, snapshot installs) plus closes and reopens of the durable
one, and compares every read of the RaftLog protocol after each step. Then the
crash cases of the mid-batch truncation journal, and the reconciliation of the
log with its snapshots on open.
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraftpy.raft.actions import AppendEntries, InstallSnapshot, TrimLog, TruncateTo, WriteSnapshotChunk
from kraftpy.raft.entry_batches import encode_entries
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch, validate_fetch
from kraftpy.raft.memory_log import MemoryLog
from kraftpy.raft.shell import durable_log
from kraftpy.raft.shell.durable_log import DurableLog, DurableLogError


def _entries(start: int, epoch: int, count: int, tag: str, leader_change: bool = False) -> list[Entry]:
    out = []
    for i in range(count):
        kind = EntryKind.LEADER_CHANGE if leader_change and i == 0 else EntryKind.DATA
        out.append(Entry(start + i, epoch, f"{tag}-{start + i}".encode() * (1 + i % 3), kind))
    return out


class LogsAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name) / "__cluster_metadata-0"
        self.durable = DurableLog.open(self.dir, cache_bytes=2000)  # a small cache: reads hit the disk too
        self.memory = MemoryLog()
        self.epoch = 1
        self.step = 0

    def teardown(self) -> None:
        self.durable.close()
        self.tmp.cleanup()

    def _apply(self, action: object) -> None:
        self.memory.apply(action)  # type: ignore[arg-type]
        self.durable.apply(action)  # type: ignore[arg-type]
        self.memory.flush(self.memory.end_offset)
        self.durable.flush(self.durable.end_offset)

    @rule(count=st.integers(1, 6), new_epoch=st.booleans(), split=st.integers(0, 6))
    def append(self, count: int, new_epoch: bool, split: int) -> None:
        if new_epoch:
            self.epoch += 1
        self.step += 1
        entries = _entries(self.memory.end_offset, self.epoch, count, f"s{self.step}", leader_change=new_epoch)
        if 0 < split < count and not new_epoch:
            # a follower may receive entries of two epochs in one fetch
            self.epoch += 1
            entries = entries[:split] + [Entry(e.offset, self.epoch, e.data, e.kind) for e in entries[split:]]
        self._apply(AppendEntries(tuple(entries)))

    @precondition(lambda self: self.memory.end_offset > self.memory.log_start_offset)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.memory.log_start_offset, self.memory.end_offset), label="truncate to")
        self._apply(TruncateTo(offset))

    @precondition(lambda self: self.memory.end_offset > self.memory.log_start_offset)
    @rule(data=st.data())
    def snapshot_and_trim(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.memory.log_start_offset + 1, self.memory.end_offset), label="snapshot at")
        snapshot_id = OffsetAndEpoch(offset, self.memory.entry_epoch(offset - 1))  # type: ignore[arg-type]
        payload = f"image@{offset}".encode() * 50
        self.memory.create_snapshot(snapshot_id, payload)
        self.durable.create_snapshot(snapshot_id, payload)
        self._apply(TrimLog(offset))

    @rule(ahead=st.integers(1, 20), chunks=st.integers(1, 4))
    def install(self, ahead: int, chunks: int) -> None:
        self.epoch += 1
        snapshot_id = OffsetAndEpoch(self.memory.end_offset + ahead, self.epoch)
        payload = b"fetched" * (10 + ahead)
        size = -(-len(payload) // chunks)
        for pos in range(0, len(payload), size):
            self._apply(WriteSnapshotChunk(snapshot_id, pos, payload[pos : pos + size]))
        self._apply(InstallSnapshot(snapshot_id))

    @rule()
    def reopen(self) -> None:
        self.durable.close()
        self.durable = DurableLog.open(self.dir, cache_bytes=2000)

    @invariant()
    def same_answers(self) -> None:
        m, d = self.memory, self.durable
        assert (d.log_start_offset, d.end_offset, d.last_epoch) == (m.log_start_offset, m.end_offset, m.last_epoch)
        assert d.latest_snapshot() == m.latest_snapshot()
        for epoch in range(0, self.epoch + 2):
            assert d.end_offset_for(epoch) == m.end_offset_for(epoch), epoch
        for offset in range(max(m.log_start_offset - 2, -1), m.end_offset + 2):
            assert d.entry_epoch(offset) == m.entry_epoch(offset), offset
        everything = m.entries()
        for offset in range(m.log_start_offset, m.end_offset + 1):
            assert d.read(offset, 1 << 30) == everything[offset - m.log_start_offset :]
            small = d.read(offset, 1)
            assert small == everything[offset - m.log_start_offset :][: len(small)]
            assert small or offset == m.end_offset  # at least one entry when there is one
        snapshot = m.latest_snapshot()
        if snapshot is not None:
            assert d.snapshot_size(snapshot) == m.snapshot_size(snapshot)
            assert d.read_snapshot(snapshot, 3, 40) == m.read_snapshot(snapshot, 3, 40)
            assert d.snapshot_data(snapshot) == m.snapshot_data(snapshot)
        for fetch_offset in range(m.log_start_offset, m.end_offset + 1):
            for last_epoch in range(0, self.epoch + 1):
                assert validate_fetch(d, fetch_offset, last_epoch) == validate_fetch(m, fetch_offset, last_epoch)


LogsAgree.TestCase.settings = settings(
    max_examples=20, stateful_step_count=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_durable_log_answers_as_the_memory_log = LogsAgree.TestCase


# ---- the mid-batch truncation journal ------------------------------------------------------------


def _batch_log(directory: Path) -> DurableLog:
    log = DurableLog.open(directory)
    log.append(_entries(0, 1, 3, "a", leader_change=True))
    log.append(_entries(3, 1, 6, "b"))  # one batch [3, 9)
    log.flush(log.end_offset)
    return log


def test_truncation_inside_a_batch_keeps_the_entries_below_it(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    before = log.read(0, 1 << 20)
    log.truncate_to(6)
    assert log.end_offset == 6
    assert log.read(0, 1 << 20) == before[:6]
    log.close()
    reopened = DurableLog.open(tmp_path)
    assert reopened.read(0, 1 << 20) == before[:6]
    assert not (tmp_path / "raft-truncation-journal").exists()
    reopened.close()


@pytest.mark.parametrize("crash_after", ["journal", "truncate"])
def test_a_crash_inside_a_mid_batch_truncation_is_finished_on_open(tmp_path: Path, crash_after: str) -> None:
    log = _batch_log(tmp_path)
    before = log.read(0, 1 << 20)
    kept = before[3:6]
    log._write_journal(3, 6, kept)  # what truncate_to writes first
    if crash_after == "truncate":
        log._plog.truncate_to(3)  # the batch is gone, the kept entries not yet re-appended
    log.close()
    reopened = DurableLog.open(tmp_path)
    assert reopened.end_offset == 6
    assert reopened.read(0, 1 << 20) == before[:6]
    assert not (tmp_path / "raft-truncation-journal").exists()
    reopened.close()


def test_a_torn_journal_is_ignored(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    before = log.read(0, 1 << 20)
    log.close()
    (tmp_path / "raft-truncation-journal").write_bytes(b"\x00\x01\x02garbage")
    reopened = DurableLog.open(tmp_path)
    assert reopened.read(0, 1 << 20) == before
    reopened.close()


# ---- reconciliation with the snapshots on open --------------------------------------------------


def test_a_crash_between_snapshot_and_trim_is_trimmed_on_open(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    log.create_snapshot(OffsetAndEpoch(5, 1), b"image")
    log.close()
    reopened = DurableLog.open(tmp_path)
    assert reopened.log_start_offset == 5
    assert reopened.end_offset_for(1) == (9, 1)
    assert reopened.read(5, 1 << 20)[0].offset == 5
    reopened.close()


def test_a_crash_inside_an_install_restarts_the_log_on_open(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    snapshot_id = OffsetAndEpoch(40, 3)
    log.snapshots.write_chunk(snapshot_id, 0, b"leader's image")
    log.snapshots.install_pending(snapshot_id)  # durable, but the log was not restarted yet
    log.close()
    reopened = DurableLog.open(tmp_path)
    assert (reopened.log_start_offset, reopened.end_offset, reopened.last_epoch) == (40, 40, 3)
    assert reopened.snapshot_data(snapshot_id) == b"leader's image"
    reopened.close()


def test_a_log_that_starts_past_its_snapshots_is_refused(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    log.set_high_watermark(9)
    log._plog.increment_log_start_offset(4)  # a trim without the snapshot that must back it
    log.close()
    with pytest.raises(DurableLogError, match="no snapshot ends there"):
        DurableLog.open(tmp_path)


def test_entries_are_stored_as_v2_batches_one_per_append(tmp_path: Path) -> None:
    log = _batch_log(tmp_path)
    path = next(tmp_path.glob("*.log"))
    assert path.stat().st_size == durable_log.RAFT_LOG_CONFIG.segment_bytes, "preallocated while active"
    log.close()
    segment = path.read_bytes()  # at rest, exactly its batches
    first = encode_entries(_entries(0, 1, 3, "a", leader_change=True), timestamp_ms=0)
    # the leader-change entry is a control batch of its own, the data entries one batch per run
    assert len(segment) == len(first) + len(encode_entries(_entries(3, 1, 6, "b"), timestamp_ms=0))


def test_a_full_disk_while_checkpointing_does_not_stop_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush thread's checkpoints are an optimisation (recovery from an older recovery point is safe);
    ENOSPC writing them was fatal to Raft (found by the fault run's disk-full nemesis)."""
    log = _batch_log(tmp_path)
    monkeypatch.setattr(durable_log, "CHECKPOINT_INTERVAL_S", 0)
    real = log._plog.write_checkpoints

    def full_disk() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "recovery-point-offset-checkpoint"))

    monkeypatch.setattr(log._plog, "write_checkpoints", full_disk)
    log.flush(log.end_offset)  # logged, not raised
    writes: list[int] = []
    monkeypatch.setattr(log._plog, "write_checkpoints", lambda: (writes.append(1), real()))
    log.flush(log.end_offset)
    assert writes == [1]  # tried again once there is room
    monkeypatch.setattr(log._plog, "write_checkpoints", lambda: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError, match="I/O error"):
        log.flush(log.end_offset)  # anything but a shortage still stops it
    log.close()
