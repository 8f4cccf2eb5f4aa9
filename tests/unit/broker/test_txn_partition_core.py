"""The partition side of transactions, as cores: producer state, markers, the LSO, read_committed bounds."""

from __future__ import annotations

import cbor2
import pytest

from kraftpy.broker.replication import (
    CompleteProduce,
    FetchPartition,
    FetchPartitionResponse,
    IndexAbortedTxn,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ProducerStateManager,
    ReplicationConfig,
)
from kraftpy.broker.replication.model import READ_COMMITTED
from kraftpy.broker.replication.producer_state import CompletedTxn
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch, read_marker
from kraftpy.protocol.records.header import BatchHeader, crc32c, parse_header

EPOCH = 1


def txn(pid: int, seq: int, n: int = 1, epoch: int = 0, offset: int = 0) -> bytes:
    return build_batch(
        [(None, b"v", (), 1_000)] * n,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def plain(offset: int = 0) -> bytes:
    return build_batch([(None, b"p", (), 1_000)], base_offset=offset)


def marker_header(pid: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> BatchHeader:
    return parse_header(build_marker_batch(pid, epoch, TxnMarker(committed, coordinator_epoch), timestamp_ms=1_000))


def at(data: bytes, offset: int) -> BatchHeader:
    return parse_header(data)._replace(base_offset=offset)


# -- control records ---------------------------------------------------------------------------------------


def test_a_marker_is_kafkas_control_record_layout() -> None:
    data = build_marker_batch(9, 3, TxnMarker(True, 7), timestamp_ms=5)
    header = parse_header(data)
    assert header.is_control and header.is_transactional and header.compression == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 3, -1)
    # key: version 0, type 1 (COMMIT); value: version 0, coordinator epoch 7 (Kafka's EndTransactionMarker)
    assert b"\x00\x00\x00\x01" in data and b"\x00\x00\x00\x00\x00\x07" in data
    assert read_marker(data, header) == TxnMarker(True, 7)
    abort = build_marker_batch(9, 3, TxnMarker(False, 2), timestamp_ms=5)
    assert read_marker(abort, parse_header(abort)) == TxnMarker(False, 2)


# -- producer state ----------------------------------------------------------------------------------------


def test_producer_state_tracks_an_open_transaction_until_its_marker() -> None:
    state = ProducerStateManager()
    assert state.update(at(txn(1, 0, 2), 0)) is None
    assert state.update(at(txn(1, 2), 5)) is None
    assert state.entry(1).current_txn_first_offset == 0
    assert state.ongoing_txns() == {1: 0}
    assert state.last_stable_offset(high_watermark=10) == 0
    done = state.update(marker_header(1, committed=False, coordinator_epoch=4), 8, 8, TxnMarker(False, 4))
    assert done == CompletedTxn(1, 0, 8, aborted=True)
    assert state.entry(1).current_txn_first_offset == -1 and state.entry(1).coordinator_epoch == 4
    # Until the HW passes the marker it may still be truncated away: the LSO stays at the transaction.
    assert state.last_stable_offset(high_watermark=8) == 0
    state.on_high_watermark(8)  # the HW at the marker: not below it yet
    assert state.last_stable_offset(high_watermark=8) == 0
    state.on_high_watermark(9)
    assert state.last_stable_offset(high_watermark=9) == 9


def test_a_batch_reusing_an_ended_transactions_sequences_is_out_of_order_not_a_duplicate() -> None:
    """Seed 2301: librdkafka purged a sent message on abort and gave its sequence to the next one.

    Answered as a duplicate, the next transaction's record was acknowledged at the aborted one's
    offset and committed without ever being written. A retry never crosses a marker."""
    state = ProducerStateManager()
    state.update(at(txn(1, 0, epoch=3), 0))
    state.update(at(txn(1, 1, epoch=3), 1))  # sent, answer lost; then purged by abort_transaction()
    state.update(marker_header(1, committed=False, epoch=3), 2, 2, TxnMarker(False, 0))
    reused = state.check_append(parse_header(txn(1, 1, epoch=3)))
    assert reused.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and reused.duplicate is None
    assert "ended" in reused.message and "expected sequence 2" in reused.message
    assert state.check_append(parse_header(txn(1, 2, epoch=3))).should_append
    # Inside the open transaction a retry is still answered with its original offsets.
    state.update(at(txn(1, 2, epoch=3), 3))
    retry = state.check_append(parse_header(txn(1, 2, epoch=3)))
    assert retry.error == ErrorCode.NONE and retry.duplicate is not None and retry.duplicate.first_offset == 3
    assert state.check_append(parse_header(txn(1, 1, epoch=3))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_unremembered_sequence_of_an_ended_transaction_is_out_of_order_not_duplicate_sequence() -> None:
    # DUPLICATE_SEQUENCE_NUMBER would be as wrong: librdkafka and Java count it as delivered.
    state = ProducerStateManager(batches_to_retain=1)
    state.update(at(txn(1, 0, epoch=3), 0))
    state.update(at(txn(1, 1, epoch=3), 1))
    assert state.check_append(parse_header(txn(1, 0, epoch=3))).error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    state.update(marker_header(1, committed=True, epoch=3), 2, 2, TxnMarker(True, 0))
    assert state.check_append(parse_header(txn(1, 0, epoch=3))).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A plain idempotent producer has no transactions: its old retries keep Kafka's answer.
    plain_state = ProducerStateManager(batches_to_retain=1)
    for seq in (0, 1):
        plain_state.update(
            parse_header(
                build_batch([(None, b"x")], base_offset=seq, producer_id=2, producer_epoch=0, base_sequence=seq)
            )
        )
    old = parse_header(build_batch([(None, b"x")], producer_id=2, producer_epoch=0, base_sequence=0))
    assert plain_state.check_append(old).error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER


def test_the_lso_is_the_earliest_open_transaction_and_never_above_the_hw() -> None:
    state = ProducerStateManager()
    state.update(at(txn(1, 0), 3))
    state.update(at(txn(2, 0), 1))
    assert state.last_stable_offset(10) == 1
    assert state.last_stable_offset(0) == 0
    done = state.update(marker_header(2, committed=True), 4, 4, TxnMarker(True, 0))
    assert done is not None and not done.aborted
    assert state.stable_offset_after(done) == 3  # producer 1's transaction is still open
    state.on_high_watermark(5)
    assert state.last_stable_offset(10) == 3


def test_an_aborted_transaction_records_the_earliest_of_the_others_still_open() -> None:
    # The aborted-transaction index entry's LSO bounds what read_committed fetches look up: the
    # earliest open transaction, whichever producer opened it first.
    state = ProducerStateManager()
    state.update(at(txn(1, 0), 0))
    state.update(at(txn(2, 0), 5))
    state.update(at(txn(3, 0), 2))
    done = state.update(marker_header(1, committed=False), 6, 6, TxnMarker(False, 0))
    assert done is not None and done.aborted
    assert state.stable_offset_after(done) == 2


def test_retention_keeps_a_transaction_whose_marker_is_the_first_retained_offset() -> None:
    state = ProducerStateManager()
    state.update(at(txn(1, 0), 0))
    state.update(marker_header(1, committed=True), 3, 3, TxnMarker(True, 0))  # HW not past it yet
    state.evict_unretained(3)
    assert state.first_unstable_offset() == 0, "a marker still in the log (at the log start) was forgotten"
    state.evict_unretained(4)
    assert state.first_unstable_offset() is None


def test_who_must_be_verified_before_opening_a_transaction_here() -> None:
    state = ProducerStateManager()
    assert state.needs_verification(parse_header(txn(1, 0, epoch=2)))  # a new transaction, unverified
    assert not state.needs_verification(parse_header(plain()))
    assert not state.needs_verification(marker_header(1, committed=True, epoch=2))
    assert not state.needs_verification(parse_header(txn(-1, 0)))
    assert not state.needs_verification(parse_header(txn(1, 0, epoch=-1)))
    state.update(at(txn(1, 0, epoch=2), 0))  # producer 1's transaction is open here at epoch 2
    assert state.has_ongoing_txn(1, 2) and not state.has_ongoing_txn(1, 3) and not state.has_ongoing_txn(2, 2)
    assert not state.needs_verification(parse_header(txn(1, 1, epoch=2)))
    assert not state.needs_verification(parse_header(txn(1, 0, epoch=1)))  # older epoch: refused anyway
    assert state.needs_verification(parse_header(txn(1, 0, epoch=3)))  # a bumped epoch opens a new one


def test_plain_writes_inside_a_transaction_and_stale_markers_are_refused() -> None:
    state = ProducerStateManager()
    state.update(at(txn(1, 0, epoch=2), 0))
    plain_idem = parse_header(build_batch([(None, b"x")], producer_id=1, producer_epoch=2, base_sequence=1))
    assert state.check_append(plain_idem).error == ErrorCode.INVALID_TXN_STATE
    assert state.check_append(parse_header(txn(1, 1, epoch=2))).should_append
    assert state.check_marker(1, 1, 0).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.check_marker(1, 2, 0).should_append
    state.update(marker_header(1, True, epoch=2, coordinator_epoch=5), 1, 1, TxnMarker(True, 5))
    assert state.check_marker(1, 2, 4).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert state.check_marker(1, 2, 5).should_append
    assert state.check_marker(99, 0, 0).should_append  # no state: written all the same, as Kafka
    assert state.check_append(parse_header(build_batch([(None, b"x")], is_transactional=True))).error == (
        ErrorCode.INVALID_RECORD
    )


def test_snapshots_carry_open_transactions_and_version_1_still_loads() -> None:
    state = ProducerStateManager()
    state.update(at(txn(1, 0), 0))
    state.update(at(txn(2, 0), 1))
    state.update(marker_header(2, True, coordinator_epoch=3), 2, 2, TxnMarker(True, 3))
    restored = ProducerStateManager.from_snapshot(state.snapshot())
    assert restored.ongoing_txns() == {1: 0}
    assert restored.entry(2).coordinator_epoch == 3
    # A version-1 snapshot (before transactions) has no such fields: no open transaction, epoch -1.
    payload = cbor2.dumps({"version": 1, "offset": 5, "producers": [[7, 0, 1_000, [[0, 0, 4, 4, 1_000]]]]})
    old = ProducerStateManager.from_snapshot(cbor2.dumps({"crc": crc32c(payload), "payload": payload}))
    assert old.entry(7).current_txn_first_offset == -1 and old.entry(7).last_seq == 0


def test_a_replay_rebuilds_open_transactions_and_reports_aborts() -> None:
    log = [
        (at(txn(1, 0), 0), None),
        (at(txn(2, 0), 1), None),
        (marker_header(1, False)._replace(base_offset=2), TxnMarker(False, 0)),
        (at(plain(), 3), None),
    ]
    aborted: list[tuple[CompletedTxn, int]] = []
    rebuilt = ProducerStateManager.rebuild(None, log, 4, on_aborted=lambda t, lso: aborted.append((t, lso)))
    assert rebuilt.ongoing_txns() == {2: 1}
    assert aborted == [(CompletedTxn(1, 0, 2, aborted=True), 1)]  # the LSO then: producer 2's first offset
    # From a snapshot at 2 (producer 1's transaction open there) the rest replays the same.
    snapshot_state = ProducerStateManager.rebuild(None, log[:2], 2)
    again = ProducerStateManager.rebuild(snapshot_state.snapshot(), log, 4)
    assert again.ongoing_txns() == {2: 1}


def test_retention_past_a_producers_data_forgets_its_transaction() -> None:
    state = ProducerStateManager()
    state.update(at(txn(1, 0), 0))
    state.update(at(txn(2, 0), 5))
    state.evict_unretained(3)
    assert state.ongoing_txns() == {2: 5}


# -- the leader and the follower ---------------------------------------------------------------------------


def leader() -> Partition:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=1))
    partition.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    return partition


def append(partition: Partition, rid: str, header: BatchHeader, marker: TxnMarker | None = None) -> list:
    return partition.handle_produce(ProduceRequest(rid, header, acks=1, marker=marker), 0)


def follower_catches_up(partition: Partition, offset: int) -> None:
    partition.handle_fetch(FetchPartition(1, offset, EPOCH), None, 1)


def consumer_bound(partition: Partition, isolation: int) -> int:
    return partition.check_fetch(FetchPartition(-1, 0, EPOCH, isolation_level=isolation), None).max_offset


def test_the_leader_bounds_read_committed_fetches_and_list_offsets_by_the_lso() -> None:
    partition = leader()
    append(partition, "p", parse_header(plain()))
    append(partition, "t", parse_header(txn(7, 0, 2)))
    append(partition, "q", parse_header(plain()))
    follower_catches_up(partition, 4)
    assert partition.high_watermark == 4
    assert consumer_bound(partition, 0) == 4
    assert consumer_bound(partition, READ_COMMITTED) == 1
    assert partition.list_offsets_latest(read_committed=True) == (ErrorCode.NONE, 1)
    assert partition.list_offsets_latest() == (ErrorCode.NONE, 4)
    actions = append(partition, "m", marker_header(7, committed=False), TxnMarker(False, 0))
    [index] = [a for a in actions if isinstance(a, IndexAbortedTxn)]
    assert (index.producer_id, index.first_offset, index.last_offset, index.last_stable_offset) == (7, 1, 4, 5)
    assert consumer_bound(partition, READ_COMMITTED) == 1  # the marker is not replicated yet
    follower_catches_up(partition, 5)
    assert consumer_bound(partition, READ_COMMITTED) == 5
    # Followers are never bounded by the LSO.
    decision = partition.check_fetch(FetchPartition(1, 5, EPOCH, isolation_level=READ_COMMITTED), None)
    assert decision.max_offset == partition.leader.log_end_offset


def test_a_stale_marker_is_answered_with_its_error_and_not_appended() -> None:
    partition = leader()
    append(partition, "t", parse_header(txn(7, 0, epoch=3)))
    [answer] = append(partition, "m", marker_header(7, True, epoch=2), TxnMarker(True, 0))
    assert isinstance(answer, CompleteProduce) and answer.error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert partition.leader.log_end_offset == 1


def test_a_follower_learns_transactions_and_indexes_aborts_from_fetched_bytes() -> None:
    partition = Partition(1)
    partition.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    records = txn(7, 0, offset=0) + plain(1) + bytes(_marker_at(7, False, 2)) + txn(8, 0, offset=3)
    request = partition.build_fetch(LogState(0, 0, 0), 0)
    actions = partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=0, records=records), 0)
    [index] = [a for a in actions if isinstance(a, IndexAbortedTxn)]
    assert (index.producer_id, index.first_offset, index.last_offset, index.last_stable_offset) == (7, 0, 2, 3)
    assert partition.producers.ongoing_txns() == {8: 3}


def _marker_at(pid: int, committed: bool, offset: int) -> bytes:
    from kraftpy.protocol.records.header import patch_offset_and_epoch

    data = bytearray(build_marker_batch(pid, 0, TxnMarker(committed, 0), timestamp_ms=1_000))
    patch_offset_and_epoch(data, 0, offset, 0)
    return bytes(data)


@pytest.mark.parametrize("committed", [True, False])
def test_read_marker_rejects_nothing_it_wrote(committed: bool) -> None:
    data = _marker_at(3, committed, 10)
    assert read_marker(data, parse_header(data)) == TxnMarker(committed, 0)


def test_a_producer_with_an_open_transaction_never_expires() -> None:
    state = ProducerStateManager(producer_id_expiration_ms=10)
    state.update(at(txn(1, 0), 0))
    state.update(at(plain(), 1)._replace(producer_id=2, producer_epoch=0, base_sequence=0))
    assert state.remove_expired(now_ms=1_000_000) == [2]
    assert state.ongoing_txns() == {1: 0}


GOOD_MARKER = {"producer_id": 1, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0, "topics": []}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"markers": "x"},
        {"markers": [1]},
        {"markers": [{**GOOD_MARKER, "producer_id": -1}]},
        {"markers": [{**GOOD_MARKER, "producer_id": True}]},
        {"markers": [{**GOOD_MARKER, "producer_epoch": 1 << 15}]},
        {"markers": [{**GOOD_MARKER, "transaction_result": 1}]},
        {"markers": [{**GOOD_MARKER, "coordinator_epoch": -1}]},
        {"markers": [{**GOOD_MARKER, "topics": [{"name": "t", "partition_indexes": [-1]}]}]},
        {"markers": [{**GOOD_MARKER, "topics": [{"name": "t", "partition_indexes": [True]}]}]},
        {"markers": [{**GOOD_MARKER, "topics": [{"name": 5, "partition_indexes": [0]}]}]},
    ],
)
def test_hostile_write_txn_markers_bodies_are_invalid_request(body: dict) -> None:
    from kraftpy.broker.api.write_txn_markers import read_markers
    from kraftpy.protocol.errors import KafkaError

    with pytest.raises(KafkaError) as raised:
        read_markers(body)
    assert raised.value.code == ErrorCode.INVALID_REQUEST


def test_a_well_formed_write_txn_markers_body_is_read() -> None:
    from kraftpy.broker.api.write_txn_markers import read_markers

    body = {
        "markers": [
            {
                "producer_id": 5,
                "producer_epoch": 2,
                "transaction_result": False,
                "coordinator_epoch": 9,
                "topics": [{"name": "t", "partition_indexes": [0, 3]}],
            }
        ]
    }
    assert read_markers(body) == [(5, 2, False, 9, [("t", [0, 3])])]
