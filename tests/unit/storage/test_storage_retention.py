"""Retention: whole closed segments go by age, by size or below the log start; never the active one."""

from __future__ import annotations

import os
from pathlib import Path

from kraftpy.storage import PartitionLog
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
