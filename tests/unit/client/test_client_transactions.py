"""The transactional producer's core (client/producer/transactions.py), driven with Kafka's answers.

No broker and no mocks: the core is a state machine whose input is an answer (or the lack of one) and
the time, and whose output is the next request; each test plays a coordinator.
"""

from __future__ import annotations

import pytest

from kraftpy.client.errors import IllegalStateError, ProducerFencedError
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.client.producer.transactions import (
    GroupMetadata,
    TransactionManager,
    TxnRequest,
    TxnState,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

S = TxnState
E = ErrorCode
COORD = ("10.0.0.2", 9092)
GROUP_COORD = ("10.0.0.3", 9092)
T0, T1 = TopicPartition("out", 0), TopicPartition("out", 1)


def manager() -> TransactionManager:
    return TransactionManager("app", IdempotenceManager(transactional=True), retry_backoff_ms=100)


def next_request(txn: TransactionManager, now_ms: float = 0, incomplete: bool = False) -> TxnRequest:
    request = txn.next_request(now_ms, incomplete)
    assert request is not None, f"no request in state {txn.state}"
    return request


def answer(txn: TransactionManager, request: TxnRequest, now_ms: float = 0, **body) -> None:
    txn.handle_response(request, {"error_code": 0, **body}, now_ms)


def find(txn: TransactionManager, address=COORD, key_type: int = 1) -> None:
    request = next_request(txn)
    assert request.path == "/kafka/find_coordinator" and request.address is None
    assert request.body["key_type"] == key_type
    answer(txn, request, host=address[0], port=address[1])


def ready() -> TransactionManager:
    txn = manager()
    result = txn.init_transactions()
    find(txn)
    init = next_request(txn)
    assert init.path == "/kafka/init_producer_id" and init.address == COORD
    assert init.body["transactional_id"] == "app" and init.body["producer_id"] == -1
    answer(txn, init, producer_id=42, producer_epoch=3)
    assert result.done and result.error is None and txn.state is S.READY
    return txn


def add(txn: TransactionManager, *tps: TopicPartition) -> None:
    for tp in tps:
        txn.maybe_add_partition(tp)
    request = next_request(txn)
    assert request.path == "/kafka/add_partitions_to_txn"
    partitions = [{"partition": tp.partition, "error_code": 0} for tp in tps]
    answer(txn, request, topics=[{"name": "out", "partitions": partitions}])


def test_init_finds_the_coordinator_then_gets_a_producer_id_with_the_transactional_id() -> None:
    txn = ready()
    assert txn.idempotence.producer_id_and_epoch.producer_id == 42
    assert txn.idempotence.producer_id_and_epoch.epoch == 3
    assert txn.next_request(0, False) is None


def test_init_retries_concurrent_transactions_after_a_backoff_and_follows_a_moved_coordinator() -> None:
    txn = manager()
    result = txn.init_transactions()
    find(txn)
    init = next_request(txn)
    txn.handle_response(init, {"error_code": int(E.CONCURRENT_TRANSACTIONS)}, 1_000)
    assert txn.next_request(1_050, False) is None  # backing off
    init = next_request(txn, 1_100)
    txn.handle_response(init, {"error_code": int(E.NOT_COORDINATOR)}, 1_100)
    assert txn.coordinator is None
    lookup = next_request(txn, 1_300)
    assert lookup.path == "/kafka/find_coordinator"
    answer(txn, lookup, 1_300, host="10.0.0.9", port=9092)
    init = next_request(txn, 1_500)
    assert init.address == ("10.0.0.9", 9092)
    # No answer at all (the node died): look the coordinator up again, then retry.
    txn.handle_failure(init, KafkaError("gone", E.NETWORK_EXCEPTION), 1_500)
    lookup = next_request(txn, 2_000)
    assert lookup.path == "/kafka/find_coordinator"
    answer(txn, lookup, 2_000, host=COORD[0], port=COORD[1])
    answer(txn, next_request(txn, 3_000), 3_000, producer_id=1, producer_epoch=0)
    assert result.done and result.error is None and txn.state is S.READY
    with pytest.raises(IllegalStateError):
        txn.init_transactions()  # once only


def test_a_partition_is_sendable_only_once_add_partitions_to_txn_answered() -> None:
    txn = ready()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        txn.maybe_add_partition(T0)  # no transaction yet
    txn.begin_transaction()
    assert txn.maybe_add_partition(T0) and not txn.maybe_add_partition(T0)
    assert not txn.is_send_to_partition_allowed(T0)
    request = next_request(txn)
    assert request.body["topics"] == [{"name": "out", "partitions": [0]}]
    assert request.body["producer_id"] == 42 and request.body["producer_epoch"] == 3
    assert not txn.is_send_to_partition_allowed(T0)  # in flight
    answer(txn, request, topics=[{"name": "out", "partitions": [{"partition": 0, "error_code": 0}]}])
    assert txn.is_send_to_partition_allowed(T0) and not txn.is_send_to_partition_allowed(T1)
    assert not txn.maybe_add_partition(T0)  # already in


def test_concurrent_transactions_on_the_first_add_is_retried_soon() -> None:
    txn = ready()
    txn.begin_transaction()
    txn.maybe_add_partition(T0)
    request = next_request(txn, 1_000)
    part = {"partition": 0, "error_code": int(E.CONCURRENT_TRANSACTIONS)}
    txn.handle_response(request, {"error_code": 0, "topics": [{"name": "out", "partitions": [part]}]}, 1_000)
    assert txn.next_request(1_010, False) is None
    assert next_request(txn, 1_020).body["topics"] == [{"name": "out", "partitions": [0]}]


def test_commit_waits_for_the_batches_then_ends_the_transaction() -> None:
    txn = ready()
    txn.begin_transaction()
    add(txn, T0)
    result = txn.begin_commit()
    assert txn.state is S.COMMITTING_TRANSACTION and txn.wants_end_txn
    with pytest.raises(IllegalStateError):
        txn.maybe_add_partition(T1)  # no sends while committing
    assert txn.next_request(0, has_incomplete_batches=True) is None
    assert txn.next_attempt_ms() == float("inf")  # the batches' answers wake the sender, not a timer
    end = next_request(txn)
    assert end.path == "/kafka/end_txn" and end.body["committed"] is True and end.address == COORD
    answer(txn, end)
    assert result.done and result.error is None and txn.state is S.READY
    assert not txn.partitions_in_transaction
    txn.begin_transaction()  # the next one


def test_a_partition_appended_to_just_before_commit_is_added_before_end_txn() -> None:
    txn = ready()
    txn.begin_transaction()
    txn.maybe_add_partition(T1)
    txn.begin_commit()
    first = next_request(txn, incomplete=True)  # the batch waits for its partition; EndTxn for the batch
    assert first.path == "/kafka/add_partitions_to_txn"
    answer(txn, first, topics=[{"name": "out", "partitions": [{"partition": 1, "error_code": 0}]}])
    assert txn.next_request(0, True) is None
    assert next_request(txn).path == "/kafka/end_txn"


def test_an_empty_transaction_ends_without_the_coordinator() -> None:
    txn = ready()
    txn.begin_transaction()
    assert txn.begin_commit().done and txn.state is S.READY
    txn.begin_transaction()
    assert txn.begin_abort().done and txn.state is S.READY
    assert txn.next_request(0, False) is None


def test_a_refused_batch_makes_the_transaction_abortable_and_abort_recovers() -> None:
    txn = ready()
    txn.begin_transaction()
    add(txn, T0)
    txn.on_batch_failed(KafkaError("too large", E.MESSAGE_TOO_LARGE))
    assert txn.state is S.ABORTABLE_ERROR and not txn.is_send_to_partition_allowed(T0)
    with pytest.raises(KafkaError, match="abort_transaction"):
        txn.begin_commit()
    with pytest.raises(KafkaError, match="abort_transaction"):
        txn.check_may_send()
    result = txn.begin_abort()
    end = next_request(txn)
    assert end.body["committed"] is False
    answer(txn, end)
    assert result.done and result.error is None and txn.state is S.READY and txn.last_error is None


def test_a_batch_failing_during_commit_fails_the_commit_and_leaves_an_abort() -> None:
    txn = ready()
    txn.begin_transaction()
    add(txn, T0)
    result = txn.begin_commit()
    txn.on_batch_failed(KafkaError("timed out", E.REQUEST_TIMED_OUT))
    assert txn.state is S.ABORTABLE_ERROR
    assert txn.next_request(0, False) is None  # EndTxn(commit) is not sent after an error
    assert result.done and result.error is not None
    txn.begin_abort()
    assert next_request(txn).body["committed"] is False


@pytest.mark.parametrize("code", [E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH])
def test_fenced_is_fatal_everywhere(code: ErrorCode) -> None:
    txn = ready()
    txn.begin_transaction()
    add(txn, T0)
    result = txn.begin_commit()
    end = next_request(txn)
    txn.handle_response(end, {"error_code": int(code)}, 0)
    assert txn.state is S.FATAL_ERROR and isinstance(result.error, ProducerFencedError)
    for call in (txn.begin_transaction, txn.begin_abort, txn.begin_commit, lambda: txn.maybe_add_partition(T0)):
        with pytest.raises(ProducerFencedError):
            call()
    # A batch refused as fenced does the same.
    other = ready()
    other.begin_transaction()
    other.on_batch_failed(KafkaError("old epoch", code))
    assert other.state is S.FATAL_ERROR


def test_send_offsets_adds_the_group_then_commits_to_the_group_coordinator_with_the_members_identity() -> None:
    txn = ready()
    txn.begin_transaction()
    group = GroupMetadata("g", generation_id=5, member_id="m-1", group_instance_id="i-1")
    result = txn.send_offsets_to_transaction({T0: (17, 2, ""), T1: (3, -1, "")}, group)
    add_offsets = next_request(txn)
    assert add_offsets.path == "/kafka/add_offsets_to_txn" and add_offsets.body["group_id"] == "g"
    answer(txn, add_offsets)
    find(txn, GROUP_COORD, key_type=0)
    commit = next_request(txn)
    assert commit.path == "/kafka/txn_offset_commit" and commit.address == GROUP_COORD
    body = commit.body
    assert (body["generation_id"], body["member_id"], body["group_instance_id"]) == (5, "m-1", "i-1")
    assert body["topics"] == [
        {
            "name": "out",
            "partitions": [
                {"partition_index": 0, "committed_offset": 17, "committed_leader_epoch": 2, "committed_metadata": ""},
                {"partition_index": 1, "committed_offset": 3, "committed_leader_epoch": -1, "committed_metadata": ""},
            ],
        }
    ]
    # One partition loads: only it is sent again.
    parts = [{"partition": 0, "error_code": 0}, {"partition": 1, "error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS)}]
    answer(txn, commit, topics=[{"name": "out", "partitions": parts}])
    again = next_request(txn, 10_000)
    assert [p["partition_index"] for p in again.body["topics"][0]["partitions"]] == [1]
    answer(txn, again, topics=[{"name": "out", "partitions": [{"partition": 1, "error_code": 0}]}])
    assert result.done and result.error is None
    assert txn.transaction_started  # EndTxn is needed even with no records sent
    txn.begin_commit()
    assert next_request(txn).path == "/kafka/end_txn"


@pytest.mark.parametrize("code", [E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID])
def test_a_stale_consumer_cannot_commit_offsets_in_the_transaction(code: ErrorCode) -> None:
    txn = ready()
    txn.begin_transaction()
    result = txn.send_offsets_to_transaction({T0: (1, -1, "")}, GroupMetadata("g", 1, "old"))
    answer(txn, next_request(txn))
    find(txn, GROUP_COORD, key_type=0)
    commit = next_request(txn)
    answer(txn, commit, topics=[{"name": "out", "partitions": [{"partition": 0, "error_code": int(code)}]}])
    assert result.error is not None and result.error.code == code
    assert txn.state is S.ABORTABLE_ERROR


def test_an_abort_after_a_sequence_problem_gets_a_new_epoch_from_the_coordinator() -> None:
    txn = ready()
    txn.begin_transaction()
    add(txn, T0)
    txn.idempotence.request_epoch_bump_for_partition(T0)  # e.g. OUT_OF_ORDER_SEQUENCE_NUMBER on a batch
    txn.idempotence.bump_epoch_if_needed()
    assert txn.idempotence.producer_id_and_epoch.epoch == 3  # no local bump for a transactional producer
    txn.on_batch_failed(KafkaError("gap", E.OUT_OF_ORDER_SEQUENCE_NUMBER))
    result = txn.begin_abort()
    answer(txn, next_request(txn))  # EndTxn(abort)
    assert txn.state is S.INITIALIZING and not result.done
    bump = next_request(txn)
    assert bump.path == "/kafka/init_producer_id"
    assert (bump.body["producer_id"], bump.body["producer_epoch"]) == (42, 3)  # KIP-360: ours, not -1
    answer(txn, bump, producer_id=42, producer_epoch=4)
    assert result.done and result.error is None and txn.state is S.READY
    assert not txn.idempotence.epoch_bump_required


def test_abort_drops_queued_requests_and_invalid_transitions_raise() -> None:
    txn = ready()
    with pytest.raises(IllegalStateError):
        txn.begin_commit()  # not in a transaction
    with pytest.raises(IllegalStateError):
        txn.begin_abort()
    txn.begin_transaction()
    with pytest.raises(IllegalStateError):
        txn.begin_transaction()
    add(txn, T0)
    offsets = txn.send_offsets_to_transaction({T0: (1, -1, "")}, GroupMetadata("g"))
    txn.begin_abort()
    assert offsets.done and offsets.error is not None and offsets.error.code == E.OPERATION_NOT_ATTEMPTED
    assert next_request(txn).path == "/kafka/end_txn"
