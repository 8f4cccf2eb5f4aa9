"""A segment's aborted-transactions index: Kafka's `.txnindex` file.

One file per segment, `<base_offset:020d>.txnindex`, holding one 34-byte entry per transaction
aborted by a marker in that segment: version int16 (0), producer_id int64, first_offset int64,
last_offset int64 (the marker's offset), last_stable_offset int64 (the LSO once the abort was
written), big-endian, as Kafka's TransactionIndex/AbortedTxn. Entries are appended in marker order
and fsynced as they are written (aborts are rare, and a read_committed reader must never miss one).
Docs: docs/on-disk-format.md, ".txnindex".
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.errors import LogStorageError
from kraftpy.storage.files import remove_if_exists

ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size  # 34
ENTRY_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexCorruptError(LogStorageError):
    pass


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(ENTRY_VERSION, *e) for e in entries)


def decode_entries(data: bytes, path: Path | str = "<txnindex>") -> list[AbortedTxn]:
    """The entries of a .txnindex file's bytes; TxnIndexCorruptError for a torn or unknown entry."""
    if len(data) % ENTRY_BYTES:
        raise TxnIndexCorruptError(f"{path}: {len(data)} bytes is not a whole number of {ENTRY_BYTES}-byte entries")
    out = []
    for pos in range(0, len(data), ENTRY_BYTES):
        version, *fields = ENTRY.unpack_from(data, pos)
        if version != ENTRY_VERSION:
            raise TxnIndexCorruptError(f"{path}: entry at {pos} has version {version}")
        entry = AbortedTxn(*fields)
        if entry.first_offset > entry.last_offset:
            raise TxnIndexCorruptError(f"{path}: entry at {pos} ends before it starts: {entry}")
        out.append(entry)
    return out


class TxnIndex:
    """The aborted transactions whose markers are in one segment; loaded lazily, kept in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = decode_entries(data, self.path)
        return self._entries

    def entries_or_none(self) -> list[AbortedTxn] | None:
        """The entries, or None when the file does not load (the caller rewrites it)."""
        try:
            return self.entries
        except TxnIndexCorruptError:
            return None

    def append(self, entry: AbortedTxn) -> None:
        """Add an abort (its marker is the newest in the segment) and make it durable."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"aborted transaction {entry} does not follow {entries[-1]} in {self.path}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode_entries([entry]))
            os.fdatasync(fd)
        finally:
            os.close(fd)
        entries.append(entry)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace the file's entries (truncation, recovery), atomically and durably."""
        if not entries:
            remove_if_exists(self.path)
            self._entries = []
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode_entries(entries))
            f.flush()
            os.fdatasync(f.fileno())
        os.replace(tmp, self.path)
        self._entries = list(entries)

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or past `offset` (the log was cut there)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.rewrite(kept)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborts overlapping [fetch_offset, upper_bound_offset), and whether the search may stop here.

        As Kafka's TransactionIndex.collectAbortedTxns: once an entry's last_stable_offset reaches the
        upper bound, no later segment can hold an abort of a transaction that started below it.
        """
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                found.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def delete(self) -> None:
        remove_if_exists(self.path)
        self._entries = []
