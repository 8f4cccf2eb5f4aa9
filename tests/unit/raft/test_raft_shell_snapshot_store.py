"""The LMDB snapshot store: chunked installs, only complete snapshots visible, pruning, reads at any position."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.shell import snapshot_store
from kraftpy.raft.shell.snapshot_store import SnapshotStore, SnapshotStoreError


def _install(store: SnapshotStore, snapshot_id: OffsetAndEpoch, payload: bytes, chunk: int) -> None:
    for pos in range(0, len(payload), chunk):
        store.write_chunk(snapshot_id, pos, payload[pos : pos + chunk])
    if not payload:
        store.write_chunk(snapshot_id, 0, b"")
    store.install_pending(snapshot_id)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.binary(min_size=0, max_size=3000),
    chunk=st.integers(1, 700),
    reads=st.lists(st.tuples(st.integers(0, 3100), st.integers(0, 900)), max_size=10),
)
def test_chunked_install_reads_back_at_any_position(tmp_path: Path, payload: bytes, chunk: int, reads) -> None:
    path = tmp_path / f"s{random.getrandbits(64)}"
    store = SnapshotStore(path)
    sid = OffsetAndEpoch(10, 2)
    _install(store, sid, payload, chunk)
    assert store.size(sid) == len(payload)
    assert store.read_all(sid) == payload
    for position, max_bytes in reads:
        if position <= len(payload):
            assert store.read(sid, position, max_bytes) == payload[position : position + max_bytes]
        else:
            with pytest.raises(ValueError, match=f"position {position} outside snapshot .* of {len(payload)} bytes"):
                store.read(sid, position, max_bytes)
    store.close()


def test_a_pending_snapshot_is_invisible_until_installed(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    old = OffsetAndEpoch(5, 1)
    store.create(old, b"old image")
    new = OffsetAndEpoch(50, 3)
    store.write_chunk(new, 0, b"half of ")
    assert store.latest() == old
    assert store.size(new) is None
    store.write_chunk(new, 8, b"the new image")
    store.install_pending(new)
    assert store.latest() == new
    assert store.read_all(new) == b"half of the new image"
    store.close()


def test_position_zero_restarts_and_gaps_are_refused(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = OffsetAndEpoch(9, 2)
    store.write_chunk(sid, 0, b"abandoned")
    store.write_chunk(sid, 0, b"fresh")  # a fetch interrupted by a role change starts over
    with pytest.raises(SnapshotStoreError):
        store.write_chunk(sid, 99, b"gap")
    with pytest.raises(SnapshotStoreError):
        store.write_chunk(OffsetAndEpoch(10, 2), 5, b"another id")
    store.write_chunk(sid, 5, b" start")
    store.install_pending(sid)
    assert store.read_all(sid) == b"fresh start"
    store.close()


def test_only_the_latest_two_are_kept(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    ids = [OffsetAndEpoch(10 * i, i) for i in range(1, 6)]
    for sid in ids:
        store.create(sid, f"image {sid.offset}".encode() * 100)
    assert store.ids() == ids[-2:]
    store.close()
    reopened = SnapshotStore(tmp_path)
    assert reopened.ids() == ids[-2:]
    assert reopened.latest() == ids[-1]
    assert reopened.read_all(ids[-2]) == b"image 40" * 100
    reopened.close()


def test_large_snapshots_are_split_into_chunks(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    payload = bytes(random.Random(1).getrandbits(8) for _ in range(snapshot_store.CHUNK_BYTES // 64)) * 160
    sid = OffsetAndEpoch(1000, 7)
    store.create(sid, payload)
    assert store.read_all(sid) == payload
    edge = snapshot_store.CHUNK_BYTES - 3
    assert store.read(sid, edge, 10) == payload[edge : edge + 10]  # across a chunk boundary
    store.close()


def test_pending_chunks_do_not_survive_a_restart(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write_chunk(OffsetAndEpoch(3, 1), 0, b"partial")
    store.close()
    reopened = SnapshotStore(tmp_path)
    assert reopened.latest() is None
    with pytest.raises(SnapshotStoreError):
        reopened.install_pending(OffsetAndEpoch(3, 1))
    reopened.close()


def test_damaged_data_fails_the_crc(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    sid = OffsetAndEpoch(4, 1)
    store.create(sid, b"the image")
    with store._env.begin(write=True) as txn:  # flip a byte of the stored chunk
        txn.put(snapshot_store._chunk_key(sid, 0), b"the imagE", db=store._chunks)
    with pytest.raises(SnapshotStoreError, match="CRC"):
        store.read_all(sid)
    store.close()


@pytest.mark.parametrize("damage", ["data_pages", "meta_pages"])
def test_a_damaged_store_is_refused_at_open_naming_its_directory(tmp_path: Path, damage: str) -> None:
    """Issue 11 §9: a damaged store surfaced as a raw lmdb.CorruptedError; now one readable error
    (KAFKA_STORAGE_ERROR) naming the directory and what to do, on the real LMDB file."""
    path = tmp_path / snapshot_store.DIR_NAME
    store = SnapshotStore(path)
    store.create(OffsetAndEpoch(5, 1), b"image" * 100)
    store.close()
    data = path / "data.mdb"
    raw = bytearray(data.read_bytes())
    rng = random.Random(11)
    if damage == "data_pages":  # every page after the two meta pages becomes garbage
        raw[8192:] = rng.randbytes(len(raw) - 8192)
    else:
        raw[:8192] = bytes(8192)
    data.write_bytes(bytes(raw))
    with pytest.raises(SnapshotStoreError) as info:
        SnapshotStore(path)
    message = str(info.value)
    assert str(path) in message and "damaged" in message and "move that directory aside" in message
