"""Producer-state snapshot files and rebuilding the state from them plus the log's batch headers."""

from __future__ import annotations

from pathlib import Path

from kraftpy.broker.replication import ProducerStateManager
from kraftpy.broker.shell import producer_snapshots as snaps
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import parse_header
from kraftpy.storage import LogConfig, PartitionLog


def idem(pid: int, seq: int, n: int = 2) -> bytes:
    return build_batch(
        [(None, f"{pid}-{seq + i}".encode()) for i in range(n)], producer_id=pid, producer_epoch=0, base_sequence=seq
    )


def fill(plog: PartitionLog, state: ProducerStateManager, batches: list[bytes]) -> None:
    for data in batches:
        info = plog.append_as_leader(data, 0, now_ms=0)
        state.update(parse_header(data), info.first_offset, info.last_offset)


def test_files_are_listed_by_offset_and_deleted_above_and_below(tmp_path: Path) -> None:
    for offset in (30, 4, 12):
        snaps.write_snapshot(tmp_path, offset, b"x")
    (tmp_path / "junk.snapshot").write_bytes(b"")
    assert snaps.list_snapshots(tmp_path) == [4, 12, 30]
    assert snaps.delete_snapshots(tmp_path, above=12) == 1
    assert snaps.delete_snapshots_below(tmp_path, 10) == 0  # 4 is the newest at or below 10: kept
    assert snaps.delete_snapshots_below(tmp_path, 12) == 1
    assert snaps.list_snapshots(tmp_path) == [12]


def test_rebuild_equals_the_live_state_from_a_snapshot_or_from_nothing(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    live = ProducerStateManager()
    fill(plog, live, [idem(1, 0), idem(2, 0), idem(1, 2)])
    snaps.write_snapshot(plog.directory, live.map_end_offset, live.snapshot())
    fill(plog, live, [idem(2, 2), idem(1, 4, 3)])
    for with_snapshot in (True, False):
        if not with_snapshot:
            snaps.delete_snapshots(plog.directory, below=10**9)
        rebuilt = snaps.rebuild_producer_state(
            plog, plog.log_end_offset, batches_to_retain=5, producer_id_expiration_ms=10**12
        )
        assert rebuilt.snapshot() == live.snapshot()
    plog.close()


def test_rebuild_below_the_end_ignores_later_snapshots_and_skips_a_corrupt_one(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    live = ProducerStateManager()
    fill(plog, live, [idem(1, 0), idem(1, 2)])
    at_four = live.snapshot()
    snaps.write_snapshot(plog.directory, 4, at_four)
    fill(plog, live, [idem(1, 4)])
    snaps.write_snapshot(plog.directory, 6, live.snapshot())
    snaps.write_snapshot(plog.directory, 5, b"\xa2garbage")  # torn by a crash: fails its CRC
    rebuilt = snaps.rebuild_producer_state(plog, 5, batches_to_retain=5, producer_id_expiration_ms=10**12)
    # The snapshot at 6 describes a log beyond the target and is gone; the state is the one at offset 4.
    assert snaps.list_snapshots(plog.directory) == [4, 5]
    assert rebuilt.map_end_offset == 5 and rebuilt.entry(1).last_seq == 3
    plog.close()
