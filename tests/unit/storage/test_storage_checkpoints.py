"""Checkpoint files and the leader-epoch cache: atomic writes, validation, Kafka's epoch semantics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.storage import CorruptCheckpointError, LeaderEpochCache
from kraftpy.storage.checkpoints import (
    OffsetCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

ENTRIES = [(0, 0), (3, 150), (7, 9000)]


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, ENTRIES)
    assert read_checkpoint(path, 2) == ENTRIES
    assert path.read_text().startswith("0\n3\n0 0\n3 150\n7 9000\n# crc32c ")
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


def test_an_empty_checkpoint_round_trips(tmp_path: Path) -> None:
    """An epoch cache cleared by a full truncation writes no entries: the file is the version, a
    count of 0 and its checksum, and must read back as empty, not as corrupt."""
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, [])
    assert path.read_text().startswith("0\n0\n# crc32c ")
    assert read_checkpoint(path, 2) == []
    assert LeaderEpochCache.load(path, lambda: 0).entries == []


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "nope", 1) is None
    assert OffsetCheckpoint(tmp_path / "nope").read() is None


def test_a_leftover_temp_file_does_not_affect_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpoint(path).write(42)
    (tmp_path / "recovery-point-offset-checkpoint.tmp").write_bytes(b"0\n1\n99")  # a crash mid-write
    assert OffsetCheckpoint(path).read() == 42


@settings(max_examples=200)
@given(data=st.data())
def test_any_single_byte_change_is_detected(data: st.DataObject) -> None:
    encoded = bytearray(encode_checkpoint(ENTRIES))
    i = data.draw(st.integers(0, len(encoded) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != encoded[i]))
    encoded[i] = new
    with pytest.raises(CorruptCheckpointError):
        decode_checkpoint(bytes(encoded), 2)


@settings(max_examples=100)
@given(cut=st.integers(0, 60))
def test_a_truncated_file_is_detected(cut: int) -> None:
    encoded = encode_checkpoint(ENTRIES)
    with pytest.raises(CorruptCheckpointError):
        decode_checkpoint(encoded[: min(cut, len(encoded) - 1)], 2)


def test_offset_checkpoint_rejects_wrong_shapes(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    write_checkpoint(path, [(1,), (2,)])
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpoint(path).read()


# -- leader-epoch cache ------------------------------------------------------------------


def cache(tmp_path: Path, entries=(), leo: int = 100) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", lambda: leo, entries)


def test_assign_is_persisted_and_ignores_the_current_epoch(tmp_path: Path) -> None:
    c = cache(tmp_path)
    assert c.assign(1, 0)
    assert not c.assign(1, 10)  # epoch 1 already starts earlier
    assert c.assign(2, 10)
    assert LeaderEpochCache.load(c.path, lambda: 0).entries == [(1, 0), (2, 10)]
    assert c.latest_epoch == 2


def test_assign_drops_entries_that_would_break_monotonicity(tmp_path: Path) -> None:
    c = cache(tmp_path, [(1, 0), (2, 10), (4, 20)])
    c.assign(3, 15)  # entries with epoch >= 3 or start >= 15 go
    assert c.entries == [(1, 0), (2, 10), (3, 15)]


def test_assign_replaces_an_older_epoch_starting_at_the_same_offset(tmp_path: Path) -> None:
    """Epoch 1 began at 5 but wrote nothing before epoch 2 took over there: two epochs cannot
    start at one offset, so the older entry goes (Kafka's startOffset >= newStartOffset)."""
    c = cache(tmp_path, [(0, 0), (1, 5)])
    assert c.assign(2, 5)
    assert c.entries == [(0, 0), (2, 5)]
    assert LeaderEpochCache.load(c.path, lambda: 0).entries == [(0, 0), (2, 5)]


def test_assigning_the_latest_epoch_at_its_own_start_changes_nothing(tmp_path: Path) -> None:
    c = cache(tmp_path, [(0, 0), (1, 5)])
    assert not c.assign(1, 5) and not c.assign(1, 9)
    assert c.assign(1, 3)  # the latest epoch moved earlier (a truncated log refilled): replaced
    assert c.entries == [(0, 0), (1, 3)]


@pytest.mark.parametrize(("epoch", "start"), [(-1, 5), (3, -1), (-1, -1)])
def test_assign_refuses_a_negative_epoch_or_offset(tmp_path: Path, epoch: int, start: int) -> None:
    c = cache(tmp_path, [(0, 0)])
    with pytest.raises(ValueError, match="must be >= 0"):
        c.assign(epoch, start)
    assert c.entries == [(0, 0)]


@pytest.mark.parametrize(
    "requested,expected",
    [
        (-1, (-1, -1)),  # undefined
        (4, (4, 100)),  # the latest epoch ends at the log end offset
        (2, (2, 20)),  # a known older epoch ends where the next starts
        (3, (2, 20)),  # unknown in-between epoch: the largest below it
        (0, (0, 10)),  # below every entry: requested epoch, start of the first
        (5, (-1, -1)),  # above the latest
    ],
)
def test_end_offset_for_answers_as_kafka(tmp_path: Path, requested: int, expected: tuple[int, int]) -> None:
    c = cache(tmp_path, [(1, 10), (2, 15), (4, 20)], leo=100)
    assert c.end_offset_for(requested) == expected


def test_end_offset_for_an_empty_cache_is_unknown(tmp_path: Path) -> None:
    assert cache(tmp_path).end_offset_for(0) == (-1, -1)


def test_truncate_from_end_and_from_start(tmp_path: Path) -> None:
    c = cache(tmp_path, [(1, 0), (2, 10), (3, 20)])
    assert c.truncate_from_end(20)
    assert c.entries == [(1, 0), (2, 10)]
    assert c.truncate_from_start(15)  # epoch 2 was in force at 15: it now starts there
    assert c.entries == [(2, 15)]
    assert not c.truncate_from_start(15)
    assert LeaderEpochCache.load(c.path, lambda: 0).entries == [(2, 15)]


def test_truncate_from_start_at_an_epochs_start_or_inside_the_first_epoch(tmp_path: Path) -> None:
    c = cache(tmp_path, [(1, 0), (2, 10), (3, 20)])
    assert c.truncate_from_start(10)  # exactly where epoch 2 starts: it stays as it is, epoch 1 goes
    assert c.entries == [(2, 10), (3, 20)]
    assert c.truncate_from_start(12)  # inside the first remaining epoch: it now starts there
    assert c.entries == [(2, 12), (3, 20)]
    assert not c.truncate_from_start(5)  # below every entry: nothing to forget
    assert not c.truncate_from_end(21) and c.entries == [(2, 12), (3, 20)]  # nothing starts at 21 or later


def test_epoch_for_offset(tmp_path: Path) -> None:
    c = cache(tmp_path, [(1, 10), (3, 20)])
    assert [c.epoch_for_offset(o) for o in (5, 10, 19, 20, 500)] == [-1, 1, 1, 3, 3]


@pytest.mark.parametrize(
    "entries",
    [
        [(2, 10), (1, 20)],  # epochs going down
        [(1, 10), (1, 20)],  # an epoch twice
        [(1, 10), (2, 10)],  # two epochs starting at one offset
        [(1, 20), (2, 10)],  # starts going down
        [(-1, 0)],  # a negative epoch
        [(0, -5)],  # a negative start
    ],
)
def test_non_monotonic_checkpoint_is_corrupt(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, entries)
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache.load(path, lambda: 0)
