"""storage/scan.py on its own: the header walk's sanity checks, the validating scan's epoch rules,
and both reading a bounded chunk at a time whatever the segment's size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraftpy.storage import scan as scan_module
from kraftpy.storage.scan import CorruptSegmentError, ValidatingScan, iter_file_batches, walk_headers
from tests.unit.storage.test_storage_fixtures import make_batch

MAGIC_AT, LAST_DELTA_AT = 16, 23  # byte positions in a v2 batch header (protocol/records/header.py)


def segment_file(path: Path, batches: list[bytes]) -> int:
    path.write_bytes(b"".join(batches))
    return os.open(path, os.O_RDONLY)


def batches(epochs: list[int], size: int = 2) -> list[bytes]:
    return [make_batch(size, base_offset=size * i, epoch=e, tag=i) for i, e in enumerate(epochs)]


@pytest.mark.parametrize(
    ("at", "value", "what"),
    [(MAGIC_AT, b"\x01", "magic 1"), (LAST_DELTA_AT, (-1).to_bytes(4, "big", signed=True), "delta -1")],
)
def test_the_header_walk_refuses_a_wrong_magic_or_a_negative_last_offset_delta(
    tmp_path: Path, at: int, value: bytes, what: str
) -> None:
    data = batches([0, 0, 0])
    second = bytearray(data[1])
    second[at : at + len(value)] = value  # the walk reads no CRC: its own checks must catch these
    data[1] = bytes(second)
    fd = segment_file(tmp_path / "s.log", data)
    try:
        walked = []
        with pytest.raises(CorruptSegmentError, match=what) as caught:
            for span in walk_headers(fd, 0, sum(map(len, data))):
                walked.append(span.base_offset)
        assert walked == [0] and caught.value.position == len(data[0])
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("epochs", "expect_stop"),
    [
        ([2, 2, 0], "below the previous batch's 2"),  # back to epoch 0 is corruption too
        ([-1, 0, 0], None),  # no epoch, then epoch 0: fine
    ],
)
def test_the_scan_holds_epochs_from_zero_up(tmp_path: Path, epochs: list[int], expect_stop: str | None) -> None:
    data = batches(epochs)
    fd = segment_file(tmp_path / "s.log", data)
    try:
        scan = ValidatingScan(fd, 0, sum(map(len, data)), next_offset=0, max_batch_bytes=1 << 20)
        seen = [header.partition_leader_epoch for _, header, _ in scan]
        if expect_stop is None:
            assert seen == epochs and scan.stopped_at is None and scan.leader_epoch == 0
        else:
            assert expect_stop in scan.reason and scan.stopped_at == len(data[0]) * 2
    finally:
        os.close(fd)


def test_the_scan_checks_epoch_zero_against_the_checkpoint_too(tmp_path: Path) -> None:
    data = batches([0, 0])
    fd = segment_file(tmp_path / "s.log", data)
    try:
        # The checkpoint says epoch 1 started at offset 2: a batch there stamped 0 was damaged.
        scan = ValidatingScan(
            fd, 0, sum(map(len, data)), next_offset=0, max_batch_bytes=1 << 20, epoch_at=lambda o: 0 if o < 2 else 1
        )
        assert [h.base_offset for _, h, _ in scan] == [0]
        assert "differs from the checkpoint's 1" in scan.reason
    finally:
        os.close(fd)


def test_both_readers_read_a_bounded_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded on a segment of any size: no read asks for more than a chunk."""
    data = batches([0] * 200)
    size = sum(map(len, data))
    fd = segment_file(tmp_path / "s.log", data)
    reads: list[int] = []
    real_pread = os.pread
    monkeypatch.setattr(scan_module.os, "pread", lambda f, n, at: reads.append(n) or real_pread(f, n, at))
    try:
        assert len(list(walk_headers(fd, 0, size, chunk_bytes=1024))) == 200
        assert reads and max(reads) <= 1024
        reads.clear()
        assert len(list(iter_file_batches(fd, 0, size, max_batch_bytes=1 << 20, chunk_bytes=2048))) == 200
        assert reads and max(reads) <= 2048
    finally:
        os.close(fd)
