"""Opening a log after an unclean shutdown: torn tails, corrupt batches, bad indexes and checkpoints.

A crash is simulated by copying the directory of a log that is still open (the
copy sees what the page cache holds, as a restarted process would) and then
damaging the copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kraftpy.storage import CorruptCheckpointError, LogStorageError, PartitionLog
from kraftpy.storage.checkpoints import OffsetCheckpoint, write_checkpoint
from kraftpy.storage.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from tests.unit.storage.test_storage_fixtures import make_batch, offsets_of, open_log, read_all

CONFIG = {"segment_bytes": 1200, "index_interval_bytes": 150}


def crash_copy(log: PartitionLog, dest: Path) -> Path:
    shutil.copytree(log.directory, dest)
    return dest


def seg(directory: Path, base: int, suffix: str = ".log") -> Path:
    return directory / f"{base:020d}{suffix}"


@pytest.fixture
def crashed(tmp_path: Path):
    """A log of 30 batches (offsets 0..59, epochs 0..2) over several segments, flushed up to offset 20."""
    log = open_log(tmp_path / "live-0", **CONFIG)
    for i in range(30):
        log.append_as_leader(make_batch(2, tag=i), i // 10, now_ms=0)
        if i == 9:
            log.flush()
            log.write_checkpoints()
    copy = crash_copy(log, tmp_path / "t-0")
    bases = [s.base_offset for s in log.segments]
    log.close()
    return copy, bases


def test_an_intact_crashed_log_recovers_everything(crashed) -> None:
    directory, _bases = crashed
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == 60
        assert log.last_recovery.validated_bytes > 0 and log.last_recovery.first_bad is None
        assert [b for b, _ in offsets_of(read_all(log))] == list(range(0, 60, 2))
        assert log.leader_epoch_cache.entries == [(0, 0), (1, 20), (2, 40)]
        assert log.recovery_point == 60


def test_a_torn_tail_is_cut_at_the_last_whole_batch(crashed) -> None:
    directory, bases = crashed
    last = seg(directory, bases[-1])
    size = last.stat().st_size
    with open(last, "r+b") as f:
        f.truncate(size - 5)
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == 58
        assert log.last_recovery.first_bad[1] == size - len(make_batch(2, tag=29))
        assert offsets_of(read_all(log))[-1] == (56, 57)
        log.append_as_leader(make_batch(2, tag=99), 2, now_ms=0)
        assert offsets_of(log.read(58, 1000)) == [(58, 59)]


def test_garbage_after_the_last_batch_is_cut(crashed) -> None:
    directory, bases = crashed
    with open(seg(directory, bases[-1]), "ab") as f:
        f.write(b"\x00" * 100)
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == 60
        assert log.last_recovery.truncated_bytes == 100


def test_a_corrupt_batch_cuts_its_segment_and_deletes_every_later_one(crashed) -> None:
    directory, bases = crashed
    target = bases[2]  # past the recovery point (offset 20)
    assert target > 20
    path = seg(directory, target)
    data = bytearray(path.read_bytes())
    size = len(make_batch(2, tag=1))
    data[size + 70] ^= 0xFF  # inside the second batch's records: CRC mismatch
    path.write_bytes(bytes(data))
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == target + 2
        assert log.last_recovery.first_bad[:2] == (target, size)
        assert "CRC" in log.last_recovery.first_bad[2]
        assert [s.base_offset for s in log.segments] == bases[:3]
        assert log.leader_epoch_cache.end_offset_for(log.leader_epoch_cache.latest_epoch)[1] == target + 2
    for base in bases[3:]:
        assert not seg(directory, base).exists()
        assert not seg(directory, base, ".index").exists()


def test_offsets_going_backwards_are_corruption(crashed) -> None:
    directory, bases = crashed
    path = seg(directory, bases[-1])
    data = bytearray(path.read_bytes())
    size = len(make_batch(2, tag=1))
    data[size : size + 8] = (0).to_bytes(8, "big")  # baseOffset is outside the CRC
    path.write_bytes(bytes(data))
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == bases[-1] + 2
        assert "below the expected" in log.last_recovery.first_bad[2]


def test_missing_and_corrupt_indexes_of_trusted_segments_are_rebuilt(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", **CONFIG) as log:
        for i in range(30):
            log.append_as_leader(make_batch(2, ts=100 + i, tag=i), 0, now_ms=0)
        bases = [s.base_offset for s in log.segments]
        expected = read_all(log)
    seg(tmp_path / "t-0", bases[0], ".index").unlink()
    seg(tmp_path / "t-0", bases[1], ".index").write_bytes(b"\x00\x00\x00\x07\x00\x00\x00\x05")
    seg(tmp_path / "t-0", bases[2], ".timeindex").write_bytes(b"junk")
    with open_log(tmp_path / "t-0", **CONFIG) as log:
        assert read_all(log, max_bytes=100) == expected
        for offset in range(0, 60, 3):
            assert offsets_of(log.read(offset, 1)) == [(offset - offset % 2, offset - offset % 2 + 1)]
        # Batch i holds timestamps 100+i, 101+i at offsets 2i, 2i+1: 113 is first at offset 25.
        assert log.offset_for_timestamp(113).offset == 25
    assert seg(tmp_path / "t-0", bases[0], ".index").stat().st_size > 0


def test_indexes_rebuild_over_one_record_batches(tmp_path: Path) -> None:
    """A rebuilt index walks the trusted batches from the segment's start, checking each one's
    offsets: a batch of one record (last offset = base offset) at the start is sound."""
    with open_log(tmp_path / "t-0", **CONFIG) as log:
        for i in range(40):
            log.append_as_leader(make_batch(1, tag=i), 0, now_ms=0)
        bases = [s.base_offset for s in log.segments]
        expected = read_all(log)
    assert len(bases) > 2
    for base in bases:
        seg(tmp_path / "t-0", base, ".index").unlink()
    with open_log(tmp_path / "t-0", **CONFIG) as log:
        assert read_all(log, max_bytes=100) == expected
        assert [offsets_of(log.read(o, 1)) for o in bases] == [[(o, o)] for o in bases]


def test_a_rebuilt_index_refuses_trusted_batches_whose_offsets_overlap(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", **CONFIG) as log:
        for i in range(30):
            log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
        first = log.segments[0].base_offset
    seg(tmp_path / "t-0", first, ".index").unlink()
    _patch_batch_field(tmp_path / "t-0", first, 3, 0, (5).to_bytes(8, "big"))  # batch 3 (offsets 6-7) now says 5
    with open_log(tmp_path / "t-0", **CONFIG) as log, pytest.raises(LogStorageError, match="do not follow 5"):
        log.read(0, 1)


def test_a_corrupt_epoch_checkpoint_is_rebuilt_from_the_batches(crashed) -> None:
    directory, _ = crashed
    (directory / LEADER_EPOCH_CHECKPOINT).write_text("0\n1\nnot numbers\n")
    with open_log(directory, **CONFIG) as log:
        assert log.leader_epoch_cache.entries == [(0, 0), (1, 20), (2, 40)]


def test_epochs_checkpointed_ahead_of_lost_data_are_dropped(crashed) -> None:
    directory, _ = crashed
    write_checkpoint(directory / LEADER_EPOCH_CHECKPOINT, [(0, 0), (1, 20), (2, 40), (5, 60)])
    with open_log(directory, **CONFIG) as log:
        assert log.leader_epoch_cache.latest_epoch == 2


def test_corrupt_recovery_point_and_high_watermark_fall_back_safely(crashed) -> None:
    directory, _ = crashed
    (directory / RECOVERY_POINT_CHECKPOINT).write_text("garbage")
    (directory / HIGH_WATERMARK_CHECKPOINT).write_text("0\n1\n999\n# crc32c 00000000\n")
    with open_log(directory, **CONFIG) as log:
        assert log.last_recovery.recovery_point == 0  # everything was validated
        assert log.log_end_offset == 60
        assert log.high_watermark == 0


def test_a_corrupt_log_start_checkpoint_stops_the_open(crashed) -> None:
    directory, _ = crashed
    (directory / LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\n12\n# crc32c 12345678\n")
    with pytest.raises(CorruptCheckpointError, match="delete the file"):
        open_log(directory, **CONFIG)
    (directory / LOG_START_OFFSET_CHECKPOINT).unlink()
    with open_log(directory, **CONFIG) as log:
        assert log.log_start_offset == 0


def test_leftovers_of_interrupted_operations_are_tidied(crashed) -> None:
    directory, _bases = crashed
    (directory / "recovery-point-offset-checkpoint.tmp").write_text("half")
    orphan = seg(directory, 999_999, ".index")
    orphan.write_bytes(b"")
    # Names no later write of the open reuses: each must be removed by the tidying itself.
    stray_tmp, cleaned, orphan_txn = (
        directory / "something.tmp",
        seg(directory, 0, ".log.cleaned"),
        seg(directory, 999_999, ".txnindex"),
    )
    for path in (stray_tmp, cleaned, orphan_txn):
        path.write_bytes(b"x")
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == 60
        assert not any(p.exists() for p in (orphan, stray_tmp, cleaned, orphan_txn))
    assert not (directory / "recovery-point-offset-checkpoint.tmp").exists()


def test_a_log_start_past_the_surviving_data_restarts_the_log_there(crashed) -> None:
    directory, _bases = crashed
    write_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT, [(500,)])
    with open_log(directory, **CONFIG) as log:
        assert (log.log_start_offset, log.log_end_offset) == (500, 500)
        assert log.leader_epoch_cache.entries == []


def _patch_batch_field(directory: Path, base: int, batch_index: int, at: int, value: bytes) -> None:
    path = seg(directory, base)
    data = bytearray(path.read_bytes())
    pos = batch_index * len(make_batch(2, tag=1))
    data[pos + at : pos + at + len(value)] = value
    path.write_bytes(bytes(data))


def test_a_base_offset_damaged_upwards_is_caught_by_contiguity(crashed) -> None:
    directory, bases = crashed
    _patch_batch_field(directory, bases[-1], 1, 0, (10**9).to_bytes(8, "big"))  # baseOffset: outside the CRC
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == bases[-1] + 2
        assert "gap" in log.last_recovery.first_bad[2]


@pytest.mark.parametrize(
    "epoch,reason",
    [
        (9, "checkpoint"),  # upwards: the leader-epoch checkpoint knows the batch's epoch
        # Found by test_storage_crash's hypothesis run: a garbage byte at the top of partitionLeaderEpoch
        # made it negative, which the epoch checks (all for epochs >= 0) let through.
        (-671088640, "below -1"),
    ],
)
def test_a_damaged_leader_epoch_cuts_the_log_before_its_batch(crashed, epoch: int, reason: str) -> None:
    directory, bases = crashed
    _patch_batch_field(directory, bases[-1], 1, 12, epoch.to_bytes(4, "big", signed=True))  # outside the CRC
    with open_log(directory, **CONFIG) as log:
        assert log.log_end_offset == bases[-1] + 2
        assert reason in log.last_recovery.first_bad[2]
        assert log.leader_epoch_cache.latest_epoch == 2
        assert offsets_of(read_all(log))[-1] == (bases[-1], bases[-1] + 1)


def test_a_compacted_log_keeps_its_gaps_through_recovery(tmp_path: Path) -> None:
    live = open_log(tmp_path / "live-0", cleanup_policy="compact", segment_bytes=400)
    for i in range(12):
        live.append_as_follower(make_batch(2, base_offset=10 * i, epoch=0, tag=i))
    copy = crash_copy(live, tmp_path / "t-0")
    expected = read_all(live)
    live.close()
    with open_log(copy, cleanup_policy="compact", segment_bytes=400) as log:
        assert log.last_recovery.first_bad is None
        assert log.log_end_offset == 112
        assert read_all(log) == expected


def test_recovery_from_a_point_inside_an_epoch_keeps_where_that_epoch_started(tmp_path: Path) -> None:
    # Found by the Jepsen-like run's audit: the scan from the recovery point saw epoch 0 first at offset 10
    # and assigned (0, 10) onto the checkpointed [0@0, 1@20, 2@40], which dropped 0@0: the batches
    # below 10 lost their epoch, and OffsetsForLeaderEpoch answers about epoch 0 with them.
    log = open_log(tmp_path / "live-0", **CONFIG)
    for i in range(30):
        log.append_as_leader(make_batch(2, tag=i), i // 10, now_ms=0)
        if i == 4:
            log.flush()
            log.write_checkpoints()  # recovery point 10, in the middle of epoch 0 (offsets 0-19)
    directory = crash_copy(log, tmp_path / "t-0")
    log.close()
    with open_log(directory, **CONFIG) as recovered:
        assert recovered.last_recovery.recovery_point == 10
        assert recovered.leader_epoch_cache.entries == [(0, 0), (1, 20), (2, 40)]
        assert recovered.end_offset_for_epoch(0) == (0, 20)


def test_a_gap_the_cleaner_left_right_below_its_checkpoint_survives_a_change_to_delete(tmp_path: Path) -> None:
    """Found by a mutation run: a compacted log switched to cleanup.policy=delete allows gaps only
    below the cleaner's checkpoint. A tombstone removed as the last record below it leaves a gap
    ending exactly there, and recovery took the untouched segment starting at the checkpoint for a
    damaged one: it cut the log there and lost every record after it."""
    from kraftpy.storage.cleaner import LogCleaner
    from tests.unit.storage.test_storage_cleaner import DAY, compacted, put, records

    live = compacted(tmp_path / "live-0", delete_retention_ms=DAY, segment_bytes=100_000)
    put(live, "a", "1")
    put(live, "b", "2")
    put(live, "a", None)  # a tombstone: the last record below the roll
    live.roll(now_ms=1000)
    checkpoint = live.active_segment.base_offset
    for i in range(5):
        put(live, f"later-{i}", "x")
    live.high_watermark = live.log_end_offset
    cleaner = LogCleaner()
    assert cleaner.clean(live, now_ms=2000, force=True) is not None
    assert cleaner.clean(live, now_ms=1000 + DAY + 1) is not None  # the tombstone's delete horizon passed
    expected = records(live)
    assert [offset for offset, _, _ in expected] == [1, *range(checkpoint, checkpoint + 5)]  # 0 and 2 gone
    directory = crash_copy(live, tmp_path / "t-0")
    live.close()
    (directory / RECOVERY_POINT_CHECKPOINT).unlink()  # an unclean stop: everything is validated
    with open_log(directory, cleanup_policy="delete", segment_bytes=100_000) as log:
        assert log.last_recovery.first_bad is None
        assert records(log) == expected and log.log_end_offset == checkpoint + 5


@pytest.mark.parametrize("past", [0, 1])
def test_in_a_delete_log_a_gap_reaching_past_the_cleaners_checkpoint_is_still_damage(tmp_path: Path, past: int) -> None:
    """The other side of the boundary: the cleaner never removes a record at or past its checkpoint,
    so a gap ending beyond it (a damaged baseOffset) is cut as before."""
    live = open_log(tmp_path / "live-0", segment_bytes=100_000)
    for i in range(4):
        live.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)  # offsets 0..7
    directory = crash_copy(live, tmp_path / "t-0")
    live.close()
    OffsetCheckpoint(directory / CLEANER_OFFSET_CHECKPOINT).write(6 + past)  # as if cleaned below 6 (7)
    (directory / RECOVERY_POINT_CHECKPOINT).unlink()
    _patch_batch_field(directory, 0, 3, 0, (7).to_bytes(8, "big"))  # the last batch claims 7, after 6
    with open_log(directory, segment_bytes=100_000) as log:
        if past:  # the gap [6, 7) lies below the checkpoint 7: the cleaner's, kept
            assert log.last_recovery.first_bad is None and log.log_end_offset == 9
        else:  # it reaches past the checkpoint 6: damage, cut before the batch
            assert "gap" in log.last_recovery.first_bad[2] and log.log_end_offset == 6


def test_a_log_whose_very_first_batch_is_damaged_recovers_empty_and_takes_appends(tmp_path: Path) -> None:
    live = open_log(tmp_path / "live-0", **CONFIG)
    for i in range(3):
        live.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
    directory = crash_copy(live, tmp_path / "t-0")  # nothing flushed: recovery point 0
    live.close()
    _patch_batch_field(directory, 0, 0, 70, b"\xff")  # inside the first batch's records: CRC mismatch
    with open_log(directory, **CONFIG) as log:
        assert log.last_recovery.first_bad[:2] == (0, 0) and "CRC" in log.last_recovery.first_bad[2]
        assert [s.base_offset for s in log.segments] == [0] and log.log_end_offset == 0  # emptied, kept
        log.append_as_leader(make_batch(2, tag=9), 1, now_ms=0)
        assert offsets_of(read_all(log)) == [(0, 1)]


def test_batches_without_a_leader_epoch_add_no_epoch_entry(tmp_path: Path) -> None:
    live = open_log(tmp_path / "live-0", **CONFIG)
    live.append_as_follower(make_batch(2, base_offset=0, epoch=-1, tag=0))  # written before epochs (v0/v1 era)
    live.append_as_follower(make_batch(2, base_offset=2, epoch=-1, tag=1))
    live.append_as_follower(make_batch(2, base_offset=4, epoch=3, tag=2))
    directory = crash_copy(live, tmp_path / "t-0")
    live.close()
    (directory / LEADER_EPOCH_CHECKPOINT).unlink(missing_ok=True)  # rebuilt from the batches alone
    with open_log(directory, **CONFIG) as log:
        assert log.last_recovery.first_bad is None
        assert log.last_recovery.epochs == [(3, 4)]
        assert log.leader_epoch_cache.entries == [(3, 4)]


def test_in_a_compacted_log_a_batch_below_its_segments_base_offset_is_damage(tmp_path: Path) -> None:
    """A segment's file name is where its offsets start: a first batch claiming less (inside a
    compaction gap, so contiguity alone cannot tell) is a damaged baseOffset."""
    live = open_log(tmp_path / "live-0", cleanup_policy="compact", segment_bytes=400)
    for i in range(12):
        live.append_as_follower(make_batch(2, base_offset=10 * i, epoch=0, tag=i))
    directory = crash_copy(live, tmp_path / "t-0")
    bases = [s.base_offset for s in live.segments]
    live.close()
    second = bases[1]
    _patch_batch_field(directory, second, 0, 0, (second - 5).to_bytes(8, "big"))  # after the gap, below the base
    with open_log(directory, cleanup_policy="compact", segment_bytes=400) as log:
        assert log.last_recovery.first_bad[:2] == (second, 0)
        assert "below the expected" in log.last_recovery.first_bad[2]
        assert [s.base_offset for s in log.segments] == bases[:1]


def test_a_trusted_segment_becomes_the_active_one_when_the_next_loses_its_first_batch(tmp_path: Path) -> None:
    """The recovery point at the last segment's base offset and that segment's first batch damaged:
    recovery deletes the segment, and the trusted one before it, never validated, is the active
    segment again, with its end, appends and reads right."""
    live = open_log(tmp_path / "live-0", **CONFIG)
    i = 0
    while len(live.segments) < 3:
        live.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
        i += 1
    last_base = live.segments[-1].base_offset
    expected = offsets_of(read_all(live))[:-1]  # all but the last segment's one batch
    directory = crash_copy(live, tmp_path / "t-0")
    live.close()
    OffsetCheckpoint(directory / RECOVERY_POINT_CHECKPOINT).write(last_base)
    _patch_batch_field(directory, last_base, 0, 70, b"\xff")  # its records: CRC mismatch
    with open_log(directory, **CONFIG) as log:
        assert log.last_recovery.first_bad[:2] == (last_base, 0)
        assert len(log.segments) == 2 and log.log_end_offset == last_base
        assert offsets_of(read_all(log)) == expected
        log.append_as_leader(make_batch(2, tag=99), 1, now_ms=0)
        assert offsets_of(log.read(last_base, 10_000)) == [(last_base, last_base + 1)]
    with open_log(directory, **CONFIG) as reopened:  # and a clean reopen agrees
        assert reopened.log_end_offset == last_base + 2


@pytest.mark.parametrize("case", ["new log", "segment below the log start", "recovery cut", "clean reopen"])
def test_opening_fsyncs_the_directory_exactly_when_it_changed_its_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A segment file created or deleted by the open is durable only once the directory is fsynced
    (else a power cut can bring a deleted segment back, or lose a created one); an open that changed
    no name skips the fsync."""
    from kraftpy.storage import opening

    directory = tmp_path / "t-0"
    if case != "new log":
        with open_log(directory, **CONFIG) as log:
            for i in range(30):
                log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
            log.high_watermark = log.log_end_offset
            bases = [s.base_offset for s in log.segments]
            if case == "segment below the log start":
                log.increment_log_start_offset(bases[1])  # exactly where the second segment starts
        if case == "recovery cut":
            (directory / RECOVERY_POINT_CHECKPOINT).unlink()
            _patch_batch_field(directory, bases[1], 0, 70, b"\xff")
    synced: list[Path] = []
    real = opening.fsync_dir
    monkeypatch.setattr(opening, "fsync_dir", lambda d: synced.append(Path(d)) or real(d))
    with open_log(directory, **CONFIG) as log:
        if case == "segment below the log start":
            assert log.segments[0].base_offset == bases[1]  # the first one went, though no offset of it is left
        if case == "recovery cut":
            assert [s.base_offset for s in log.segments] == bases[:1]
    assert synced == ([] if case == "clean reopen" else [directory])
