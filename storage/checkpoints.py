"""Checkpoint files: small text files of integers, replaced atomically and checksummed.

Design notes: docs/on-disk-format.md, section "storage/checkpoints.py".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import crc32c as _crc32c

from kraftpy.storage.errors import CorruptCheckpointError
from kraftpy.storage.files import atomic_write

VERSION = 0
_CRC_PREFIX = "# crc32c "
# A checkpoint holds a handful of entries; anything near this size is garbage.
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024


def encode_checkpoint(entries: Sequence[Sequence[int]]) -> bytes:
    lines = [str(VERSION), str(len(entries))]
    lines.extend(" ".join(str(int(v)) for v in entry) for entry in entries)
    body = ("\n".join(lines) + "\n").encode("ascii")
    return body + f"{_CRC_PREFIX}{_crc32c.crc32c(body):08x}\n".encode("ascii")


def decode_checkpoint(data: bytes, arity: int, *, source: str = "checkpoint") -> list[tuple[int, ...]]:
    """Parse and verify checkpoint bytes; raises CorruptCheckpointError naming what is wrong."""

    def bad(reason: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{source} is corrupt: {reason}", path=source)

    crc_at = data.rfind(_CRC_PREFIX.encode("ascii"))
    if crc_at < 0 or (crc_at > 0 and data[crc_at - 1 : crc_at] != b"\n"):
        raise bad("no checksum line")
    body, trailer = data[:crc_at], data[crc_at + len(_CRC_PREFIX) :]
    try:
        stored = int(trailer.decode("ascii").strip(), 16)
    except (UnicodeDecodeError, ValueError):
        raise bad("checksum line is not hex") from None
    if trailer != f"{stored:08x}\n".encode("ascii"):
        # Only the canonical spelling (8 lowercase hex digits, one newline): "56423eaC" parses to the
        # same number, but a changed byte must never go unnoticed.
        raise bad("checksum line is malformed")
    actual = _crc32c.crc32c(body)
    if actual != stored:
        raise bad(f"checksum is {actual:08x}, file says {stored:08x}")
    try:
        lines = body.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise bad("not ASCII") from None
    if lines[-1] != "":
        raise bad("last line is not terminated")
    lines.pop()
    if len(lines) < 2:
        raise bad("missing version or entry count")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise bad("version or entry count is not a number") from None
    if version != VERSION:
        raise bad(f"version {version}, expected {VERSION}")
    if count != len(lines) - 2:
        raise bad(f"says {count} entries, holds {len(lines) - 2}")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        if len(parts) != arity:
            raise bad(f"line {number} has {len(parts)} fields, expected {arity}")
        try:
            entries.append(tuple(int(p) for p in parts))
        except ValueError:
            raise bad(f"line {number} is not integers") from None
    return entries


def write_checkpoint(path: Path, entries: Sequence[Sequence[int]]) -> None:
    """Atomically replace `path` (temp file, fsync, rename, fsync of the directory)."""
    atomic_write(path, encode_checkpoint(entries))


def read_checkpoint(path: Path, arity: int) -> list[tuple[int, ...]] | None:
    """The entries of `path`, None when the file does not exist; raises CorruptCheckpointError."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CorruptCheckpointError(f"{path} is corrupt: larger than {MAX_CHECKPOINT_BYTES} bytes", path=str(path))
    return decode_checkpoint(data, arity, source=str(path))


class OffsetCheckpoint:
    """A checkpoint holding one offset (recovery point, log start offset, high watermark)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last_written: int | None = None

    def read(self) -> int | None:
        """The stored offset; None when the file is missing. Raises CorruptCheckpointError."""
        entries = read_checkpoint(self.path, 1)
        if entries is None:
            return None
        if len(entries) != 1 or entries[0][0] < 0:
            raise CorruptCheckpointError(f"{self.path} is corrupt: expected one offset >= 0, got {entries}")
        self._last_written = entries[0][0]
        return entries[0][0]

    def write(self, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        if offset == self._last_written:
            return  # an fsync saved: the file already says this
        write_checkpoint(self.path, [(offset,)])
        self._last_written = offset
