"""The transaction APIs on Kafka's wire: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions.

The bodies the transaction core (client/producer/transactions.py) and the
admin client make use Kafka's JSON field names in snake_case; the one
version difference handled here is AddPartitionsToTxn's: a client speaks
v0-v3 (one transaction, `v3_and_below_*` fields); v4 batches transactions
for brokers (KIP-890), so the client's range stops at v3
(client/wire/versions.py). Answers come back in the cores' shape:
partitions as `partition` with an `error_code`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.client.wire.common import error_fields, request_class

ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
CLIENT_ADD_PARTITIONS_MAX_VERSION = 3  # v4+ is the broker-to-broker batched form (KIP-890)


def _producer(body: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "transactional_id": body["transactional_id"],
        "producer_id": int(body["producer_id"]),
        "producer_epoch": int(body["producer_epoch"]),
    }


def build_add_partitions_to_txn(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(ADD_PARTITIONS_TO_TXN)
    topics = [cls.AddPartitionsToTxnTopic(name=t["name"], partitions=list(t["partitions"])) for t in body["topics"]]
    return cls(
        v3_and_below_transactional_id=body["transactional_id"],
        v3_and_below_producer_id=int(body["producer_id"]),
        v3_and_below_producer_epoch=int(body["producer_epoch"]),
        v3_and_below_topics=topics,
    )


def _partition_rows(topics: Any, results_field: str) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                {"partition": p.partition_index, **error_fields(p.partition_error_code)}
                for p in getattr(t, results_field) or []
            ],
        }
        for t in topics or []
    ]


def read_add_partitions_to_txn(response: Any, version: int) -> dict[str, Any]:
    return {"error_code": 0, "topics": _partition_rows(response.results_by_topic_v3_and_below, "results_by_partition")}


def build_add_offsets_to_txn(body: Mapping[str, Any], version: int) -> Any:
    return request_class(ADD_OFFSETS_TO_TXN)(**_producer(body), group_id=body["group_id"])


def read_error_only(response: Any, version: int) -> dict[str, Any]:
    return error_fields(response.error_code)


def build_end_txn(body: Mapping[str, Any], version: int) -> Any:
    return request_class(END_TXN)(**_producer(body), committed=bool(body["committed"]))


def build_txn_offset_commit(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(TXN_OFFSET_COMMIT)
    part_cls = cls.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
    topics = [
        cls.TxnOffsetCommitRequestTopic(
            name=t["name"],
            partitions=[
                part_cls(
                    partition_index=p["partition_index"],
                    committed_offset=p["committed_offset"],
                    committed_leader_epoch=p.get("committed_leader_epoch", -1),
                    committed_metadata=p.get("committed_metadata", ""),
                )
                for p in t["partitions"]
            ],
        )
        for t in body["topics"]
    ]
    # KIP-447 (v3+): the consumer's generation, member and instance id, so a zombie's commit is fenced.
    return cls(
        **_producer(body),
        group_id=body["group_id"],
        generation_id=int(body.get("generation_id", -1)),
        member_id=body.get("member_id", ""),
        group_instance_id=body.get("group_instance_id"),
        topics=topics,
    )


def read_txn_offset_commit(response: Any, version: int) -> dict[str, Any]:
    topics = [
        {
            "name": t.name,
            "partitions": [{"partition": p.partition_index, **error_fields(p.error_code)} for p in t.partitions or []],
        }
        for t in response.topics or []
    ]
    return {"error_code": 0, "topics": topics}


def build_describe_transactions(body: Mapping[str, Any], version: int) -> Any:
    return request_class(DESCRIBE_TRANSACTIONS)(transactional_ids=list(body["transactional_ids"]))


def read_describe_transactions(response: Any, version: int) -> dict[str, Any]:
    states = [
        {
            **error_fields(s.error_code),
            "transactional_id": s.transactional_id,
            "transaction_state": s.transaction_state,
            "transaction_timeout_ms": s.transaction_timeout_ms,
            "transaction_start_time_ms": s.transaction_start_time_ms,
            "producer_id": s.producer_id,
            "producer_epoch": s.producer_epoch,
            "topics": [{"topic": t.topic, "partitions": list(t.partitions or ())} for t in s.topics or []],
        }
        for s in response.transaction_states or []
    ]
    return {"error_code": 0, "transaction_states": states}


def build_list_transactions(body: Mapping[str, Any], version: int) -> Any:
    return request_class(LIST_TRANSACTIONS)(
        state_filters=list(body.get("state_filters") or ()),
        producer_id_filters=list(body.get("producer_id_filters") or ()),
        duration_filter=int(body.get("duration_filter", -1)),
    )


def read_list_transactions(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "unknown_state_filters": list(response.unknown_state_filters or ()),
        "transaction_states": [
            {
                "transactional_id": s.transactional_id,
                "producer_id": s.producer_id,
                "transaction_state": s.transaction_state,
            }
            for s in response.transaction_states or []
        ],
    }


APIS = {
    "/kafka/add_partitions_to_txn": (
        ADD_PARTITIONS_TO_TXN,
        build_add_partitions_to_txn,
        read_add_partitions_to_txn,
    ),
    "/kafka/add_offsets_to_txn": (ADD_OFFSETS_TO_TXN, build_add_offsets_to_txn, read_error_only),
    "/kafka/end_txn": (END_TXN, build_end_txn, read_error_only),
    "/kafka/txn_offset_commit": (TXN_OFFSET_COMMIT, build_txn_offset_commit, read_txn_offset_commit),
    "/kafka/describe_transactions": (
        DESCRIBE_TRANSACTIONS,
        build_describe_transactions,
        read_describe_transactions,
    ),
    "/kafka/list_transactions": (LIST_TRANSACTIONS, build_list_transactions, read_list_transactions),
}
