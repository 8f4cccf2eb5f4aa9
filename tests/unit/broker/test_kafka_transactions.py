"""The transaction APIs' translation, every served version through the codec (broker/kafka/transactions.py)."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from kraftpy.broker.kafka import producers
from kraftpy.broker.kafka import transactions as tx
from kraftpy.broker.kafka.shell import txn_apis
from kraftpy.protocol.errors import ErrorCode as E
from kraftpy.protocol.errors import KafkaError
from tests.unit.broker.test_kafka_groups import image, versions, wire_request, wire_response

Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction


def add_request(version: int, topics: list[tuple[str, list[int]]], verify: bool = False) -> AddPartitionsToTxnRequest:
    ts = [Topic(name=n, partitions=ps) for n, ps in topics]
    if version >= 4:
        return AddPartitionsToTxnRequest(
            transactions=[Txn(transactional_id="a", producer_id=5, producer_epoch=1, verify_only=verify, topics=ts)]
        )
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="a",
        v3_and_below_producer_id=5,
        v3_and_below_producer_epoch=1,
        v3_and_below_topics=ts,
    )


def test_every_transaction_api_is_served_by_the_family() -> None:
    assert set(txn_apis.HANDLERS) == {24, 25, 26, 28, 65, 66}


@pytest.mark.parametrize("version", versions(24))
def test_add_partitions_every_version(version: int) -> None:
    [ask] = tx.add_partitions_asks(wire_request(24, version, add_request(version, [("orders", [0, 1])])), version)
    assert (ask.transactional_id, ask.producer_id, ask.producer_epoch, ask.topics) == ("a", 5, 1, [("orders", [0, 1])])
    assert ask.body()["topics"] == [{"name": "orders", "partitions": [0, 1]}]
    codes = tx.partition_codes(ask, set(), int(E.PRODUCER_FENCED))
    out = wire_response(24, version, tx.add_partitions_response(version, [("a", codes)]))
    topics = out.results_by_topic_v3_and_below if version < 4 else out.results_by_transaction[0].topic_results
    fenced = E.INVALID_PRODUCER_EPOCH if version < 2 else E.PRODUCER_FENCED
    assert [(r.partition_index, r.partition_error_code) for r in topics[0].results_by_partition] == [
        (0, fenced),
        (1, fenced),
    ]


def test_add_partitions_unknown_topic_spares_the_others() -> None:
    [ask] = tx.add_partitions_asks(add_request(3, [("orders", [0, 7]), ("nope", [0])]), 3)
    known, unknown = tx.split_unknown(image(), ask.topics)
    assert known == [("orders", [0])] and unknown == {("orders", 7), ("nope", 0)}
    codes = tx.partition_codes(ask, unknown, 0)
    assert codes == {
        ("orders", 0): E.OPERATION_NOT_ATTEMPTED,
        ("orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_add_partitions_v4_verify_only_and_error_response() -> None:
    request = wire_request(24, 4, add_request(4, [("orders", [0])], verify=True))
    [ask] = tx.add_partitions_asks(request, 4)
    assert ask.verify_only
    out = wire_response(24, 4, tx.add_partitions_error(request, 4, KafkaError("x", E.NOT_COORDINATOR)))
    assert out.error_code == E.NOT_COORDINATOR
    assert out.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code == 16


@pytest.mark.parametrize("version", versions(25))
def test_add_offsets_every_version(version: int) -> None:
    request = AddOffsetsToTxnRequest(transactional_id="a", producer_id=5, producer_epoch=1, group_id="g")
    body = tx.add_offsets_body(wire_request(25, version, request), version)
    assert body == {"transactional_id": "a", "producer_id": 5, "producer_epoch": 1, "group_id": "g"}
    out = wire_response(25, version, tx.add_offsets_response(version, {"error_code": int(E.PRODUCER_FENCED)}))
    assert out.error_code == (E.INVALID_PRODUCER_EPOCH if version < 2 else E.PRODUCER_FENCED)


@pytest.mark.parametrize("version", versions(26))
def test_end_txn_every_version(version: int) -> None:
    request = EndTxnRequest(transactional_id="a", producer_id=5, producer_epoch=1, committed=True)
    body = tx.end_txn_body(wire_request(26, version, request), version)
    assert body == {"transactional_id": "a", "producer_id": 5, "producer_epoch": 1, "committed": True}
    assert wire_response(26, version, tx.end_txn_response(version, {"error_code": 0})).error_code == 0
    out = wire_response(26, version, tx.end_txn_error(request, version, KafkaError("x", E.CONCURRENT_TRANSACTIONS)))
    assert out.error_code == E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("version", versions(28))
def test_txn_offset_commit_every_version(version: int) -> None:
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    P = T.TxnOffsetCommitRequestPartition
    request = TxnOffsetCommitRequest(
        transactional_id="a", group_id="g", producer_id=5, producer_epoch=1, generation_id=3, member_id="m",
        group_instance_id=None,
        topics=[T(name="orders", partitions=[P(partition_index=0, committed_offset=42, committed_leader_epoch=2,
                                                committed_metadata="x")])],
    )  # fmt: skip
    body = tx.txn_offset_commit_body(wire_request(28, version, request), version)
    assert body["topics"][0]["partitions"][0]["committed_offset"] == 42
    assert body["generation_id"] == (3 if version >= 3 else -1)
    assert body["topics"][0]["partitions"][0]["committed_leader_epoch"] == (2 if version >= 2 else -1)
    out = wire_response(28, version, tx.txn_offset_commit_error(request, version, KafkaError("x", E.PRODUCER_FENCED)))
    assert out.topics[0].partitions[0].error_code == (E.INVALID_PRODUCER_EPOCH if version < 3 else E.PRODUCER_FENCED)


def test_describe_and_list_transactions() -> None:
    wire_request(65, 0, DescribeTransactionsRequest(transactional_ids=["a"]))
    state = {
        "transactional_id": "a",
        "error_code": 0,
        "transaction_state": "Ongoing",
        "transaction_timeout_ms": 1000,
        "transaction_start_time_ms": 5,
        "producer_id": 5,
        "producer_epoch": 1,
        "topics": [{"topic": "orders", "partitions": [0, 1]}],
    }
    out = wire_response(65, 0, tx.describe_transactions_response(0, [state]))
    s = out.transaction_states[0]
    assert (s.transaction_state, s.producer_id, s.topics[0].partitions) == ("Ongoing", 5, [0, 1])
    for version in versions(66):
        request = ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[5], duration_filter=100)
        body = tx.list_transactions_body(wire_request(66, version, request), version)
        assert body["duration_filter_ms"] == (100 if version >= 1 else -1)
        answer = {"error_code": 0, "unknown_state_filters": ["X"], "states": [{"transactional_id": "a",
                  "producer_id": 5, "transaction_state": "Ongoing"}]}  # fmt: skip
        out = wire_response(66, version, tx.list_transactions_response(version, answer))
        assert out.unknown_state_filters == ["X"] and out.transaction_states[0].transactional_id == "a"


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id_with_a_transactional_id(version: int) -> None:
    request = InitProducerIdRequest(transactional_id="a", transaction_timeout_ms=5000)
    body = producers.read_init_producer_id(wire_request(22, version, request), version)
    assert (body["transactional_id"], body["transaction_timeout_ms"]) == ("a", 5000)
    out = wire_response(
        22, version, producers.init_producer_id_response({"error_code": int(E.PRODUCER_FENCED)}, version)
    )
    assert (out.error_code, out.producer_id) == (E.INVALID_PRODUCER_EPOCH if version < 4 else E.PRODUCER_FENCED, -1)
