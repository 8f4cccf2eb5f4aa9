"""KIP-890 part 1 in the partition core: which transactional writes need the coordinator, and the guard."""

from __future__ import annotations

from kraftpy.broker.replication import (
    CompleteProduce,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ReplicationConfig,
)
from kraftpy.broker.replication.txn_verification import TxnVerifications, produce_error
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch
from kraftpy.protocol.records.header import BatchHeader, parse_header

EPOCH = 1
PID = 7


def txn(seq: int, epoch: int = 0, pid: int = PID) -> BatchHeader:
    return parse_header(
        build_batch(
            [(None, b"v", (), 1_000)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
    )


def leader() -> Partition:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=1))
    partition.apply_registration(PartitionRegistration((0,), (0,), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    return partition


_rids = iter(range(1_000_000))


def produce(partition: Partition, header: BatchHeader, verify: bool = True) -> CompleteProduce:
    actions = partition.handle_produce(ProduceRequest(next(_rids), header, acks=1, verify_txn=verify), 0)
    return next(a for a in actions if isinstance(a, CompleteProduce))


def end_txn(partition: Partition, committed: bool = True, epoch: int = 0) -> CompleteProduce:
    header = parse_header(build_marker_batch(PID, epoch, TxnMarker(committed, 0), timestamp_ms=1_000))
    request = ProduceRequest(next(_rids), header, acks=1, marker=TxnMarker(committed, 0))
    return next(a for a in partition.handle_produce(request, 0) if isinstance(a, CompleteProduce))


def test_an_unverified_transactional_write_is_refused_and_opens_nothing() -> None:
    p = leader()
    done = produce(p, txn(0))
    assert done.error == ErrorCode.INVALID_TXN_STATE
    assert p.producers.ongoing_txns() == {}
    assert p.leader.log_end_offset == 0 and p.leader.last_stable_offset == 0


def test_a_verified_producer_writes_until_its_marker_then_needs_verifying_again() -> None:
    p = leader()
    guard = p.begin_txn_verification(txn(0), now_ms=0)
    assert guard is not None
    assert p.txn_verified(PID, 0, guard)
    assert produce(p, txn(0)).error == ErrorCode.NONE
    # The transaction is open here now: later batches need no verification.
    assert p.begin_txn_verification(txn(1), now_ms=0) is None
    assert produce(p, txn(1)).error == ErrorCode.NONE
    assert end_txn(p).error == ErrorCode.NONE
    # A late write after the marker (same producer, same epoch) cannot open a transaction here.
    assert p.begin_txn_verification(txn(2), now_ms=0) is not None
    assert produce(p, txn(2)).error == ErrorCode.INVALID_TXN_STATE
    assert p.producers.ongoing_txns() == {}
    assert p.leader.last_stable_offset == p.leader.high_watermark


def test_a_marker_between_the_question_and_the_answer_voids_the_answer() -> None:
    """Kafka's ABA case: verification asked, the transaction aborted meanwhile, the stale yes arrives."""
    p = leader()
    guard = p.begin_txn_verification(txn(0), now_ms=0)
    assert guard is not None
    assert end_txn(p, committed=False).error == ErrorCode.NONE
    assert not p.txn_verified(PID, 0, guard)
    assert produce(p, txn(0)).error == ErrorCode.INVALID_TXN_STATE


def test_a_stale_answer_does_not_verify_the_question_asked_again_after_a_marker() -> None:
    """The ABA case once more, with the producer asking again in the same epoch after the marker:
    the first question's late yes must not count for the second (only its own guard does)."""
    v = TxnVerifications()
    first = v.start(PID, 0, now_ms=0)
    v.clear(PID)  # the marker
    second = v.start(PID, 0, now_ms=10)
    assert second != first
    assert not v.complete(PID, 0, first) and not v.is_verified(PID, 0)
    assert not v.complete(PID, 1, second), "the answer for another epoch does not count either"
    assert v.complete(PID, 0, second) and v.is_verified(PID, 0)
    v.remove_expired(now_ms=1_009, expiration_ms=1_000)
    assert len(v) == 1, "not expired before producer_id_expiration_ms has passed"


def test_what_needs_no_verification() -> None:
    p = leader()
    plain = parse_header(build_batch([(None, b"p", (), 1_000)]))
    assert p.begin_txn_verification(plain, now_ms=0) is None
    assert produce(p, plain).error == ErrorCode.NONE
    # Without verify_txn (the broker's own appends, or the setting off) the old rules apply.
    assert produce(p, txn(0), verify=False).error == ErrorCode.NONE
    # A follower does not verify (the produce is refused as NOT_LEADER_OR_FOLLOWER anyway).
    follower = Partition(1)
    follower.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    assert follower.begin_txn_verification(txn(0), now_ms=0) is None


def test_a_verified_epoch_does_not_verify_another_and_only_a_retry_in_its_txn_is_a_duplicate() -> None:
    p = leader()
    guard = p.begin_txn_verification(txn(0), now_ms=0)
    assert guard is not None and p.txn_verified(PID, 0, guard)
    assert p.begin_txn_verification(txn(0, epoch=1), now_ms=0) is not None  # a new epoch: asked again
    p2 = leader()
    g = p2.begin_txn_verification(txn(0), now_ms=0)
    assert g is not None and p2.txn_verified(PID, 0, g)
    first = produce(p2, txn(0))
    assert first.error == ErrorCode.NONE
    retry = produce(p2, txn(0))  # the same batch again in its transaction: its original offset, no error
    assert retry.error == ErrorCode.NONE and retry.base_offset == first.base_offset
    assert end_txn(p2).error == ErrorCode.NONE
    # After the marker it is no retry but a reused sequence (seed 2301): refused, not answered as written.
    assert produce(p2, txn(0)).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_concurrent_verifications_share_a_guard_and_entries_expire() -> None:
    v = TxnVerifications()
    g = v.start(1, 0, now_ms=100)
    assert v.start(1, 0, now_ms=150) == g  # one under way for this producer and epoch
    assert v.start(1, 1, now_ms=150) != g  # another epoch replaces it
    assert not v.complete(1, 0, g)
    v.remove_expired(now_ms=10_000, expiration_ms=1_000)
    assert len(v) == 0


def test_coordinator_answers_become_kafkas_produce_errors() -> None:
    assert produce_error(ErrorCode.NONE) is None
    assert produce_error(ErrorCode.INVALID_TXN_STATE).code == ErrorCode.INVALID_TXN_STATE
    for retriable in (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NETWORK_EXCEPTION,
    ):
        assert produce_error(retriable).code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_error(ErrorCode.PRODUCER_FENCED).code == ErrorCode.PRODUCER_FENCED
