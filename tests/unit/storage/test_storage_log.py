"""PartitionLog: appends as leader and follower, reads, rolls, timestamps, truncation, flush, reopen."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import decode_batches
from kraftpy.protocol.records.header import parse_header
from kraftpy.storage import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kraftpy.storage.offset_index import OffsetIndex
from tests.unit.storage.test_storage_fixtures import make_batch, offsets_of, open_log, read_all


def segment_files(directory: Path, suffix: str = ".log") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


# -- leader appends ---------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_stamps_the_epoch(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        first = log.append_as_leader(make_batch(3, ts=10, base_offset=777), 5, now_ms=0)
        second = log.append_as_leader(make_batch(2, ts=20) + make_batch(1, ts=30), 6, now_ms=0)
        assert (first.first_offset, first.last_offset, first.batch_count, first.record_count) == (0, 2, 1, 3)
        assert (second.first_offset, second.last_offset, second.batch_count, second.max_timestamp) == (3, 5, 2, 30)
        assert log.log_end_offset == 6
        batches = list(decode_batches(read_all(log)))  # decode_batches checks every CRC
        assert [(b.base_offset, b.header.partition_leader_epoch) for b in batches] == [(0, 5), (3, 6), (5, 6)]
        assert [r.offset for r in batches[0].records] == [0, 1, 2]
        assert log.leader_epoch_cache.entries == [(5, 0), (6, 3)]


@pytest.mark.parametrize(
    "make,code",
    [
        (lambda: make_batch()[:-1], ErrorCode.CORRUPT_MESSAGE),  # truncated
        (lambda: make_batch()[:-1] + bytes([make_batch()[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE),  # CRC mismatch
        (lambda: make_batch(value_size=2000), ErrorCode.MESSAGE_TOO_LARGE),
        (lambda: make_batch(value_size=600) * 8, ErrorCode.RECORD_LIST_TOO_LARGE),
    ],
)
def test_bad_leader_appends_are_refused_and_write_nothing(tmp_path: Path, make, code: ErrorCode) -> None:
    with open_log(tmp_path / "t-0", max_message_bytes=1500, segment_bytes=4096) as log:
        log.append_as_leader(make_batch(), 0, now_ms=0)
        with pytest.raises(KafkaError) as info:
            log.append_as_leader(make_batch() + make(), 0, now_ms=0)
        assert info.value.code == code
        assert log.log_end_offset == 1
        assert offsets_of(read_all(log)) == [(0, 0)]


def test_leader_refuses_batches_with_gaps_in_offsets(tmp_path: Path) -> None:
    from kraftpy.protocol.records.batch import build_batch
    from kraftpy.protocol.records.record import Record

    gappy = build_batch([Record(0, 1, b"a", b"1"), Record(5, 1, b"b", b"2")])
    with open_log(tmp_path / "t-0") as log, pytest.raises(KafkaError) as info:
        log.append_as_leader(gappy, 0, now_ms=0)
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_a_stale_leader_epoch_is_fenced(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_leader(make_batch(), 3, now_ms=0)
        with pytest.raises(KafkaError) as info:
            log.append_as_leader(make_batch(), 2, now_ms=0)
        assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH


# -- follower appends --------------------------------------------------------------------


def test_follower_append_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as leader, open_log(tmp_path / "t-1") as follower:
        leader.append_as_leader(make_batch(2), 1, now_ms=0)
        leader.append_as_leader(make_batch(3), 4, now_ms=0)
        info = follower.append_as_follower(read_all(leader))
        assert (info.first_offset, info.last_offset, info.batch_count) == (0, 4, 2)
        assert read_all(follower) == read_all(leader)
        assert follower.leader_epoch_cache.entries == [(1, 0), (4, 2)]
        assert follower.end_offset_for_epoch(1) == (1, 2)


def test_follower_append_must_continue_the_log(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_follower(make_batch(2, base_offset=0, epoch=0))
        with pytest.raises(UnexpectedAppendOffsetError, match="starts at offset 5, but the log end offset is 2"):
            log.append_as_follower(make_batch(1, base_offset=5, epoch=0))
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_as_follower(make_batch(1, base_offset=1, epoch=0))
        with pytest.raises(UnexpectedAppendOffsetError, match="end of the previous batch"):
            log.append_as_follower(make_batch(1, base_offset=2, epoch=0) + make_batch(1, base_offset=2, epoch=0))
        assert log.log_end_offset == 2


def test_a_compacted_follower_accepts_gaps_left_by_the_cleaner(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", cleanup_policy="compact") as log:
        log.append_as_follower(make_batch(2, base_offset=0, epoch=0) + make_batch(1, base_offset=7, epoch=0))
        assert log.log_end_offset == 8
        assert offsets_of(log.read(3, 1000)) == [(7, 7)]


def test_follower_refuses_an_older_leader_epoch(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_follower(make_batch(1, base_offset=0, epoch=5))
        with pytest.raises(KafkaError) as info:
            log.append_as_follower(make_batch(1, base_offset=1, epoch=4))
        assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH


@pytest.mark.parametrize(
    ("before", "batches"),
    [
        ([1], [0]),  # epoch 0 after epoch 1: older too
        ([], [2, 1]),  # going back inside one fetched chunk
    ],
)
def test_follower_epochs_never_go_back_from_epoch_zero_up(
    tmp_path: Path, before: list[int], batches: list[int]
) -> None:
    with open_log(tmp_path / "t-0") as log:
        for i, epoch in enumerate(before):
            log.append_as_follower(make_batch(1, base_offset=i, epoch=epoch))
        chunk = b"".join(make_batch(1, base_offset=len(before) + i, epoch=e) for i, e in enumerate(batches))
        with pytest.raises(KafkaError) as info:
            log.append_as_follower(chunk)
        assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH and log.log_end_offset == len(before)


def test_an_empty_follower_append_writes_nothing_and_says_so(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_follower(make_batch(3, base_offset=0, epoch=2))
        info = log.append_as_follower(b"")
        assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (3, 2, 0, 0)
        assert info.leader_epoch == 2 and log.log_end_offset == 3


# -- reads ---------------------------------------------------------------------------------


@pytest.fixture
def filled(tmp_path: Path):
    """40 batches of 5 records (offsets 0..199) over several segments, small index interval."""
    log = open_log(tmp_path / "t-0", segment_bytes=2000, index_interval_bytes=300)
    for i in range(40):
        log.append_as_leader(make_batch(5, ts=1000 + 10 * i, tag=i), i // 10, now_ms=0)
    yield log
    log.close()


def test_reads_start_at_the_batch_holding_the_offset(filled) -> None:
    assert len(filled.segments) > 3
    for offset in range(0, 200, 7):
        batches = offsets_of(filled.read(offset, 1))
        assert batches == [(offset - offset % 5, offset - offset % 5 + 4)]


def test_reads_return_whole_batches_within_max_bytes(filled) -> None:
    size = len(make_batch(5, tag=1))
    data = filled.read(0, 3 * size + size // 2)
    assert offsets_of(data) == [(0, 4), (5, 9), (10, 14)]
    assert filled.read(0, size - 1, min_one_batch=False) == b""
    assert offsets_of(filled.read(0, 1, min_one_batch=True)) == [(0, 4)]


def test_a_read_stays_within_one_segment(filled) -> None:
    data = filled.read(0, 10**6)
    first_segment_end = filled.segments[1].base_offset
    assert offsets_of(data)[-1][1] == first_segment_end - 1


def test_max_offset_bounds_the_read(filled) -> None:
    assert offsets_of(filled.read(0, 10**6, max_offset=12)) == [(0, 4), (5, 9)]
    assert filled.read(10, 10**6, max_offset=12) == b""  # batch 10..14 crosses the bound
    assert filled.read(15, 10**6, max_offset=15) == b""


def test_reads_outside_the_log_raise_offset_out_of_range(filled) -> None:
    assert filled.read(200, 1000) == b""  # the log end offset: nothing yet
    with pytest.raises(OffsetOutOfRangeError) as info:
        filled.read(201, 1000)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert info.value.details == {"log_start_offset": 0, "log_end_offset": 200}
    with pytest.raises(OffsetOutOfRangeError):
        filled.read(-1, 1000)


def test_max_timestamp_finds_the_first_record_holding_the_largest_timestamp(tmp_path: Path) -> None:
    """ListOffsets -3 (KIP-734): the first segment whose largest timestamp is the log's, and in it
    the first record reaching it: ties go to the earliest, in a batch, across batches and segments."""
    with open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=150) as log:
        assert log.offset_for_timestamp(MAX_TIMESTAMP) is None  # empty: nothing to find
        log.append_as_leader(make_batch(3, ts=500, tag=0), 0, now_ms=0)  # offsets 0-2 at 500, 501, 502
        log.append_as_leader(make_batch(2, ts=900, tag=1), 1, now_ms=0)  # offsets 3-4 at 900, 901
        log.append_as_leader(make_batch(3, ts=899, tag=2), 1, now_ms=0)  # offsets 5-7: 901 again at 7
        while len(log.segments) < 3:  # later segments, every timestamp smaller
            log.append_as_leader(make_batch(2, ts=100, tag=9), 2, now_ms=0)
        log.append_as_leader(make_batch(2, ts=900, tag=3), 2, now_ms=0)  # 901 in a later segment too
        found = log.offset_for_timestamp(MAX_TIMESTAMP)
        assert (found.timestamp, found.offset, found.leader_epoch) == (901, 4, 1)
    for index in (tmp_path / "t-0").glob("*index"):
        index.unlink()  # rebuilt from the batches: the same answer
    with open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=150) as log:
        found = log.offset_for_timestamp(MAX_TIMESTAMP)
        assert (found.timestamp, found.offset) == (901, 4)
        log.append_as_leader(make_batch(1, ts=5_000, tag=4), 2, now_ms=0)
        assert log.offset_for_timestamp(MAX_TIMESTAMP).offset == log.log_end_offset - 1


def test_a_timestamp_equal_to_a_segments_largest_is_found_in_that_segment(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_bytes=300) as log:
        for i in range(12):
            log.append_as_leader(make_batch(2, ts=1000 + 10 * i, tag=i), 0, now_ms=0)  # max 1001 + 10i
        assert len(log.segments) > 2
        first_end = log.segments[1].base_offset
        last_batch = (first_end - 2) // 2  # the first segment's last batch: its largest timestamp
        largest = 1001 + 10 * last_batch
        found = log.offset_for_timestamp(largest)
        assert (found.timestamp, found.offset) == (largest, first_end - 1)


def test_an_abort_is_indexed_only_for_a_marker_inside_the_log(tmp_path: Path) -> None:
    from kraftpy.storage.txn_index import AbortedTxn

    with open_log(tmp_path / "t-0") as log:
        for i in range(3):
            log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)  # offsets 0-5
        log.high_watermark = 6
        log.increment_log_start_offset(2)
        log.append_aborted_txn(AbortedTxn(7, 2, 2, 3))  # a marker at the log start: in the log
        log.append_aborted_txn(AbortedTxn(8, 2, 5, 6))  # at the last offset: in the log
        with pytest.raises(ValueError, match="not in the log"):
            log.append_aborted_txn(AbortedTxn(9, 5, 6, 6))  # at the log end: not written yet
        with pytest.raises(ValueError, match="not in the log"):
            log.append_aborted_txn(AbortedTxn(9, 0, 1, 6))  # below the log start
        assert [e.producer_id for e in log.collect_aborted_txns(2, 6)] == [7, 8]


def test_offset_for_timestamp(filled) -> None:
    assert filled.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    latest = filled.offset_for_timestamp(LATEST_TIMESTAMP)
    assert (latest.offset, latest.leader_epoch) == (200, 3)
    # Batch i holds timestamps 1000+10i .. 1000+10i+4 at offsets 5i .. 5i+4.
    found = filled.offset_for_timestamp(1000 + 10 * 17 + 3)
    assert (found.timestamp, found.offset, found.leader_epoch) == (1173, 88, 1)
    found = filled.offset_for_timestamp(1000 + 10 * 17 + 7)  # between batches: the next batch's first
    assert (found.timestamp, found.offset) == (1180, 90)
    assert filled.offset_for_timestamp(0).offset == 0
    assert filled.offset_for_timestamp(10**12) is None


# -- rolls -------------------------------------------------------------------------------------


def test_segments_roll_on_size_and_are_named_by_base_offset(tmp_path: Path) -> None:
    batch = make_batch(1, value_size=400)
    with open_log(tmp_path / "t-0", segment_bytes=1000) as log:
        for _ in range(5):
            log.append_as_leader(batch, 0, now_ms=0)
        assert [s.base_offset for s in log.segments] == [0, 2, 4]
        assert all(s.size_bytes <= 1000 for s in log.segments)
        assert log.active_segment.base_offset == 4 and log.active_segment.next_offset == 5
    assert segment_files(tmp_path / "t-0") == [f"{b:020d}.log" for b in (0, 2, 4)]
    assert len(segment_files(tmp_path / "t-0", ".index")) == 3
    assert len(segment_files(tmp_path / "t-0", ".timeindex")) == 3


def test_segments_roll_on_age_of_the_first_batch(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_ms=1000) as log:
        log.append_as_leader(make_batch(ts=5000), 0, now_ms=5000)
        log.append_as_leader(make_batch(ts=5900), 0, now_ms=5900)
        log.append_as_leader(make_batch(ts=6000), 0, now_ms=6000)  # exactly segment_ms: not yet (Kafka's >)
        assert len(log.segments) == 1
        log.append_as_leader(make_batch(ts=6001), 0, now_ms=6001)
        assert [s.base_offset for s in log.segments] == [0, 3]


def test_a_batch_that_exactly_fills_the_segment_stays_in_it(tmp_path: Path) -> None:
    batch = make_batch(1, value_size=400)
    with open_log(tmp_path / "t-0", segment_bytes=2 * len(batch)) as log:
        log.append_as_leader(batch, 0, now_ms=0)
        log.append_as_leader(batch, 0, now_ms=0)
        assert len(log.segments) == 1 and log.segments[0].size_bytes == 2 * len(batch)
        log.append_as_leader(batch, 0, now_ms=0)
        assert [s.base_offset for s in log.segments] == [0, 2]


def test_a_segment_rolls_before_an_offset_its_index_cannot_hold(tmp_path: Path) -> None:
    """Index entries hold offsets relative to the segment's base in 32 bits: a compacted follower's
    batch whose last offset is INT32_MAX past the base still fits, one past that opens a segment."""
    top = 2**31 - 1
    with open_log(tmp_path / "t-0", cleanup_policy="compact") as log:
        log.append_as_follower(make_batch(1, base_offset=0, epoch=0))
        log.append_as_follower(make_batch(1, base_offset=top, epoch=0))  # relative offset exactly INT32_MAX
        assert len(log.segments) == 1
        log.append_as_follower(make_batch(1, base_offset=top + 1, epoch=0))
        assert [s.base_offset for s in log.segments] == [0, top + 1]


def test_rolling_an_empty_active_segment_is_a_no_op(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.roll(now_ms=0)
        log.append_as_leader(make_batch(1), 0, now_ms=0)
        log.roll(now_ms=0)
        log.roll(now_ms=0)  # the new active segment is empty: nothing to roll
        assert [s.base_offset for s in log.segments] == [0, 1]


def test_old_create_times_do_not_roll_a_segment_per_batch(tmp_path: Path) -> None:
    # Kafka compares the new batch's timestamp with the segment's first one, not the wall clock: a
    # producer with CreateTimes a year back would otherwise open a segment (3 files) per batch.
    year_ms = 365 * 24 * 3600 * 1000
    now_ms = 10 * year_ms
    with open_log(tmp_path / "t-0", segment_ms=1000) as log:
        for i in range(5):
            log.append_as_leader(make_batch(ts=now_ms - year_ms + i), 0, now_ms=now_ms + i)
        assert len(log.segments) == 1
        log.append_as_leader(make_batch(ts=now_ms - year_ms + 1001), 0, now_ms=now_ms + 5)
        assert len(log.segments) == 2


# -- truncation ---------------------------------------------------------------------------------


def test_truncate_to_removes_the_tail_and_the_epochs_after_it(filled) -> None:
    filled.high_watermark = 150
    assert filled.truncate_to(102)  # mid-batch: the batch 100..104 goes whole
    assert filled.log_end_offset == 100
    assert filled.high_watermark == 100
    assert filled.recovery_point <= 100
    assert filled.leader_epoch_cache.latest_epoch == 1
    assert filled.end_offset_for_epoch(1) == (1, 100)
    assert offsets_of(read_all(filled))[-1] == (95, 99)
    filled.append_as_follower(make_batch(5, base_offset=100, epoch=7))
    assert filled.leader_epoch_cache.entries[-1] == (7, 100)
    assert offsets_of(filled.read(100, 1000)) == [(100, 104)]


def test_truncate_to_at_the_end_drops_only_an_epoch_with_no_data(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_leader(make_batch(2), 1, now_ms=0)
        log.leader_epoch_cache.assign(2, 2)  # became leader at offset 2, then lost it without appending
        assert not log.truncate_to(5)
        assert log.log_end_offset == 2
        assert log.leader_epoch_cache.entries == [(1, 0)]


def test_truncate_to_survives_reopen(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_bytes=1000) as log:
        for i in range(20):
            log.append_as_leader(make_batch(2, tag=i), i, now_ms=0)
        log.flush()
        log.truncate_to(21)
    with open_log(tmp_path / "t-0", segment_bytes=1000) as log:
        assert log.log_end_offset == 20
        assert log.leader_epoch_cache.latest_epoch == 9
        assert offsets_of(read_all(log))[-1] == (18, 19)


def test_truncate_fully_and_start_at(filled) -> None:
    filled.truncate_fully_and_start_at(1000)
    assert (filled.log_start_offset, filled.log_end_offset, filled.high_watermark) == (1000, 1000, 1000)
    assert filled.leader_epoch_cache.entries == []
    assert [s.base_offset for s in filled.segments] == [1000]
    with pytest.raises(OffsetOutOfRangeError):
        filled.read(0, 100)
    filled.append_as_follower(make_batch(2, base_offset=1000, epoch=9))
    assert offsets_of(filled.read(1000, 100)) == [(1000, 1001)]


def test_increment_log_start_offset_hides_older_records(filled) -> None:
    with pytest.raises(OffsetOutOfRangeError):
        filled.increment_log_start_offset(50)  # above the high watermark
    filled.high_watermark = 120
    assert filled.increment_log_start_offset(52)
    with pytest.raises(OffsetOutOfRangeError):
        filled.read(51, 100)
    assert offsets_of(filled.read(52, 1)) == [(50, 54)]  # whole batches: the caller skips 50, 51
    assert filled.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 52
    assert filled.leader_epoch_cache.entries[0] == (1, 52)


# -- flush, reopen ---------------------------------------------------------------------------


def test_flush_moves_the_recovery_point(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        for _ in range(3):
            log.append_as_leader(make_batch(2), 0, now_ms=0)
        assert log.recovery_point == 0
        log.flush(up_to_offset=4)
        assert log.recovery_point == 4
        log.flush()
        assert log.recovery_point == 6


def test_flush_messages_policy_flushes_after_n_records(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", flush_messages=5) as log:
        log.append_as_leader(make_batch(2), 0, now_ms=0)
        log.append_as_leader(make_batch(2), 0, now_ms=0)
        assert log.recovery_point == 0
        log.append_as_leader(make_batch(2), 0, now_ms=0)
        assert log.recovery_point == 6
        log.append_as_leader(make_batch(4), 0, now_ms=0)
        assert log.recovery_point == 6
        log.append_as_leader(make_batch(1), 0, now_ms=0)  # exactly flush_messages unflushed: Kafka's >=
        assert log.recovery_point == 11


def test_flush_ms_policy_flushes_at_exactly_flush_ms(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", flush_ms=1000) as log:
        log.append_as_leader(make_batch(2), 0, now_ms=0)
        last_flush = log._last_flush_ms  # the wall clock at open: the policy counts from there
        assert not log.maybe_flush(now_ms=last_flush + 999) and log.recovery_point == 0
        assert log.maybe_flush(now_ms=last_flush + 1000) and log.recovery_point == 2


def test_flush_ms_policy(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", flush_ms=1) as log:
        log.append_as_leader(make_batch(2), 0, now_ms=0)
        assert log.maybe_flush(now_ms=2**62)
        assert log.recovery_point == 2
        assert not log.maybe_flush(now_ms=2**62)  # nothing new to flush


def test_close_and_reopen_keeps_everything(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_bytes=1500, index_interval_bytes=100) as log:
        for i in range(50):
            log.append_as_leader(make_batch(3, ts=i, tag=i), i // 7, now_ms=0)
        log.high_watermark = 120
        before = read_all(log)
        entries = log.leader_epoch_cache.entries
    with open_log(tmp_path / "t-0", segment_bytes=1500, index_interval_bytes=100) as log:
        assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (150, 120, 150)
        assert log.last_recovery is not None and log.last_recovery.validated_bytes == 0  # clean: nothing rescanned
        assert read_all(log) == before
        assert log.leader_epoch_cache.entries == entries
    # Every persisted index entry points at the batch it names.
    directory = tmp_path / "t-0"
    for name in segment_files(directory, ".index"):
        base = int(name[:20])
        data = (directory / f"{base:020d}.log").read_bytes()
        index = OffsetIndex.load(directory / name, base, log_size=len(data))
        assert len(index) > 0
        for offset, position in index.entries():
            assert parse_header(data, position).base_offset == offset


def test_a_directory_opens_once(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0"), pytest.raises(LogStorageError, match="already open"):
        open_log(tmp_path / "t-0")


def test_a_close_whose_flush_fails_still_releases_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush's error is raised, but the segments are closed and the directory lock released: the
    log can be opened again (recovering what was not flushed) instead of staying half open."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(2), 0, now_ms=0)

    def flush_fails(up_to_offset: int | None = None) -> None:
        raise LogStorageError("fsync failed: EIO")

    monkeypatch.setattr(log, "flush", flush_fails)
    with pytest.raises(LogStorageError, match="EIO"):
        log.close()
    assert log.closed
    with open_log(tmp_path / "t-0") as again:
        assert again.log_end_offset == 2


def test_a_closed_log_refuses_work(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.close()
    with pytest.raises(LogStorageError):
        log.append_as_leader(make_batch(), 0, now_ms=0)
    with pytest.raises(LogStorageError):
        log.read(0, 10)


# -- threads ---------------------------------------------------------------------------------


def test_concurrent_reads_flushes_and_appends_see_only_whole_batches(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    done = threading.Event()
    with open_log(tmp_path / "t-0", segment_bytes=4000, index_interval_bytes=200) as log:

        def reader() -> None:
            try:
                while not done.is_set():
                    end = log.log_end_offset
                    for offset in range(0, end, 13):
                        try:
                            data = log.read(offset, 700)
                        except OffsetOutOfRangeError:
                            break  # a truncation moved the end below this offset: legitimate
                        for batch in decode_batches(data):  # whole batches with valid CRCs
                            assert batch.last_offset >= offset
            except BaseException as exc:  # reported below
                errors.append(exc)

        def flusher() -> None:
            try:
                while not done.is_set():
                    log.flush()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader), threading.Thread(target=reader), threading.Thread(target=flusher)]
        for t in threads:
            t.start()
        try:
            for i in range(300):
                log.append_as_leader(make_batch(3, tag=i), 0, now_ms=0)
                if i % 100 == 99:
                    log.truncate_to(log.log_end_offset - 30)
        finally:
            done.set()
            for t in threads:
                t.join()
        assert errors == []
        assert [b for b, _ in offsets_of(read_all(log))] == list(range(0, log.log_end_offset, 3))


def test_segment_files_have_the_bytes_read_returns(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0") as log:
        log.append_as_leader(make_batch(4, epoch=0), 2, now_ms=0)
        data = log.read(0, 1000)
    assert (tmp_path / "t-0" / f"{0:020d}.log").read_bytes() == data
    assert os.path.getsize(tmp_path / "t-0" / f"{0:020d}.index") == 0  # one small batch: no entry needed
