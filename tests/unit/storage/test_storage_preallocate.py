"""Preallocated segments (Kafka's `preallocate`): the active segment's file starts segment_bytes long,
so an append changes no file size; rolls and a clean close trim it; recovery after a crash cuts the
unwritten space without calling it a bad batch, and still finds a torn batch written into it.

A crash is simulated as in test_storage_recovery.py: the directory of a log still open is copied.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from kraftpy.metadata import configs as topic_configs
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.storage import LogConfig, scan
from kraftpy.storage.inspection import LogFileReader
from kraftpy.storage.scan import ValidatingScan, unwritten_from, walk_headers
from kraftpy.storage.verify import Report, verify_partition
from tests.unit.storage.test_storage_fixtures import make_batch, offsets_of, open_log, read_all

SEGMENT_BYTES = 4096
CONFIG = {"segment_bytes": SEGMENT_BYTES, "index_interval_bytes": 150, "preallocate": True}


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def sizes(directory: Path) -> list[int]:
    return [p.stat().st_size for p in log_files(directory)]


def test_the_config_takes_kafkas_name_and_values() -> None:
    assert LogConfig().preallocate is False  # Kafka's default
    assert LogConfig.from_topic_configs({"preallocate": "true"}).preallocate is True
    assert LogConfig.from_topic_configs({"preallocate": False}).preallocate is False
    with pytest.raises(KafkaError) as info:
        LogConfig.from_topic_configs({"preallocate": "yes"})
    assert info.value.code is ErrorCode.INVALID_CONFIG
    # a broker builds a partition's log config from the topic's effective configs (replica_manager.py)
    assert LogConfig.from_topic_configs(topic_configs.effective({"preallocate": True}, {})).preallocate is True
    assert LogConfig.from_topic_configs(topic_configs.effective({}, {})).preallocate is False


def test_an_append_to_a_preallocated_segment_changes_no_file_size(tmp_path: Path) -> None:
    """What the preallocation is for: the fdatasync of an append then commits no journal."""
    log = open_log(tmp_path / "p", **CONFIG)
    path = log_files(log.directory)[0]
    assert path.stat().st_size == SEGMENT_BYTES
    for i in range(5):
        log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
        log.flush()
        assert path.stat().st_size == SEGMENT_BYTES
    assert offsets_of(read_all(log)) == [(2 * i, 2 * i + 1) for i in range(5)]
    # every reader of the live file stops where the batches end
    with path.open("rb") as f:
        assert [s.base_offset for s in walk_headers(f.fileno(), 0, SEGMENT_BYTES)] == [0, 2, 4, 6, 8]
    entries = list(LogFileReader(path))
    assert [e.header.base_offset for e in entries] == [0, 2, 4, 6, 8]
    assert LogFileReader(path).problem is None
    report = Report()
    verify_partition(log.directory, report)
    assert report.problems == [] and report.batches == 5
    log.close()


def test_without_the_config_segments_grow_with_their_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", **{**CONFIG, "preallocate": False})
    log.append_as_leader(make_batch(2, tag=0), 0, now_ms=0)
    assert sizes(log.directory) == [len(make_batch(2, tag=0))]
    log.close()


def test_a_roll_trims_the_old_segment_and_a_close_trims_the_active_one(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", **CONFIG)
    batch = len(make_batch(2, tag=0))
    for i in range(80):  # two rolls at 4 KiB
        log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
    segments = log.segments
    assert len(segments) > 2
    on_disk = sizes(log.directory)
    assert on_disk[:-1] == [s.size_bytes for s in segments[:-1]], "rolled segments are exactly their batches"
    assert on_disk[-1] == SEGMENT_BYTES
    directory = log.directory
    log.close()
    assert sum(sizes(directory)) == 80 * batch, "at rest the files hold nothing but batches"
    with open_log(directory, **CONFIG) as again:
        assert again.last_recovery.first_bad is None and again.last_recovery.truncated_bytes == 0
        assert sizes(directory)[-1] == SEGMENT_BYTES, "the active segment is preallocated again"
        again.append_as_leader(make_batch(2, tag=99), 0, now_ms=0)
        assert offsets_of(read_all(again, 1 << 22))[-2:] == [(158, 159), (160, 161)]


@pytest.mark.parametrize("preallocate", [True, False])
def test_a_roll_makes_the_old_segments_trim_durable_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preallocate: bool
) -> None:
    """A flush skips a segment it has flushed to the end, and a segment below the recovery point
    is not validated on open: the roll fsyncs the trimmed file itself (nothing else here fsyncs).
    A segment that was not preallocated has nothing to trim, and its roll syncs nothing."""
    log = open_log(tmp_path / "p", **{**CONFIG, "preallocate": preallocate})
    first = log_files(log.directory)[0]
    synced: list[str] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    while len(log.segments) == 1:
        log.append_as_leader(make_batch(2, tag=len(synced)), 0, now_ms=0)
    assert synced == ([str(first)] if preallocate else [])
    assert first.stat().st_size == log.segments[0].size_bytes
    log.close()


def test_recovery_cuts_the_unwritten_space_and_keeps_every_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "live", **CONFIG)
    for i in range(12):
        log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
        if i == 3:
            log.flush()
            log.write_checkpoints()
    crashed = Path(shutil.copytree(log.directory, tmp_path / "crashed"))
    log.close()
    assert sizes(crashed)[-1] == SEGMENT_BYTES
    with open_log(crashed, **CONFIG) as recovered:
        outcome = recovered.last_recovery
        assert outcome.first_bad is None, "space nothing was written to is not a bad batch"
        assert outcome.truncated_bytes == 0
        assert recovered.log_end_offset == 24
        assert [b for b, _ in offsets_of(read_all(recovered))] == list(range(0, 24, 2))
        recovered.append_as_leader(make_batch(2, tag=50), 0, now_ms=0)
        assert recovered.log_end_offset == 26


def three_batches_crashed(tmp_path: Path, config: dict[str, object]) -> tuple[Path, int]:
    """A log of three batches copied while open (a crash); (the copy, where its batches end)."""
    log = open_log(tmp_path / "live", **config)
    for i in range(3):
        log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
    end = log.segments[-1].size_bytes
    crashed = Path(shutil.copytree(log.directory, tmp_path / "crashed"))
    log.close()
    return crashed, end


def test_a_torn_batch_in_the_preallocated_space_is_still_a_bad_batch(tmp_path: Path) -> None:
    crashed, end = three_batches_crashed(tmp_path, CONFIG)
    torn = make_batch(2, tag=3)[:30]
    with log_files(crashed)[-1].open("r+b") as f:
        f.seek(end)
        f.write(torn)
    with open_log(crashed, **CONFIG) as recovered:
        assert recovered.last_recovery.first_bad is not None
        assert recovered.last_recovery.first_bad[1] == end
        assert recovered.log_end_offset == 6


def test_zeros_after_the_batches_of_a_log_that_does_not_preallocate_are_a_lost_write(tmp_path: Path) -> None:
    config = {**CONFIG, "preallocate": False}
    crashed, end = three_batches_crashed(tmp_path, config)
    os.truncate(log_files(crashed)[-1], end + 500)
    with open_log(crashed, **config) as recovered:
        assert recovered.last_recovery.first_bad == (0, end, "nothing but zeros from here to the end of the file")
        assert recovered.last_recovery.truncated_bytes == 500
        assert recovered.log_end_offset == 6


def test_a_truncated_active_segment_stays_preallocated(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", **CONFIG)
    for i in range(5):
        log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
    log.truncate_to(4)
    assert log.log_end_offset == 4 and sizes(log.directory) == [SEGMENT_BYTES]
    log.append_as_leader(make_batch(2, tag=9), 1, now_ms=0)
    assert offsets_of(read_all(log)) == [(0, 1), (2, 3), (4, 5)]
    log.close()


def test_unwritten_from_skips_holes_and_reads_data(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with path.open("wb") as f:
        f.write(b"batch" + bytes(100))
        f.truncate(1 << 20)  # a hole after the written block
    with path.open("r+b") as f:
        fd = f.fileno()
        assert not unwritten_from(fd, 0, 1 << 20)
        assert unwritten_from(fd, 5, 1 << 20)
        assert unwritten_from(fd, 5, 1 << 30), "past the end of the file counts as unwritten"
        f.seek((1 << 20) - 1)
        f.write(b"\x01")  # one byte at the very end
        f.flush()
        assert not unwritten_from(fd, 5, 1 << 20)
        assert unwritten_from(fd, 5, (1 << 20) - 1)
        assert unwritten_from(fd, 5, 1 << 19), "the next data lies past the range"


def test_a_scan_reports_where_the_unwritten_space_begins(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = make_batch(2, tag=0) + make_batch(2, tag=1, base_offset=2)
    path.write_bytes(data + bytes(300))
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = ValidatingScan(fd, 0, len(data) + 300, next_offset=0, max_batch_bytes=1 << 20)
        assert [pos for pos, _h, _v in scan] == [0, len(make_batch(2, tag=0))]
        assert scan.stopped_at is None and scan.unwritten_at == len(data)
        whole = ValidatingScan(fd, 0, len(data), next_offset=0, max_batch_bytes=1 << 20)
        assert len(list(whole)) == 2 and whole.unwritten_at is None
    finally:
        os.close(fd)


def test_a_full_disk_in_preallocated_space_leaves_memory_and_disk_agreeing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse preallocation takes its blocks as writes land, so a write into it can still find
    the disk full: the segment is cut back to its batches, as an append's is."""
    log = open_log(tmp_path / "p", **CONFIG)
    log.append_as_leader(make_batch(2, tag=0), 0, now_ms=0)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(os, "pwritev", full)
        with pytest.raises(KafkaError):
            log.append_as_leader(make_batch(2, tag=1), 0, now_ms=0)
    assert sizes(log.directory) == [log.segments[-1].size_bytes] == [len(make_batch(2, tag=0))]
    log.close()


@pytest.mark.parametrize("reader", ["walk", "scan"])
def test_a_reader_of_a_live_segment_sees_a_batch_appended_as_it_met_the_unwritten_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """`kraftpy log dump` of a running node's metadata log (found by the first-hour CLI test): the
    walk read zeros where the log appended a batch a moment later. It reads the header again."""
    log = open_log(tmp_path / "p", **CONFIG)
    log.append_as_leader(make_batch(2, tag=0), 0, now_ms=0)
    path = log_files(log.directory)[0]
    real = scan.unwritten_from
    raced: list[int] = []

    def appending_meanwhile(fd: int, position: int, end: int) -> bool:
        if not raced:
            raced.append(position)
            log.append_as_leader(make_batch(2, tag=1), 0, now_ms=0)
        return real(fd, position, end)

    monkeypatch.setattr(scan, "unwritten_from", appending_meanwhile)
    if reader == "walk":
        with path.open("rb") as f:
            bases = [span.base_offset for span in walk_headers(f.fileno(), 0, SEGMENT_BYTES)]
    else:
        dump = LogFileReader(path)
        bases = [entry.header.base_offset for entry in dump]
        assert dump.problem is None
    assert raced == [len(make_batch(2, tag=0))] and bases == [0, 2]
    log.close()
