"""Log compaction: latest record per key, tombstones, ratios and lags, crash-safe swaps, no blocking."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from kraftpy.protocol.records.batch import build_batch, decode_batches
from kraftpy.protocol.records.record import Record
from kraftpy.storage import MAX_TIMESTAMP, PartitionLog
from kraftpy.storage.cleaner import LogCleaner
from kraftpy.storage.layout import CLEANER_SCRATCH_DIR
from kraftpy.storage.swap import commit_swap
from tests.unit.storage.test_storage_fixtures import open_log, read_all

DAY = 24 * 3600 * 1000


def compacted(directory: Path, **config: object) -> PartitionLog:
    options = {"cleanup_policy": "compact", "segment_bytes": 1000, "index_interval_bytes": 100, **config}
    return open_log(directory, **options)


def put(log: PartitionLog, key: str, value: str | None, ts: int = 1000) -> int:
    batch = build_batch([(key.encode(), None if value is None else value.encode(), (), ts)])
    return log.append_as_leader(batch, 0, now_ms=ts).first_offset


def records(log: PartitionLog) -> list[tuple[int, str, str | None]]:
    return [
        (r.offset, r.key.decode(), None if r.value is None else r.value.decode())
        for b in decode_batches(read_all(log))
        for r in b.records
    ]


def test_keeps_the_latest_record_per_key_with_original_offsets(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0") as log:
        expected = {}
        for i in range(60):
            key = f"key-{i % 7}"
            offset = put(log, key, f"v{i}")
            expected[key] = (offset, f"v{i}")
        log.high_watermark = log.log_end_offset
        active = log.active_segment.base_offset
        before = records(log)
        result = LogCleaner().clean(log, now_ms=2000)
        assert result is not None and result.records_removed > 0
        after = records(log)
        cleaned = [r for r in after if r[0] < active]
        tail = [r for r in after if r[0] >= active]
        assert tail == [r for r in before if r[0] >= active]  # the active segment is untouched
        latest_below = {}
        for offset, key, value in before:
            if offset < active:
                latest_below[key] = (offset, key, value)
        # Below the active segment: exactly the latest record of each key found there.
        assert cleaned == sorted(latest_below.values())
        assert log.log_end_offset == 60
        # A read at an offset the cleaner removed returns the next surviving batch.
        gap = next(o for o in range(60) if o not in {r[0] for r in after})
        first = next(iter(decode_batches(log.read(gap, 1))))
        assert first.base_offset > gap


def test_a_batch_losing_some_records_is_rebuilt_with_the_rest_and_their_largest_timestamp(tmp_path: Path) -> None:
    """Multi-record batches: the cleaner rewrites a batch whose records are partly superseded with the
    survivors only, and the segment learns the survivors' largest timestamp (time retention and
    max-timestamp lookups read it)."""
    with compacted(tmp_path / "t-0") as log:
        first = build_batch([(b"a", b"a1", (), 100), (b"b", b"b1", (), 300), (b"c", b"c1", (), 200)])
        log.append_as_leader(first, 0, now_ms=1000)  # offsets 0-2
        log.append_as_leader(build_batch([(b"a", b"a2", (), 150)]), 0, now_ms=1000)  # 3: supersedes offset 0
        for i in range(4):  # older records after it: the segment's index entries carry the largest so far
            log.append_as_leader(build_batch([(f"o{i}".encode(), b"x" * 60, (), 50)]), 0, now_ms=1000)
        log.roll(now_ms=1000)
        log.append_as_leader(build_batch([(b"z", b"z1", (), 250)]), 0, now_ms=1000)  # 8, in the active segment
        log.high_watermark = log.log_end_offset
        result = LogCleaner().clean(log, now_ms=2000, force=True)
        assert result is not None and result.records_removed == 1
        assert records(log)[:3] == [(1, "b", "b1"), (2, "c", "c1"), (3, "a", "a2")]
        largest = log.offset_for_timestamp(MAX_TIMESTAMP)
        assert (largest.timestamp, largest.offset) == (300, 1)  # the cleaned segment still holds the largest
    with compacted(tmp_path / "t-0") as reopened:  # and from its files
        largest = reopened.offset_for_timestamp(MAX_TIMESTAMP)
        assert (largest.timestamp, largest.offset) == (300, 1)


def test_tombstones_survive_delete_retention_then_go(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0", delete_retention_ms=DAY) as log:
        put(log, "a", "1", ts=1000)
        put(log, "b", "2", ts=1000)
        put(log, "a", None, ts=1000)  # tombstone for a
        for i in range(30):
            put(log, f"filler-{i}", "x" * 50, ts=1000)
        log.high_watermark = log.log_end_offset
        cleaner = LogCleaner()
        cleaner.clean(log, now_ms=2000, force=True)
        kept = records(log)
        assert (2, "a", None) in kept and (1, "b", "2") in kept and all(r[0] != 0 for r in kept)
        assert cleaner.clean(log, now_ms=1000 + DAY) is None  # not dirty, tombstone not yet due
        assert cleaner.clean(log, now_ms=1000 + DAY + 1) is not None  # due: a pass without new dirt
        kept = records(log)
        assert all(key != "a" for _, key, _ in kept)
        assert (1, "b", "2") in kept


def test_min_cleanable_dirty_ratio_and_checkpoint(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0", min_cleanable_dirty_ratio=0.9) as log:
        for i in range(40):
            put(log, f"k{i % 3}", f"v{i}")
        log.high_watermark = log.log_end_offset
        cleaner = LogCleaner()
        first = cleaner.clean(log, now_ms=2000)
        assert first is not None and first.dirty_ratio == 1.0  # never cleaned: all dirty
        # Right after a pass, only segments rolled since are dirty: below the ratio.
        assert cleaner.clean(log, now_ms=2000) is None
        sizes = [s.size_bytes for s in log.segments[:-1]]
        # Forced, it rewrites anyway, merging the segments the first pass left small or empty.
        again = cleaner.clean(log, now_ms=2000, force=True)
        assert again is not None and again.records_removed == 0
        assert len(log.segments) - 1 < len(sizes) and log.size_bytes <= sum(sizes) + log.active_segment.size_bytes


def test_min_compaction_lag_and_high_watermark_bound_the_cleanable_range(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0", min_compaction_lag_ms=10_000) as log:
        for i in range(40):
            put(log, "same", f"v{i}", ts=1000 + i)
        log.high_watermark = log.log_end_offset
        assert LogCleaner().clean(log, now_ms=5000) is None  # every record is younger than the lag
    with compacted(tmp_path / "t-1") as log:
        for i in range(40):
            put(log, "same", f"v{i}")
        log.high_watermark = 0
        assert LogCleaner().clean(log, now_ms=5000) is None  # nothing below the high watermark


def test_the_cleanable_range_includes_its_exact_bounds(tmp_path: Path) -> None:
    """A segment whose records are exactly min_compaction_lag_ms old (Kafka cleans up to
    largestTimestamp <= now - lag) and one ending exactly at the high watermark or at the first
    unstable offset (all its offsets below them) are cleanable."""
    with compacted(tmp_path / "t-0", min_compaction_lag_ms=10_000) as log:
        for i in range(40):
            put(log, "same", f"v{i}", ts=1000)
        log.high_watermark = log.log_end_offset
        assert LogCleaner().clean(log, now_ms=11_001) is not None  # 10,001 ms old: clearly past
    with compacted(tmp_path / "t-1", min_compaction_lag_ms=10_000) as log:
        for i in range(40):
            put(log, "same", f"v{i}", ts=1000)
        log.high_watermark = log.log_end_offset
        assert LogCleaner().clean(log, now_ms=11_000) is not None  # exactly the lag old
    with compacted(tmp_path / "t-2") as log:
        for i in range(40):
            put(log, "same", f"v{i}")
        first_end = log.segments[1].base_offset
        log.high_watermark = first_end  # the first segment ends exactly at the high watermark
        result = LogCleaner().clean(log, now_ms=5000, force=True)
        assert result is not None and result.records_removed > 0
    with compacted(tmp_path / "t-3") as log:
        for i in range(40):
            put(log, "same", f"v{i}")
        log.high_watermark = log.log_end_offset
        log.first_unstable_offset = log.segments[1].base_offset  # an open transaction from there on
        result = LogCleaner().clean(log, now_ms=5000, force=True)
        assert result is not None and result.records_removed > 0


def test_new_dirt_below_the_ratio_waits(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0", min_cleanable_dirty_ratio=0.9) as log:
        for i in range(40):
            put(log, f"k{i}", "v")  # distinct keys: cleaning removes nothing, the log stays large
        log.high_watermark = log.log_end_offset
        cleaner = LogCleaner()
        assert cleaner.clean(log, now_ms=2000) is not None
        for i in range(8):  # a little new dirt: a roll's worth, far below 90% of the log
            put(log, f"n{i}", "v")
        log.high_watermark = log.log_end_offset
        assert cleaner.clean(log, now_ms=2000) is None


def test_a_small_offset_map_cleans_over_several_passes(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0") as log:
        for i in range(80):
            put(log, f"key-{i}", "v")
            put(log, f"key-{i}", "w")
        log.high_watermark = log.log_end_offset
        cleaner = LogCleaner(max_map_entries=10)
        first = cleaner.clean(log, now_ms=2000, force=True)
        second = cleaner.clean(log, now_ms=2000, force=True)
        assert first is not None and second is not None
        assert first.first_dirty_offset < second.first_dirty_offset


def test_cleaned_logs_recover_after_a_crash(tmp_path: Path) -> None:
    live = compacted(tmp_path / "live-0")
    for i in range(60):
        put(live, f"k{i % 5}", f"v{i}")
    live.high_watermark = live.log_end_offset
    LogCleaner().clean(live, now_ms=2000)
    expected = read_all(live)
    shutil.copytree(live.directory, tmp_path / "t-0")
    live.close()
    for name in ("recovery-point-offset-checkpoint",):  # force a full validation
        (tmp_path / "t-0" / name).unlink()
    with compacted(tmp_path / "t-0") as log:
        assert log.last_recovery.first_bad is None
        assert read_all(log) == expected


@pytest.mark.parametrize("stage", ["built", "committed"])
def test_an_interrupted_swap_leaves_a_consistent_log(tmp_path: Path, stage: str) -> None:
    """Crash after building the cleaned segment (scratch only) or after its commit point (.swap files)."""
    live = compacted(tmp_path / "live-0")
    for i in range(60):
        put(live, f"k{i % 5}", f"v{i}")
    live.high_watermark = live.log_end_offset
    before = records(live)
    # Build a cleaned copy of the same log elsewhere, then plant its first segment as an interrupted swap.
    other = compacted(tmp_path / "other-0")
    offset = 0
    while offset < live.log_end_offset:
        batch = live.read(offset, 1)
        other.append_as_follower(batch)
        offset = next(iter(decode_batches(batch))).last_offset + 1
    other.high_watermark = other.log_end_offset
    LogCleaner().clean(other, now_ms=2000)
    cleaned_first = other.segments[0].base_offset
    cleaned_next = other.segments[1].base_offset
    after = records(other)
    shutil.copytree(live.directory, tmp_path / "t-0")
    scratch = tmp_path / "t-0" / CLEANER_SCRATCH_DIR
    scratch.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        name = f"{cleaned_first:020d}{suffix}"
        shutil.copy(other.directory / name, scratch / name)
    live.close()
    other.close()
    if stage == "committed":
        commit_swap(tmp_path / "t-0", scratch, cleaned_first)
    with compacted(tmp_path / "t-0") as log:
        assert not scratch.exists()
        got = records(log)
        if stage == "built":
            assert got == before
        else:
            assert [r for r in got if r[0] < cleaned_next] == [r for r in after if r[0] < cleaned_next]
            assert [r for r in got if r[0] >= cleaned_next] == [r for r in before if r[0] >= cleaned_next]


def test_a_merging_pass_leaves_on_disk_only_the_segments_it_kept(tmp_path: Path) -> None:
    """Segments the cleaner merged into one must go from the directory too: a leftover would overlap
    the merged segment when the log is next opened."""
    with compacted(tmp_path / "t-0", segment_bytes=400) as log:
        for i in range(40):
            put(log, f"u{i}" if i % 2 == 0 else "x", f"v{i}")  # half of them superseded by the last "x"
        log.high_watermark = log.log_end_offset
        before = len(log.segments)
        cleaner = LogCleaner()
        assert cleaner.clean(log, now_ms=2000, force=True) is not None  # halves the segments
        assert cleaner.clean(log, now_ms=2000, force=True) is not None  # and merges the halves
        assert len(log.segments) < before
        kept = records(log)
        bases = [s.base_offset for s in log.segments]
    assert sorted(int(p.name[:20]) for p in (tmp_path / "t-0").glob("*.log")) == bases
    with compacted(tmp_path / "t-0", segment_bytes=400) as reopened:
        assert records(reopened) == kept and [s.base_offset for s in reopened.segments] == bases


def test_completing_a_swap_removes_a_replaced_segment_starting_at_its_last_offset(tmp_path: Path) -> None:
    """Each segment holds a unique key and an "x" the last record supersedes: cleaned, two segments
    merge into one whose last offset is the second one's base. A crash after the swap's commit point
    leaves that second segment for the open to delete, at exactly the swap's last offset."""
    one = len(build_batch([(b"u0", b"v", (), 1000)]))
    config = {"segment_bytes": 2 * one + 10}

    def fill(log: PartitionLog) -> None:
        for i in range(6):
            log.append_as_follower(build_batch([Record(2 * i, 1000, b"u%d" % i, b"v", ())], base_offset=2 * i))
            log.append_as_follower(build_batch([Record(2 * i + 1, 1000, b"x", b"v", ())], base_offset=2 * i + 1))
        log.append_as_follower(build_batch([Record(12, 1000, b"x", b"last", ())], base_offset=12))

    live = compacted(tmp_path / "live-0", **config)
    fill(live)
    other = compacted(tmp_path / "other-0", **config)
    fill(other)
    for log in (live, other):
        log.high_watermark = log.log_end_offset
    assert [s.base_offset for s in live.segments][:3] == [0, 2, 4]
    cleaner = LogCleaner()
    cleaner.clean(other, now_ms=2000, force=True)  # halves the segments (each keeps its unique key)
    cleaner.clean(other, now_ms=2000, force=True)  # and merges the halves
    assert [s.base_offset for s in other.segments][:2] == [0, 4]  # segments 0 and 2 merged: last offset 2
    after = records(other)
    shutil.copytree(live.directory, tmp_path / "t-0")
    scratch = tmp_path / "t-0" / CLEANER_SCRATCH_DIR
    scratch.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(other.directory / f"{0:020d}{suffix}", scratch / f"{0:020d}{suffix}")
    live.close()
    other.close()
    commit_swap(tmp_path / "t-0", scratch, 0)
    with compacted(tmp_path / "t-0", **config) as log:
        assert not (tmp_path / "t-0" / f"{2:020d}.log").exists()
        assert log.last_recovery.first_bad is None  # a leftover segment 2 would overlap: cut, the rest lost
        got = records(log)
        assert [r for r in got if r[0] < 4] == [r for r in after if r[0] < 4]
        assert [r[0] for r in got if r[0] >= 4] == list(range(4, 13))  # the segments not yet cleaned, whole


def test_the_background_cleaner_never_blocks_appends_or_reads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The cleaner's own thread compacts while appends and reads go on: every read is whole batches, the
    thread cleans (fewer records than were written) and logs no error, and the latest value of every key
    survives. Nothing here cleans on the thread's behalf."""
    errors: list[BaseException] = []
    writes = 400
    with compacted(tmp_path / "t-0", min_cleanable_dirty_ratio=0.0) as log:
        cleaner = LogCleaner(backoff_ms=1)
        cleaner.add(log)
        cleaner.start()
        latest: dict[str, str] = {}
        try:
            for i in range(writes):
                key, value = f"k{i % 13}", f"v{i}"
                put(log, key, value)
                latest[key] = value
                log.high_watermark = log.log_end_offset
                if i % 20 == 0:
                    try:
                        for batch in decode_batches(read_all(log)):  # every read is whole, valid batches
                            assert batch.records
                    except BaseException as exc:
                        errors.append(exc)
            wait_until("the cleaner thread compacted the closed segments", lambda: len(records(log)) < writes / 2)
        finally:
            cleaner.stop()
        assert errors == []
        assert [r.getMessage() for r in caplog.records if r.name == "kraftpy.storage.cleaner"] == []
        assert {k: v for _, k, v in records(log)} == latest
        offsets = [r[0] for r in records(log)]
        assert offsets == sorted(offsets)
    with compacted(tmp_path / "t-0") as log:
        assert {k: v for _, k, v in records(log)} == latest


def wait_until(what: str, probe, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting until {what}"
        time.sleep(0.01)


def test_a_delete_policy_log_is_never_compacted(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_bytes=1000) as log:
        for i in range(40):
            put(log, "same", f"v{i}")
        log.high_watermark = log.log_end_offset
        assert LogCleaner().clean(log, now_ms=2000, force=True) is None


def test_concurrent_clean_and_truncation_drops_the_stale_work(tmp_path: Path) -> None:
    with compacted(tmp_path / "t-0") as log:
        for i in range(60):
            put(log, f"k{i % 5}", f"v{i}")
        log.high_watermark = log.log_end_offset
        segments, _, _ = log.cleanable_segments()
        log.truncate_to(segments[1].base_offset)  # the segments the cleaner saw are partly gone
        assert not log.swap_cleaned_segment([s.segment for s in segments[:3]], tmp_path / "nowhere", 0)
        assert records(log)[-1][0] == segments[1].base_offset - 1
