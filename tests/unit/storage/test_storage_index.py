"""Offset and time indexes: lookups, truncation, file round trips and sanity checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftpy.storage.offset_index import IndexCorruptError, OffsetIndex
from kraftpy.storage.time_index import TimeIndex


def offset_index(tmp_path: Path) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    for offset, position in [(110, 4100), (125, 8300), (140, 12500)]:
        index.append(offset, position)
    return index


def test_lookup_finds_the_last_entry_at_or_below() -> None:
    index = OffsetIndex(Path("unused"), 100)
    assert index.lookup(150) == (100, 0)
    index.append(110, 4100)
    index.append(125, 8300)
    assert [index.lookup(o) for o in (100, 109, 110, 124, 125, 999)] == [
        (100, 0),
        (100, 0),
        (110, 4100),
        (110, 4100),
        (125, 8300),
        (125, 8300),
    ]
    assert index.lookup_position(8299) == (110, 4100)
    assert index.lookup_position(8300) == (125, 8300)


def test_entries_must_increase() -> None:
    index = OffsetIndex(Path("unused"), 0)
    index.append(10, 100)
    with pytest.raises(ValueError, match=r"index entry \(10, 200\) does not follow .*offset=10, position=100"):
        index.append(10, 200)
    with pytest.raises(ValueError, match=r"index entry \(11, 100\) does not follow .*offset=10, position=100"):
        index.append(11, 100)


def test_file_round_trip_and_truncation(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.write_pending()
    index.fsync()
    assert index.path.read_bytes()[:8] == (10).to_bytes(4, "big") + (4100).to_bytes(4, "big")
    loaded = OffsetIndex.load(index.path, 100, log_size=20000)
    assert loaded.entries() == index.entries()
    loaded.truncate_to_position(8300)
    loaded.append(130, 9000)
    loaded.write_pending()
    assert OffsetIndex.load(index.path, 100, log_size=20000).entries() == [(110, 4100), (130, 9000)]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda data: data[:-3],  # not a multiple of 8
        lambda data: data[8:16] + data[:8],  # out of order
    ],
)
def test_load_rejects_corrupt_files(tmp_path: Path, mangle) -> None:
    index = offset_index(tmp_path)
    index.write_pending()
    index.path.write_bytes(mangle(index.path.read_bytes()))
    with pytest.raises(IndexCorruptError):
        OffsetIndex.load(index.path, 100, log_size=20000)


def test_load_rejects_positions_past_the_log(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.write_pending()
    with pytest.raises(IndexCorruptError):
        OffsetIndex.load(index.path, 100, log_size=12000)


def test_time_index_keeps_only_growing_timestamps_and_looks_up_strictly_below(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0)
    assert index.maybe_append(1000, 0)
    assert not index.maybe_append(1000, 5)
    assert not index.maybe_append(900, 6)
    assert index.maybe_append(2000, 10)
    assert index.lookup(1000) is None
    assert index.lookup(1001) == (1000, 0)
    assert index.lookup(5000) == (2000, 10)
    index.write_pending()
    assert TimeIndex.load(index.path, 0, max_offset=100).entries() == [(1000, 0), (2000, 10)]
    index.truncate_to_offset(10)
    index.write_pending()
    assert TimeIndex.load(index.path, 0, max_offset=100).entries() == [(1000, 0)]
