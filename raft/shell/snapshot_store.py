"""Raft snapshots in LMDB (`snapshots.lmdb`): complete snapshots by (end_offset, epoch), chunked.

Design notes: docs/raft.md, section "raft/shell/snapshot_store.py".
"""

from __future__ import annotations

import struct
from pathlib import Path

import cbor2
import crc32c
import lmdb

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.log import OffsetAndEpoch

DIR_NAME = "snapshots.lmdb"
CHUNK_BYTES = 1024 * 1024  # how a locally created snapshot is split (fetched ones keep the leader's chunks)
DEFAULT_MAP_SIZE = 4 << 30  # address space, not disk: LMDB's file grows as pages are used

_ID = struct.Struct(">qq")
_CHUNK = struct.Struct(">qqq")


class SnapshotStoreError(KafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


def open_failure(path: Path, exc: BaseException) -> str:
    """What went wrong opening the store at `path`, and what the operator can do (one line)."""
    if isinstance(exc, lmdb.DiskError | lmdb.MapFullError):
        return f"no space left for the Raft snapshot store {path} ({exc}): free space on its device, then start again"
    return (
        f"the Raft snapshot store {path} is damaged ({type(exc).__name__}: {exc}): move that directory aside "
        "and start the node again; the metadata is then replayed from the Raft log (a log that no longer "
        "starts at offset 0 needs the snapshot, and the next start says so)"
    )


def _id_key(snapshot_id: OffsetAndEpoch) -> bytes:
    return _ID.pack(snapshot_id.offset, snapshot_id.epoch)


def _chunk_key(snapshot_id: OffsetAndEpoch, position: int) -> bytes:
    return _CHUNK.pack(snapshot_id.offset, snapshot_id.epoch, position)


class SnapshotStore:
    def __init__(self, path: Path, *, keep: int = 2, map_size: int = DEFAULT_MAP_SIZE) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.path = Path(path)
        self.keep = keep
        self.path.mkdir(parents=True, exist_ok=True)
        self._sizes: dict[OffsetAndEpoch, int] = {}
        self._pending_id: OffsetAndEpoch | None = None
        self._pending_size = 0
        self._pending_crc = 0
        self._env = None
        try:
            self._env = lmdb.open(str(self.path), map_size=map_size, max_dbs=4, sync=False, metasync=False)
            self._complete = self._env.open_db(b"complete")
            self._chunks = self._env.open_db(b"chunks")
            self._pending = self._env.open_db(b"pending")
            with self._env.begin(write=True) as txn:
                txn.drop(self._pending, delete=False)  # a fetch interrupted by a crash starts over
                for key, value in txn.cursor(db=self._complete):
                    offset, epoch = _ID.unpack(key)
                    self._sizes[OffsetAndEpoch(offset, epoch)] = int(cbor2.loads(value)["size"])
            self._env.sync(True)
        except (lmdb.Error, struct.error, ValueError, KeyError, TypeError, cbor2.CBORDecodeError) as exc:
            if self._env is not None:
                self._env.close()
            raise SnapshotStoreError(open_failure(self.path, exc)) from exc
        self._latest = max(self._sizes) if self._sizes else None

    # ---- reads ------------------------------------------------------------------------------

    def latest(self) -> OffsetAndEpoch | None:
        return self._latest

    def ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._sizes)

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        return self._sizes.get(snapshot_id)

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` from byte `position` of a complete snapshot."""
        size = self._sizes.get(snapshot_id)
        if size is None:
            raise KeyError(f"no complete snapshot {snapshot_id}")
        if not 0 <= position <= size:
            raise ValueError(f"position {position} outside snapshot {snapshot_id} of {size} bytes")
        end = min(size, position + max(0, max_bytes))
        return self._read_range(self._chunks, snapshot_id, position, end)

    def read_all(self, snapshot_id: OffsetAndEpoch) -> bytes:
        """The whole snapshot, checked against the CRC stored when it became complete."""
        with self._env.begin() as txn:
            row = txn.get(_id_key(snapshot_id), db=self._complete)
        if row is None:
            raise KeyError(f"no complete snapshot {snapshot_id}")
        meta = cbor2.loads(row)
        data = self._read_range(self._chunks, snapshot_id, 0, int(meta["size"]))
        if crc32c.crc32c(data) != meta["crc32c"]:
            raise SnapshotStoreError(
                f"snapshot {tuple(snapshot_id)} in {self.path} fails its CRC check; the store is damaged"
            )
        return data

    def _read_range(self, db: object, snapshot_id: OffsetAndEpoch, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        out = bytearray()
        with self._env.begin(db=db) as txn:
            cursor = txn.cursor()
            found = cursor.set_range(_chunk_key(snapshot_id, start))
            exact = found and self._chunk_pos(cursor.key(), snapshot_id) == start
            # otherwise the chunk holding `start` begins before it: step back one key
            if not exact and not (cursor.prev() if found else cursor.last()):
                raise SnapshotStoreError(f"snapshot {tuple(snapshot_id)} has no chunk at {start}")
            pos = self._chunk_pos(cursor.key(), snapshot_id)
            if pos is None or pos > start:
                raise SnapshotStoreError(f"snapshot {tuple(snapshot_id)} has no chunk at {start}")
            while pos is not None and pos < end:
                value = cursor.value()
                lo, hi = max(start - pos, 0), min(len(value), end - pos)
                out += value[lo:hi]
                if not cursor.next():
                    break
                nxt = self._chunk_pos(cursor.key(), snapshot_id)
                if nxt is not None and nxt != pos + len(value):
                    raise SnapshotStoreError(f"snapshot {tuple(snapshot_id)}: gap after byte {pos + len(value)}")
                pos = nxt
        if len(out) != end - start:
            raise SnapshotStoreError(f"snapshot {tuple(snapshot_id)}: read {len(out)} of {end - start} bytes")
        return bytes(out)

    @staticmethod
    def _chunk_pos(key: bytes, snapshot_id: OffsetAndEpoch) -> int | None:
        if len(key) != _CHUNK.size:
            return None
        offset, epoch, position = _CHUNK.unpack(key)
        return position if (offset, epoch) == tuple(snapshot_id) else None

    # ---- writes -----------------------------------------------------------------------------

    def create(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        """Store a complete snapshot (the state machine's image), durably, then prune old ones."""
        if snapshot_id in self._sizes:
            return  # the same id always holds the same committed image
        with self._env.begin(write=True) as txn:
            self._delete_chunks(txn, self._chunks, snapshot_id)
            view = memoryview(payload)
            for pos in range(0, len(payload), CHUNK_BYTES):
                txn.put(_chunk_key(snapshot_id, pos), view[pos : pos + CHUNK_BYTES], db=self._chunks)
            meta = {"size": len(payload), "crc32c": crc32c.crc32c(payload)}
            txn.put(_id_key(snapshot_id), cbor2.dumps(meta), db=self._complete)
            self._prune(txn, snapshot_id)
        self._env.sync(True)
        self._after_complete(snapshot_id, len(payload))

    def write_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None:
        """A chunk of a snapshot being fetched; position 0 (re)starts it, chunks must be contiguous."""
        with self._env.begin(write=True) as txn:
            if position == 0:
                txn.drop(self._pending, delete=False)
                self._pending_id, self._pending_size, self._pending_crc = snapshot_id, 0, 0
            elif snapshot_id != self._pending_id or position != self._pending_size:
                raise SnapshotStoreError(
                    f"snapshot chunk {tuple(snapshot_id)} at {position}, but the pending snapshot is "
                    f"{self._pending_id} with {self._pending_size} bytes"
                )
            if data:
                txn.put(_chunk_key(snapshot_id, position), data, db=self._pending)
        self._pending_size += len(data)
        self._pending_crc = crc32c.crc32c(data, self._pending_crc)

    def install_pending(self, snapshot_id: OffsetAndEpoch) -> None:
        """Make the fetched snapshot complete and durable (moves its chunks, one transaction)."""
        if snapshot_id != self._pending_id:
            raise SnapshotStoreError(f"install of snapshot {tuple(snapshot_id)} that was never written")
        with self._env.begin(write=True) as txn:
            self._delete_chunks(txn, self._chunks, snapshot_id)
            cursor = txn.cursor(db=self._pending)
            for key, value in cursor:
                txn.put(key, value, db=self._chunks)
            txn.drop(self._pending, delete=False)
            meta = {"size": self._pending_size, "crc32c": self._pending_crc}
            txn.put(_id_key(snapshot_id), cbor2.dumps(meta), db=self._complete)
            self._prune(txn, snapshot_id)
        self._env.sync(True)
        self._after_complete(snapshot_id, self._pending_size)
        self._pending_id, self._pending_size, self._pending_crc = None, 0, 0

    def _after_complete(self, snapshot_id: OffsetAndEpoch, size: int) -> None:
        self._sizes[snapshot_id] = size
        for old in sorted(self._sizes)[: -self.keep]:
            del self._sizes[old]
        self._latest = max(self._sizes)

    def _prune(self, txn: lmdb.Transaction, newest: OffsetAndEpoch) -> None:
        ids = sorted({*self._sizes, newest})
        for old in ids[: -self.keep]:
            txn.delete(_id_key(old), db=self._complete)
            self._delete_chunks(txn, self._chunks, old)

    def _delete_chunks(self, txn: lmdb.Transaction, db: object, snapshot_id: OffsetAndEpoch) -> None:
        cursor = txn.cursor(db=db)
        if not cursor.set_range(_chunk_key(snapshot_id, 0)):
            return
        while self._chunk_pos(cursor.key(), snapshot_id) is not None:
            if not cursor.delete():
                break

    def close(self) -> None:
        self._env.close()
