"""The aborted-transactions index (.txnindex): Kafka's file layout, the log's use of it, recovery and rebuild."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kraftpy.broker.shell.producer_snapshots import rebuild_producer_state
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch
from kraftpy.storage import LogConfig, PartitionLog
from kraftpy.storage.txn_index import AbortedTxn, TxnIndex, TxnIndexCorruptError, decode_entries, encode_entries


def test_entries_are_kafkas_34_byte_layout_and_round_trip(tmp_path: Path) -> None:
    entry = AbortedTxn(producer_id=5, first_offset=10, last_offset=20, last_stable_offset=21)
    raw = encode_entries([entry])
    assert raw == struct.pack(">hqqqq", 0, 5, 10, 20, 21) and len(raw) == 34
    index = TxnIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(entry)
    index.append(AbortedTxn(6, 15, 30, 31))
    assert TxnIndex(index.path).entries == [entry, AbortedTxn(6, 15, 30, 31)]
    with pytest.raises(ValueError):
        index.append(AbortedTxn(7, 1, 25, 26))  # markers are indexed in log order
    index.truncate_to(30)
    assert TxnIndex(index.path).entries == [entry]
    index.truncate_to(0)
    assert not index.path.exists()


@pytest.mark.parametrize(
    "damage", [b"\x00" * 33, struct.pack(">hqqqq", 1, 5, 10, 20, 21), struct.pack(">hqqqq", 0, 5, 9, 3, 4)]
)
def test_a_torn_or_unknown_file_is_corrupt(damage: bytes) -> None:
    with pytest.raises(TxnIndexCorruptError):
        decode_entries(damage)


def test_collect_is_kafkas_collect_aborted_txns() -> None:
    index = TxnIndex(Path("/nonexistent"))
    index._entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 8, 9), AbortedTxn(3, 10, 12, 20)]
    assert index.collect(6, 10) == ([AbortedTxn(2, 3, 8, 9)], True)
    # No entry's LSO reaches 30: a later segment may still hold an abort overlapping the range.
    assert index.collect(6, 30) == ([AbortedTxn(2, 3, 8, 9), AbortedTxn(3, 10, 12, 20)], False)
    # An entry whose LSO reaches the upper bound ends the search: nothing later can overlap.
    assert index.collect(0, 9) == ([AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 8, 9)], True)


def txn(pid: int, seq: int) -> bytes:
    return build_batch([(None, b"t" * 50)], producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def abort(pid: int) -> bytes:
    return build_marker_batch(pid, 0, TxnMarker(False, 0), timestamp_ms=1_000)


def small_log(directory: Path) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(segment_bytes=300, retention_ms=-1))


def test_the_log_indexes_aborts_per_segment_and_collects_across_segments(tmp_path: Path) -> None:
    plog = small_log(tmp_path / "t-0")
    for data in (txn(1, 0), txn(1, 1), txn(1, 2), txn(2, 0)):
        plog.append_as_leader(data, 0, now_ms=0)
    plog.append_as_leader(abort(1), 0, now_ms=0)  # offset 4, a later segment than the data at 0
    plog.append_aborted_txn(AbortedTxn(1, 0, 4, 3))
    assert len(plog.segments) > 1
    marker_segment = plog.segments[-1].base_offset
    assert (tmp_path / "t-0" / f"{marker_segment:020d}.txnindex").stat().st_size == 34
    # A fetch of the first batches learns of the abort whose marker is segments later.
    assert plog.collect_aborted_txns(0, 2) == [AbortedTxn(1, 0, 4, 3)]
    assert plog.collect_aborted_txns(5, 6) == []
    plog.truncate_to(4)
    assert plog.collect_aborted_txns(0, 4) == []
    plog.close()


def test_retention_deletes_a_segments_txnindex_with_it(tmp_path: Path) -> None:
    plog = small_log(tmp_path / "t-0")
    plog.append_as_leader(txn(1, 0), 0, now_ms=0)
    plog.append_as_leader(abort(1), 0, now_ms=0)
    plog.append_aborted_txn(AbortedTxn(1, 0, 1, 2))
    first = plog.segments[0].base_offset
    for seq in range(1, 8):
        plog.append_as_leader(txn(2, seq - 1), 0, now_ms=0)
    path = tmp_path / "t-0" / f"{first:020d}.txnindex"
    assert path.exists()
    plog.high_watermark = plog.log_end_offset
    plog.increment_log_start_offset(plog.segments[1].base_offset)
    assert plog.delete_retention_segments(now_ms=0) >= 1
    assert not path.exists()
    plog.close()


def test_recovery_drops_entries_past_the_recovered_end_and_the_replay_writes_them_back(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = small_log(directory)
    plog.append_as_leader(txn(1, 0), 0, now_ms=0)
    plog.append_as_leader(abort(1), 0, now_ms=0)
    plog.append_aborted_txn(AbortedTxn(1, 0, 1, 2))
    # An abort indexed for a marker that never reached the disk (the log is cut back below).
    plog.append_as_leader(txn(2, 0), 0, now_ms=0)
    plog.append_aborted_txn(AbortedTxn(2, 2, 2, 3))
    plog.close()
    log_file = sorted(directory.glob("*.log"))[-1]
    with open(log_file, "r+b") as f:
        f.truncate(f.seek(0, 2) - len(txn(2, 0)))
    (directory / "recovery-point-offset-checkpoint").unlink()
    plog = small_log(directory)
    assert plog.log_end_offset == 2
    assert plog.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    # A lost .txnindex comes back from the producer-state replay (no snapshot: the whole log).
    for path in directory.glob("*.txnindex"):
        path.unlink()
    plog = _reopen(plog, directory)
    assert plog.collect_aborted_txns(0, 10) == []
    state = rebuild_producer_state(plog, plog.log_end_offset, batches_to_retain=5, producer_id_expiration_ms=10**9)
    assert state.ongoing_txns() == {}
    assert plog.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    # A corrupt one too.
    for path in directory.glob("*.txnindex"):
        path.write_bytes(b"\x01" * 20)
    plog = _reopen(plog, directory)
    rebuild_producer_state(plog, plog.log_end_offset, batches_to_retain=5, producer_id_expiration_ms=10**9)
    assert plog.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    plog.close()


def _reopen(plog: PartitionLog, directory: Path) -> PartitionLog:
    plog.close()
    return small_log(directory)


# -- compaction and transactions ---------------------------------------------------------------------------


def keyed_txn(pid: int, seq: int, key: str, value: str, ts: int = 1_000) -> bytes:
    return build_batch(
        [(key.encode(), value.encode(), (), ts)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


def end_txn(pid: int, committed: bool, ts: int = 1_000) -> bytes:
    return build_marker_batch(pid, 0, TxnMarker(committed, 0), timestamp_ms=ts)


def compacted_with_txns(directory: Path) -> PartitionLog:
    from kraftpy.storage.cleaner import LogCleaner  # noqa: F401 (the module under test, imported by the tests)

    plog = PartitionLog.open(
        directory,
        LogConfig(cleanup_policy="compact", segment_bytes=400, index_interval_bytes=100, delete_retention_ms=10_000),
    )
    plog.append_as_leader(keyed_txn(1, 0, "k", "committed"), 0, now_ms=0)  # 0
    plog.append_as_leader(end_txn(1, True), 0, now_ms=0)  # 1
    plog.append_as_leader(keyed_txn(2, 0, "k", "aborted"), 0, now_ms=0)  # 2: must never supersede offset 0
    plog.append_as_leader(keyed_txn(2, 1, "j", "aborted"), 0, now_ms=0)  # 3
    plog.append_as_leader(end_txn(2, False), 0, now_ms=0)  # 4
    plog.append_aborted_txn(AbortedTxn(2, 2, 4, 5))
    for i in range(8):  # later plain records roll segments, so the above is cleanable
        plog.append_as_leader(build_batch([(f"x{i}".encode(), b"v" * 40, (), 1_000)]), 0, now_ms=0)
    plog.high_watermark = plog.log_end_offset
    return plog


def values(plog: PartitionLog) -> list[tuple[int, bytes | None, bool]]:
    from kraftpy.protocol.records.batch import decode_batches
    from kraftpy.protocol.records.header import iter_batches

    data = plog.read(plog.log_start_offset, 1 << 20)
    out = [(h.base_offset, None, True) for _, h in iter_batches(data, check_crc=False) if h.is_control]
    out += [(r.offset, r.value, False) for b in decode_batches(data) if not b.is_control for r in b.records]
    return sorted(out)


def test_the_cleaner_removes_aborted_data_and_keeps_markers_until_their_time(tmp_path: Path) -> None:
    from kraftpy.storage.cleaner import LogCleaner

    plog = compacted_with_txns(tmp_path / "t-0")
    result = LogCleaner().clean(plog, now_ms=2_000, force=True)
    assert result is not None and result.aborted_batches_removed == 2
    kept = values(plog)
    assert (0, b"committed", False) in kept  # the aborted "k" did not supersede it
    assert not any(v == b"aborted" for _, v, _ in kept)
    assert [o for o, _, control in kept if control] == [1, 4]  # both markers stay within delete_retention_ms
    assert plog.collect_aborted_txns(0, plog.log_end_offset) == [AbortedTxn(2, 2, 4, 5)]
    # Past delete_retention_ms the abort marker goes (its data is gone) and its index entry with it; the
    # commit marker stays: its transaction's record is still there.
    result = LogCleaner().clean(plog, now_ms=1_000_000, force=True)
    assert result is not None and result.markers_removed == 1
    assert [o for o, _, control in values(plog) if control] == [1]
    assert plog.collect_aborted_txns(0, plog.log_end_offset) == []
    plog.close()


def test_the_cleaner_stops_at_an_undecided_transaction(tmp_path: Path) -> None:
    from kraftpy.storage.cleaner import LogCleaner

    plog = compacted_with_txns(tmp_path / "t-0")
    plog.first_unstable_offset = 0  # the broker says a transaction is open from offset 0
    assert LogCleaner().clean(plog, now_ms=2_000, force=True) is None
    assert any(v == b"aborted" for _, v, _ in values(plog))
    plog.close()


def test_a_producers_next_transaction_after_an_abort_is_kept(tmp_path: Path) -> None:
    """Once the abort marker passes, the producer's later data belongs to a new transaction: the
    cleaner stops treating it as aborted. A flipped test on the marker kept the producer "aborted"
    and removed its next, committed transaction: acknowledged records gone."""
    from kraftpy.storage.cleaner import LogCleaner

    plog = PartitionLog.open(
        tmp_path / "t-0",
        LogConfig(cleanup_policy="compact", segment_bytes=400, index_interval_bytes=100, delete_retention_ms=10_000),
    )
    plog.append_as_leader(keyed_txn(2, 0, "k", "aborted"), 0, now_ms=0)  # 0
    plog.append_as_leader(end_txn(2, False), 0, now_ms=0)  # 1
    plog.append_aborted_txn(AbortedTxn(2, 0, 1, 2))
    plog.append_as_leader(keyed_txn(2, 1, "m", "next-committed"), 0, now_ms=0)  # 2
    plog.append_as_leader(end_txn(2, True), 0, now_ms=0)  # 3
    for i in range(8):  # later plain records roll segments, so the above is cleanable
        plog.append_as_leader(build_batch([(f"x{i}".encode(), b"v" * 40, (), 1_000)]), 0, now_ms=0)
    plog.high_watermark = plog.log_end_offset
    result = LogCleaner().clean(plog, now_ms=2_000, force=True)
    assert result is not None and result.aborted_batches_removed == 1
    kept = values(plog)
    assert (2, b"next-committed", False) in kept and not any(v == b"aborted" for _, v, _ in kept)
    plog.close()


def test_an_abort_must_follow_the_last_one_in_its_segments_index(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(1, 0, 5, 6))
    for repeated in (AbortedTxn(2, 3, 5, 6), AbortedTxn(2, 3, 4, 6)):  # the same marker offset, or an earlier one
        with pytest.raises(ValueError, match="does not follow"):
            index.append(repeated)
    index.append(AbortedTxn(2, 3, 6, 7))
    assert [e.producer_id for e in index.entries] == [1, 2]
