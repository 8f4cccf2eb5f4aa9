"""Shared helpers for the storage tests (batches built by the project's codec, logs in tmp dirs).

The helpers are imported by the other test_storage_* modules; the tests here
check the helpers themselves, so a broken helper fails loudly in one place.
"""

from __future__ import annotations

from pathlib import Path

from kraftpy.protocol.records.batch import build_batch, decode_batches
from kraftpy.protocol.records.header import parse_header
from kraftpy.storage import LogConfig, PartitionLog


def make_batch(
    n: int = 1,
    *,
    value_size: int = 20,
    key: bytes | None = b"k",
    ts: int = 1_000,
    base_offset: int = 0,
    epoch: int = -1,
    tag: int = 0,
    compression: int = 0,
) -> bytes:
    """A batch of `n` records; `tag` goes into each value so batches are told apart."""
    value = f"{tag}:".encode().ljust(value_size, b"x")
    records = [(key, value, (), ts + i) for i in range(n)]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch, compression=compression)


def open_log(directory: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    """(base, last) offset of each batch in `data`, decoding everything (CRC included)."""
    return [(b.base_offset, b.last_offset) for b in decode_batches(data)]


def read_all(log: PartitionLog, max_bytes: int = 1 << 20) -> bytes:
    """Every batch from the log start to the end, via read()."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, max_bytes)
        if not chunk:
            break
        out.append(chunk)
        *_, last = decode_batches(chunk)
        offset = last.last_offset + 1
    return b"".join(out)


def test_make_batch_is_a_valid_batch_with_n_records() -> None:
    data = make_batch(3, ts=5, tag=7)
    header = parse_header(data, check_crc=True)
    assert (header.records_count, header.last_offset_delta, header.max_timestamp) == (3, 2, 7)
    assert [r.value[:2] for r in next(decode_batches(data)).records] == [b"7:"] * 3


def test_read_all_returns_every_appended_batch(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", segment_bytes=1024) as log:
        for i in range(30):
            log.append_as_leader(make_batch(2, tag=i), 0, now_ms=0)
        assert offsets_of(read_all(log, max_bytes=300)) == [(2 * i, 2 * i + 1) for i in range(30)]
