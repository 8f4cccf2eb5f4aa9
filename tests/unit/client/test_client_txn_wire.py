"""The transaction APIs on the client's wire (client/wire/txn.py): requests as the broker's codec reads
them, answers (encoded by the codec as a broker would) in the shapes the transaction core reads."""

from __future__ import annotations

from typing import Any

from kraftpy.client.wire import txn
from kraftpy.client.wire.versions import choose_version, client_range
from kraftpy.protocol.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    message_classes,
)

_PRODUCER = {"transactional_id": "app", "producer_id": 7, "producer_epoch": 2}
TXN_BODIES: dict[str, dict[str, Any]] = {
    "/kafka/add_partitions_to_txn": {**_PRODUCER, "topics": [{"name": "a", "partitions": [0, 2]}]},
    "/kafka/add_offsets_to_txn": {**_PRODUCER, "group_id": "g"},
    "/kafka/end_txn": {**_PRODUCER, "committed": True},
    "/kafka/txn_offset_commit": {
        **_PRODUCER,
        "group_id": "g",
        "generation_id": 4,
        "member_id": "m-1",
        "group_instance_id": None,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition_index": 1,
                        "committed_offset": 42,
                        "committed_leader_epoch": 3,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    },
    "/kafka/describe_transactions": {"transactional_ids": ["app"]},
    "/kafka/list_transactions": {"state_filters": ["Ongoing"], "producer_id_filters": [7], "duration_filter": 5},
}


def _request(api_key: int, version: int, message: Any) -> Any:
    frame = encode_request(RequestHeader(api_key, version, 3, "t"), message)
    return decode_request(frame[4:])[1]


def _answer(api_key: int, version: int, response: Any) -> Any:
    header = RequestHeader(api_key, version, 3, "t")
    return decode_response(header, encode_response(header, response)[4:])[1]


def test_add_partitions_to_txn_is_the_clients_form_and_stops_at_v3() -> None:
    assert client_range(txn.ADD_PARTITIONS_TO_TXN) == (0, 3)
    assert choose_version(txn.ADD_PARTITIONS_TO_TXN, 0, 4) == 3  # v4 batches transactions: brokers only
    for version in range(4):
        decoded = _request(
            24, version, txn.build_add_partitions_to_txn(TXN_BODIES["/kafka/add_partitions_to_txn"], version)
        )
        assert decoded.v3_and_below_transactional_id == "app"
        assert (decoded.v3_and_below_producer_id, decoded.v3_and_below_producer_epoch) == (7, 2)
        assert [(t.name, list(t.partitions)) for t in decoded.v3_and_below_topics] == [("a", [0, 2])]
    cls = message_classes(24)[1]
    topic_cls = cls.AddPartitionsToTxnTopicResult
    part_cls = topic_cls.AddPartitionsToTxnPartitionResult
    response = cls(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            topic_cls(
                name="a",
                results_by_partition=[
                    part_cls(partition_index=0, partition_error_code=0),
                    part_cls(partition_index=2, partition_error_code=51),
                ],
            )
        ],
    )
    read = txn.read_add_partitions_to_txn(_answer(24, 3, response), 3)
    assert read["topics"] == [
        {
            "name": "a",
            "partitions": [
                {"partition": 0, "error_code": 0},
                {"partition": 2, "error_code": 51, "message": "CONCURRENT_TRANSACTIONS"},
            ],
        }
    ]


def test_txn_offset_commit_carries_the_members_identity_from_v3() -> None:
    body = TXN_BODIES["/kafka/txn_offset_commit"]
    new = _request(28, 3, txn.build_txn_offset_commit(body, 3))
    assert (new.generation_id, new.member_id, new.group_instance_id) == (4, "m-1", None)
    [part] = new.topics[0].partitions
    assert (part.partition_index, part.committed_offset, part.committed_leader_epoch) == (1, 42, 3)
    old = _request(28, 0, txn.build_txn_offset_commit(body, 0))  # v0-v2 have no member fields
    assert old.group_id == "g" and old.topics[0].partitions[0].committed_offset == 42
    cls = message_classes(28)[1]
    topic_cls = cls.TxnOffsetCommitResponseTopic
    response = cls(
        throttle_time_ms=0,
        topics=[
            topic_cls(
                name="a", partitions=[topic_cls.TxnOffsetCommitResponsePartition(partition_index=1, error_code=22)]
            )
        ],
    )
    read = txn.read_txn_offset_commit(_answer(28, 3, response), 3)
    assert read["topics"][0]["partitions"] == [{"partition": 1, "error_code": 22, "message": "ILLEGAL_GENERATION"}]


def test_end_txn_add_offsets_and_the_admin_lists_read_back() -> None:
    end = _request(26, 3, txn.build_end_txn(TXN_BODIES["/kafka/end_txn"], 3))
    assert (end.transactional_id, end.producer_id, end.producer_epoch, end.committed) == ("app", 7, 2, True)
    assert txn.read_error_only(_answer(26, 3, message_classes(26)[1](throttle_time_ms=0, error_code=90)), 3) == {
        "error_code": 90,
        "message": "PRODUCER_FENCED",
    }
    cls = message_classes(66)[1]
    listed = cls(
        throttle_time_ms=0,
        error_code=0,
        unknown_state_filters=["Nope"],
        transaction_states=[cls.TransactionState(transactional_id="app", producer_id=7, transaction_state="Ongoing")],
    )
    read = txn.read_list_transactions(_answer(66, 1, listed), 1)
    assert read["unknown_state_filters"] == ["Nope"]
    assert read["transaction_states"] == [{"transactional_id": "app", "producer_id": 7, "transaction_state": "Ongoing"}]
    cls = message_classes(65)[1]
    state = cls.TransactionState(
        error_code=0,
        transactional_id="app",
        transaction_state="Ongoing",
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=1_000,
        producer_id=7,
        producer_epoch=2,
        topics=[cls.TransactionState.TopicData(topic="a", partitions=[0, 2])],
    )
    read = txn.read_describe_transactions(_answer(65, 0, cls(throttle_time_ms=0, transaction_states=[state])), 0)
    [described] = read["transaction_states"]
    assert described["topics"] == [{"topic": "a", "partitions": [0, 2]}] and described["producer_epoch"] == 2


def test_the_admin_reads_transaction_answers_and_names_a_malformed_one() -> None:
    from kraftpy.client.admin import transactions as txn_admin
    from kraftpy.protocol.errors import ErrorCode, KafkaError

    listed = txn_admin.parse_list_transactions(
        {
            "error_code": 0,
            "transaction_states": [{"transactional_id": "b", "producer_id": 2, "transaction_state": "Empty"}],
        },
        3,
    )
    merged = txn_admin.merge_listings([listed, [txn_admin.TransactionListing("a", 1, "Ongoing", 1)], listed])
    assert [(t.transactional_id, t.coordinator_id) for t in merged] == [("a", 1), ("b", 3)]
    state = {
        "error_code": 0,
        "transactional_id": "a",
        "transaction_state": "Ongoing",
        "transaction_timeout_ms": 60_000,
        "transaction_start_time_ms": 5,
        "producer_id": 1,
        "producer_epoch": 0,
        "topics": [{"topic": "t", "partitions": [2, 0]}],
    }
    described = txn_admin.parse_describe_transaction({"transaction_states": [state]}, "a", 1)
    assert not isinstance(described, KafkaError)
    assert [tp.partition for tp in described.topic_partitions] == [0, 2] and described.transaction_start_time_ms == 5
    missing = txn_admin.parse_describe_transaction(
        {"transaction_states": [{"transactional_id": "a", "error_code": int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)}]},
        "a",
        1,
    )
    assert isinstance(missing, KafkaError) and missing.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    broken = txn_admin.parse_describe_transaction(
        {"transaction_states": [{**state, "topics": [{"topic": "t"}, 7]}]}, "a", 1
    )
    assert isinstance(broken, KafkaError) and broken.code == ErrorCode.CORRUPT_MESSAGE
