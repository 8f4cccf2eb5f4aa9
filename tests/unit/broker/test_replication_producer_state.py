"""Idempotent producer state: duplicates, gaps, epochs, unknown producers, wrap-around, snapshots, rebuild."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.broker.replication import ProducerStateManager
from kraftpy.broker.replication.producer_state import BatchMetadata, in_sequence
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import BatchHeader, parse_header
from kraftpy.protocol.validate import INT32_MAX

PID = 42


def header(seq: int, count: int = 1, epoch: int = 0, pid: int = PID, base_offset: int = 0, ts: int = 1_000):
    records = [(None, b"v", (), ts)] * count
    data = build_batch(records, base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return parse_header(data)


def state_with(*headers: BatchHeader) -> ProducerStateManager:
    manager = ProducerStateManager()
    offset = 0
    for h in headers:
        manager.update(h, offset, offset + h.last_offset_delta)
        offset += h.last_offset_delta + 1
    return manager


def test_non_idempotent_batches_are_always_appended() -> None:
    assert ProducerStateManager().check_append(header(-1, pid=-1, epoch=-1)).should_append


def test_a_new_producer_starts_at_sequence_zero() -> None:
    assert ProducerStateManager().check_append(header(0)).should_append


def test_an_unknown_producer_with_a_later_sequence_is_unknown_producer_id() -> None:
    check = ProducerStateManager().check_append(header(7))
    assert check.error == ErrorCode.UNKNOWN_PRODUCER_ID and "retention" in check.message


def test_the_next_sequence_is_appended_and_a_gap_is_out_of_order() -> None:
    manager = state_with(header(0, count=3))
    assert manager.check_append(header(3)).should_append
    assert manager.check_append(header(4)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_retry_of_one_of_the_last_five_batches_gets_its_original_offsets() -> None:
    manager = state_with(*(header(i * 2, count=2) for i in range(6)))  # seqs 0..11 at offsets 0..11
    check = manager.check_append(header(4, count=2))
    assert check.error == ErrorCode.NONE and not check.should_append
    assert check.duplicate == BatchMetadata(4, 5, 4, 5, 1_000)
    # The first batch (seq 0-1) is no longer remembered: an old retry, answered without offsets.
    assert manager.check_append(header(0, count=2)).error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    # A retry overlapping the last batch but not equal to it is out of order.
    assert manager.check_append(header(11, count=2)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_batch_sharing_only_its_first_or_last_sequence_with_a_remembered_one_is_not_its_duplicate() -> None:
    # Java's producer splits a batch that was too large and resends the halves from the same first
    # sequence: a half is not the whole, and answering it as a duplicate would lose its records.
    manager = state_with(header(0, count=4), header(4, count=2))  # seqs 0-3, then 4-5
    assert manager.check_append(header(0, count=4)).duplicate is not None
    for first, count in ((0, 2), (2, 2), (4, 1), (5, 1)):
        check = manager.check_append(header(first, count=count))
        assert check.duplicate is None, f"seqs {first}-{first + count - 1} answered as a duplicate"


def test_a_control_batch_never_moves_a_producers_last_timestamp_back() -> None:
    manager = state_with(header(0, ts=5_000))
    manager.update(
        parse_header(
            build_batch([(None, b"m", (), 1_000)], producer_id=PID, producer_epoch=0, base_sequence=-1, is_control=True)
        ),
        1,
        1,
    )
    assert manager.entry(PID).last_timestamp == 5_000


def test_an_older_epoch_is_fenced_and_a_new_epoch_restarts_at_zero() -> None:
    manager = state_with(header(0, epoch=3), header(1, epoch=3))
    assert manager.check_append(header(2, epoch=2)).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert manager.check_append(header(2, epoch=4)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert manager.check_append(header(0, epoch=4)).should_append
    manager.update(header(0, epoch=4), 2, 2)
    entry = manager.entry(PID)
    assert entry.producer_epoch == 4 and [b.first_seq for b in entry.batches] == [0]
    # The old epoch's batches are no longer duplicates.
    assert manager.check_append(header(1, epoch=3)).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequences_wrap_from_int32_max_to_zero() -> None:
    assert in_sequence(INT32_MAX, 0) and not in_sequence(INT32_MAX, 1)
    manager = state_with(header(0))
    manager.producers[PID].batches[-1] = BatchMetadata(INT32_MAX - 2, INT32_MAX, 0, 2, 1_000)
    assert manager.check_append(header(0, count=2)).should_append
    # A batch spanning the wrap has its last sequence wrapped too.
    spanning = header(INT32_MAX - 1, count=3)
    assert spanning.last_sequence == 0
    manager2 = state_with(header(0))
    manager2.producers[PID].batches[-1] = BatchMetadata(INT32_MAX - 4, INT32_MAX - 2, 0, 2, 1_000)
    assert manager2.check_append(spanning).should_append
    manager2.update(spanning, 3, 5)
    assert manager2.check_append(header(1)).should_append
    assert manager2.check_append(spanning).duplicate == BatchMetadata(INT32_MAX - 1, 0, 3, 5, 1_000)


def test_an_idempotent_batch_without_a_sequence_is_invalid() -> None:
    bad = parse_header(build_batch([(None, b"v", (), 1)], producer_id=PID, producer_epoch=0, base_sequence=-1))
    assert ProducerStateManager().check_append(bad).error == ErrorCode.INVALID_RECORD


def test_retention_evicts_producers_whose_batches_are_gone_and_expiry_forgets_idle_ones() -> None:
    manager = state_with(header(0, pid=1, ts=100), header(0, pid=2, ts=5_000))
    assert manager.evict_unretained(1) == [1]
    assert manager.check_append(header(1, pid=1)).error == ErrorCode.UNKNOWN_PRODUCER_ID
    manager.producer_id_expiration_ms = 1_000
    assert manager.remove_expired(5_999) == [] and manager.remove_expired(6_000) == [2]


def test_a_snapshot_round_trips_and_a_damaged_one_is_rejected() -> None:
    manager = state_with(header(0, count=2), header(2), header(0, pid=9, epoch=3))
    data = manager.snapshot()
    restored = ProducerStateManager.from_snapshot(data)
    assert restored.map_end_offset == manager.map_end_offset == 4
    assert restored.producers == manager.producers
    outer = cbor2.loads(data)
    outer["payload"] = outer["payload"][:-1] + bytes([outer["payload"][-1] ^ 1])
    with pytest.raises(KafkaError, match="CRC") as info:
        ProducerStateManager.from_snapshot(cbor2.dumps(outer))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError, match="malformed"):
        ProducerStateManager.from_snapshot(b"\x00garbage")


def test_rebuild_refuses_a_snapshot_beyond_the_end() -> None:
    snapshot = state_with(header(0), header(1)).snapshot()
    with pytest.raises(ValueError, match="beyond"):
        ProducerStateManager.rebuild(snapshot, [], end_offset=1)


@st.composite
def logs(draw):
    """A log of idempotent batches from a few producers, with epoch bumps, as a leader would accept them."""
    next_seq: dict[int, int] = {}
    epochs: dict[int, int] = {}
    headers, offset = [], 0
    for _ in range(draw(st.integers(1, 25))):
        pid = draw(st.sampled_from([1, 2, 3]))
        if draw(st.integers(0, 9)) == 0:
            epochs[pid] = epochs.get(pid, 0) + 1
            next_seq[pid] = 0
        count = draw(st.integers(1, 3))
        seq = next_seq.get(pid, 0)
        h = header(seq, count=count, epoch=epochs.get(pid, 0), pid=pid, base_offset=offset)
        next_seq[pid] = seq + count
        headers.append(h)
        offset += count
    return headers


@settings(max_examples=60, deadline=None)
@given(log=logs(), data=st.data())
def test_rebuilding_from_any_snapshot_equals_the_state_built_incrementally(log, data) -> None:
    incremental = ProducerStateManager()
    snapshots = {0: None}
    for h in log:
        incremental.update(h)
        snapshots[h.next_offset] = incremental.snapshot()
    end = log[-1].next_offset
    cut = data.draw(st.sampled_from(sorted(snapshots)))
    rebuilt = ProducerStateManager.rebuild(snapshots[cut], log, end)
    assert rebuilt.producers == incremental.producers
    assert rebuilt.map_end_offset == end
    # And truncation: rebuilding up to an earlier batch boundary equals the state at that point.
    target = data.draw(st.sampled_from(sorted(snapshots)))
    base = data.draw(st.sampled_from([k for k in sorted(snapshots) if k <= target]))
    expected = ProducerStateManager.rebuild(None, log, target)
    assert ProducerStateManager.rebuild(snapshots[base], log, target).producers == expected.producers
