"""Retention: whole closed segments go by age, by size or below the log start; never the active one."""

from __future__ import annotations

import os
from pathlib import Path

from kraftpy.storage import LogConfig, PartitionLog
from kraftpy.storage.retention import SegmentStats, deletable_prefix
from tests.unit.storage.test_storage_fixtures import make_batch, offsets_of, open_log, read_all

DAY = 24 * 3600 * 1000


def filled(directory: Path, **config: object) -> PartitionLog:
    """10 segments of 2 batches each; batch i has timestamp 1000 * i and leader epoch i // 4."""
    log = open_log(directory, segment_bytes=2 * len(make_batch(2, value_size=300)), **config)
    for i in range(20):
        log.append_as_leader(make_batch(2, value_size=300, ts=1000 * i, tag=i), i // 4, now_ms=1000 * i)
    assert len(log.segments) == 10
    log.high_watermark = log.log_end_offset
    return log


def test_retention_ms_deletes_segments_whose_newest_record_is_too_old(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_ms=5000) as log:
        # Segment k holds batches 2k, 2k+1: newest timestamp 1000 * (2k + 1).
        assert log.delete_retention_segments(now_ms=12_000) == 3  # 1000, 3000, 5000 are > 5000 ms old
        assert log.log_start_offset == 12
        assert log.segments[0].base_offset == 12
        assert offsets_of(read_all(log))[0] == (12, 13)
        assert log.leader_epoch_cache.entries[0] == (1, 12)
        assert log.delete_retention_segments(now_ms=12_000) == 0
    with open_log(tmp_path / "t-0") as log:
        assert log.log_start_offset == 12
    assert not (tmp_path / "t-0" / f"{0:020d}.log").exists()
    assert not (tmp_path / "t-0" / f"{0:020d}.index").exists()


def test_the_active_segment_is_never_deleted(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_ms=0) as log:
        assert log.delete_retention_segments(now_ms=10**12) == 9
        assert len(log.segments) == 1
        assert log.log_start_offset == log.active_segment.base_offset == 36
        assert offsets_of(read_all(log)) == [(36, 37), (38, 39)]


def test_retention_bytes_keeps_the_log_under_the_limit(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_bytes=1) as log:
        segment_size = log.segments[0].size_bytes
    with filled(tmp_path / "t-1", retention_bytes=3 * segment_size + 10) as log:
        assert log.delete_retention_segments(now_ms=0) == 6
        assert log.size_bytes <= 4 * segment_size
        assert log.log_start_offset == 24


def test_only_data_below_the_high_watermark_is_deleted(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_ms=0) as log:
        log.high_watermark = 9  # inside the third segment (offsets 8..11)
        assert log.delete_retention_segments(now_ms=10**12) == 2
        assert log.log_start_offset == 8


def test_retention_ms_minus_one_keeps_forever(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_ms=-1) as log:
        assert log.delete_retention_segments(now_ms=10**15) == 0


def test_compacted_logs_skip_time_and_size_but_drop_segments_below_the_log_start(tmp_path: Path) -> None:
    with filled(tmp_path / "t-0", retention_ms=0, retention_bytes=0, cleanup_policy="compact") as log:
        assert log.delete_retention_segments(now_ms=10**12) == 0
        log.increment_log_start_offset(9)
        assert log.delete_retention_segments(now_ms=10**12) == 2
        assert log.log_start_offset == 9
        assert offsets_of(log.read(9, 1)) == [(8, 9)]


def test_a_segment_without_timestamps_ages_by_its_file_time(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", retention_ms=DAY) as log:
        log.append_as_leader(make_batch(1, ts=-1), 0, now_ms=0)
        log.roll()
        log.append_as_leader(make_batch(1, ts=-1), 0, now_ms=0)
        log.high_watermark = 2
        now_ms = os.stat(tmp_path / "t-0" / f"{0:020d}.log").st_mtime_ns // 1_000_000
        assert log.delete_retention_segments(now_ms=now_ms + DAY // 2) == 0
        assert log.delete_retention_segments(now_ms=now_ms + 2 * DAY) == 1


# deletable_prefix on its own: each rule at its exact boundary, as Kafka's UnifiedLog draws it.


def _segments(*sizes: int) -> list[SegmentStats]:
    out, base = [], 0
    for size in sizes:
        out.append(SegmentStats(base, base + 10, size))
        base += 10
    return out


def _prefix(closed: list[SegmentStats], *, hw: int = 10**9, log_start: int = 0, now_ms: int = 0,
            active_bytes: int = 0, stamps: list[int] | None = None, **config: object) -> int:  # fmt: skip
    count, _reason = deletable_prefix(
        closed,
        total_bytes=sum(s.size_bytes for s in closed) + active_bytes,
        log_start_offset=log_start,
        high_watermark=hw,
        config=LogConfig(**config),  # type: ignore[arg-type]
        now_ms=now_ms,
        largest_timestamp=lambda i: (stamps or [0] * len(closed))[i],
    )
    return count


def test_retention_ms_deletes_only_segments_strictly_older_than_it() -> None:
    closed = _segments(100, 100, 100)
    # now - newest record: 1001, 1000, 999 ms; retention 1000: only the first is older than it
    assert _prefix(closed, now_ms=2000, stamps=[999, 1000, 1001], retention_ms=1000) == 1


def test_retention_bytes_deletes_while_what_is_left_stays_at_or_above_it() -> None:
    closed = _segments(100, 100, 100)  # and a 100-byte active segment: 400 bytes
    assert _prefix(closed, active_bytes=100, retention_bytes=200, retention_ms=-1) == 2  # down to exactly 200
    assert _prefix(closed, active_bytes=100, retention_bytes=201, retention_ms=-1) == 1
    assert _prefix(closed, active_bytes=100, retention_bytes=0, retention_ms=-1) == 3  # 0: everything closed goes
    assert _prefix(closed, active_bytes=100, retention_bytes=-1, retention_ms=-1) == 0  # -1: no size limit


def test_a_segment_ending_exactly_at_the_high_watermark_is_eligible() -> None:
    closed = _segments(100, 100, 100)  # segments end at 10, 20, 30
    assert _prefix(closed, hw=20, retention_bytes=0, retention_ms=-1) == 2
    assert _prefix(closed, hw=19, retention_bytes=0, retention_ms=-1) == 1


def test_every_closed_segment_below_the_log_start_is_deletable() -> None:
    closed = _segments(100, 100)
    assert _prefix(closed, log_start=20, retention_ms=-1) == 2
    assert _prefix(closed, log_start=19, retention_ms=-1) == 1
