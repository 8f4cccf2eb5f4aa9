"""Finding a flipped byte below the recovery point: the read check, the full scan, the cut that repairs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import decode_batches
from kraftpy.storage.integrity import Pacer, check_read, find_corruption
from tests.unit.storage.test_storage_fixtures import make_batch, offsets_of, open_log, read_all

BATCH_RECORDS = 4


def filled_log(directory: Path, batches: int = 40, **config: object):
    log = open_log(directory, segment_bytes=2048, **config)
    for i in range(batches):
        log.append_as_leader(make_batch(BATCH_RECORDS, tag=i), i // 10, now_ms=0)
    log.flush()
    return log


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))
        f.flush()
        os.fsync(f.fileno())


def batch_position(directory: Path, base_offset: int) -> tuple[Path, int, int]:
    """(segment file, position, size) of the batch starting at `base_offset`."""
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        for batch in decode_batches(data):
            size = batch.header.size
            if batch.base_offset == base_offset:
                return path, pos, size
            pos += size
    raise AssertionError(f"no batch at {base_offset}")


def test_a_sound_log_has_no_corruption(tmp_path: Path) -> None:
    with filled_log(tmp_path / "t-0") as log:
        assert len(log.segments) > 2
        assert find_corruption(log) is None


@pytest.mark.parametrize("where", ["payload", "crc", "base_offset", "length", "leader_epoch"])
def test_a_flipped_byte_anywhere_in_a_batch_is_found_with_its_file_and_position(tmp_path: Path, where: str) -> None:
    log = filled_log(tmp_path / "t-0")
    victim = 21 * BATCH_RECORDS
    path, pos, size = batch_position(log.directory, victim)
    field_at = {"payload": size - 3, "crc": 17, "base_offset": 4, "length": 10, "leader_epoch": 14}[where]
    flip(path, pos + field_at)
    found = find_corruption(log)
    assert found is not None, where
    assert (found.path, found.position, found.offset) == (path, pos, victim), found
    log.close()


def test_the_cut_at_a_corrupt_batch_keeps_everything_before_it(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    victim = 25 * BATCH_RECORDS
    path, pos, size = batch_position(log.directory, victim)
    flip(path, pos + size - 1)
    found = find_corruption(log)
    assert found is not None
    assert log.truncate_at_position(found.segment_base_offset, found.position)
    assert log.log_end_offset == victim
    assert offsets_of(read_all(log))[-1] == (victim - BATCH_RECORDS, victim - 1)
    assert find_corruption(log) is None
    # It takes appends again, from the cut.
    log.append_as_leader(make_batch(1), 9, now_ms=0)
    assert log.log_end_offset == victim + 1
    log.close()


def test_a_corrupt_first_batch_of_a_later_segment_drops_that_segment(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    second = log.segments[1].base_offset
    path, pos, size = batch_position(log.directory, second)
    assert pos == 0
    flip(path, size - 1)
    found = find_corruption(log)
    assert found is not None and found.position == 0 and found.segment_base_offset == second
    assert log.truncate_at_position(second, 0)
    assert log.log_end_offset == second
    assert [s.base_offset for s in log.segments] == [0]
    log.close()


def test_check_read_refuses_a_bad_crc_and_offsets_that_go_back() -> None:
    a, b = make_batch(2, base_offset=10), make_batch(2, base_offset=12)
    check_read(a + b, 10, max_batch_bytes=1 << 20)
    with pytest.raises(CorruptRecordError, match="below the fetch offset"):
        check_read(a, 12, max_batch_bytes=1 << 20)
    with pytest.raises(CorruptRecordError, match="below the expected"):
        check_read(a + a, 10, max_batch_bytes=1 << 20)
    bad = bytearray(b)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC32C") as info:
        check_read(a + bytes(bad), 10, max_batch_bytes=1 << 20)
    assert info.value.position == len(a)


def test_check_read_passes_one_record_batches_and_refuses_insane_headers() -> None:
    """Every fetch is checked on the way out. Batches of one record (lastOffsetDelta 0) are the most
    common there is; magic and batchLength lie outside the CRC, so only these checks catch them."""
    ones = b"".join(make_batch(1, base_offset=o) for o in range(5, 9))
    check_read(ones, 5, max_batch_bytes=1 << 20)
    # A fetch inside a batch gets the whole batch: its last offset may be the fetch offset itself.
    check_read(make_batch(2, base_offset=10), 11, max_batch_bytes=1 << 20)
    size = len(make_batch(1))
    check_read(ones, 5, max_batch_bytes=size)  # a batch of exactly the maximum size
    with pytest.raises(CorruptRecordError, match="insane"):
        check_read(ones, 5, max_batch_bytes=size - 1)
    wrong_magic = bytearray(ones)
    wrong_magic[size + 16] = 1  # the second batch's magic byte
    with pytest.raises(CorruptRecordError, match="magic 1") as info:
        check_read(bytes(wrong_magic), 5, max_batch_bytes=1 << 20)
    assert info.value.position == size
    longer = bytearray(ones)
    longer[size + 8 : size + 12] = (len(ones)).to_bytes(4, "big")  # batchLength past the end of the read
    with pytest.raises(CorruptRecordError, match="insane"):
        check_read(bytes(longer), 5, max_batch_bytes=1 << 20)
    with pytest.raises(CorruptRecordError, match="cut off"):
        check_read(ones + ones[:20], 5, max_batch_bytes=1 << 20)


def test_a_pacer_needs_a_positive_rate() -> None:
    for rate in (0, -1):
        with pytest.raises(ValueError, match="must be positive"):
            Pacer(rate)


def test_the_pacer_sleeps_to_keep_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    pace = Pacer(1000, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        pace(500)
    assert now[0] == pytest.approx(5.0)
    assert all(s == pytest.approx(0.5) for s in slept)


def test_a_corrupt_batch_in_the_first_segment_is_cut_there_too(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "t-0")
    assert len(log.segments) > 1
    victim = 2 * BATCH_RECORDS  # the third batch: in the first segment
    path, pos, size = batch_position(log.directory, victim)
    assert path.name == f"{0:020d}.log" and pos > 0
    flip(path, pos + size - 1)
    found = find_corruption(log)
    assert found is not None and found.segment_base_offset == 0
    assert log.truncate_at_position(0, found.position)
    assert log.log_end_offset == victim and [s.base_offset for s in log.segments] == [0]
    assert not log.truncate_at_position(12345, 0)  # no segment starts there: nothing changes
    assert log.log_end_offset == victim
    log.close()
