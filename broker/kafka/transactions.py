"""The transaction APIs on the Kafka listener, translated (pure): Kafka messages <-> the coordinator's routes.

AddPartitionsToTxn v0-v3 (one transaction, the client form) and v4+ (a batch of transactions,
the broker form with verify_only, KIP-890 part 1), AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions and ListTransactions. PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
clients older than KIP-588 (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn below v2; TxnOffsetCommit
below v3), as Kafka answers them. Docs: docs/kafka-listener.md, "Transaction APIs".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from kraftpy.broker.kafka.producers import fenced_code
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError

# First versions whose clients know PRODUCER_FENCED (KIP-588).
FENCED_SINCE = {"add_partitions": 2, "add_offsets": 2, "end_txn": 2, "txn_offset_commit": 3}
# AddPartitionsToTxn from v4 on is the brokers' batched form.
BATCHED_SINCE = 4

TopicPartitions = list[tuple[str, list[int]]]
TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult


# --- AddPartitionsToTxn -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddPartitions:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    topics: TopicPartitions

    def body(self, topics: TopicPartitions | None = None) -> dict[str, Any]:
        """The add_partitions_to_txn (or verify) handler's body for `topics` (default: all of them)."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "topics": [{"name": n, "partitions": ps} for n, ps in (self.topics if topics is None else topics)],
        }


def add_partitions_asks(request: AddPartitionsToTxnRequest, version: int) -> list[AddPartitions]:
    def topics(raw: Iterable[Any] | None) -> TopicPartitions:
        return [(t.name, list(t.partitions or [])) for t in raw or []]

    if version < BATCHED_SINCE:
        return [
            AddPartitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                False,
                topics(request.v3_and_below_topics),
            )
        ]
    return [
        AddPartitions(t.transactional_id, t.producer_id, t.producer_epoch, bool(t.verify_only), topics(t.topics))
        for t in request.transactions or []
    ]


def split_unknown(image: MetadataImage, topics: TopicPartitions) -> tuple[TopicPartitions, set[tuple[str, int]]]:
    """(the partitions that exist, those that do not): Kafka answers UNKNOWN_TOPIC_OR_PARTITION for the latter."""
    known: TopicPartitions = []
    unknown: set[tuple[str, int]] = set()
    for name, partitions in topics:
        topic = image.topic(name) if image is not None else None
        ok = [p for p in partitions if topic is not None and 0 <= p < len(topic.partitions)]
        unknown.update((name, p) for p in partitions if p not in ok)
        if ok:
            known.append((name, ok))
    return known, unknown


def partition_codes(ask: AddPartitions, unknown: set[tuple[str, int]], code: int) -> dict[tuple[str, int], int]:
    """Per partition: UNKNOWN_TOPIC_OR_PARTITION for unknown ones, and then OPERATION_NOT_ATTEMPTED for
    the rest (Kafka does not add any when one is unknown); otherwise the coordinator's `code`."""
    out: dict[tuple[str, int], int] = {}
    for name, partitions in ask.topics:
        for p in partitions:
            if unknown:
                out[(name, p)] = int(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (name, p) in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                )
            else:
                out[(name, p)] = code
    return out


def _topic_results(codes: Mapping[tuple[str, int], int], version: int) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (name, p), code in codes.items():
        code = fenced_code(code, version, FENCED_SINCE["add_partitions"])
        by_topic.setdefault(name, []).append(PartitionResult(partition_index=p, partition_error_code=code))
    return [TopicResult(name=n, results_by_partition=rs) for n, rs in by_topic.items()]


def add_partitions_response(
    version: int, results: list[tuple[str, Mapping[tuple[str, int], int]]], error: int = 0
) -> AddPartitionsToTxnResponse:
    """`results`: per transaction, its partitions' codes."""
    if version < BATCHED_SINCE:
        codes = results[0][1] if results else {}
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes, version)
        )
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        error_code=error,
        results_by_transaction=[
            TxnResult(transactional_id=txn_id, topic_results=_topic_results(codes, version))
            for txn_id, codes in results
        ],
    )


def add_partitions_error(
    request: AddPartitionsToTxnRequest, version: int, error: KafkaError
) -> AddPartitionsToTxnResponse:
    asks = add_partitions_asks(request, version)
    results = [(a.transactional_id, partition_codes(a, set(), int(error.code))) for a in asks]
    return add_partitions_response(version, results, int(error.code) if version >= BATCHED_SINCE else 0)


# --- AddOffsetsToTxn / EndTxn -----------------------------------------------------------------------


def add_offsets_body(request: AddOffsetsToTxnRequest, version: int) -> dict[str, Any]:
    return {
        "transactional_id": request.transactional_id,
        "producer_id": request.producer_id,
        "producer_epoch": request.producer_epoch,
        "group_id": request.group_id,
    }


def add_offsets_response(version: int, answer: Mapping[str, Any]) -> AddOffsetsToTxnResponse:
    code = fenced_code(int(answer.get("error_code", 0)), version, FENCED_SINCE["add_offsets"])
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


def add_offsets_error(request: AddOffsetsToTxnRequest, version: int, error: KafkaError) -> AddOffsetsToTxnResponse:
    return add_offsets_response(version, {"error_code": int(error.code)})


def end_txn_body(request: EndTxnRequest, version: int) -> dict[str, Any]:
    return {
        "transactional_id": request.transactional_id,
        "producer_id": request.producer_id,
        "producer_epoch": request.producer_epoch,
        "committed": bool(request.committed),
    }


def end_txn_response(version: int, answer: Mapping[str, Any]) -> EndTxnResponse:
    code = fenced_code(int(answer.get("error_code", 0)), version, FENCED_SINCE["end_txn"])
    return EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


def end_txn_error(request: EndTxnRequest, version: int, error: KafkaError) -> EndTxnResponse:
    return end_txn_response(version, {"error_code": int(error.code)})


# --- TxnOffsetCommit --------------------------------------------------------------------------------


def txn_offset_commit_body(request: TxnOffsetCommitRequest, version: int) -> dict[str, Any]:
    """The txn_offset_commit handler's body: OffsetCommit's shape plus the producer."""
    return {
        "transactional_id": request.transactional_id,
        "group_id": request.group_id,
        "producer_id": request.producer_id,
        "producer_epoch": request.producer_epoch,
        "generation_id": request.generation_id if version >= 3 else -1,
        "member_id": request.member_id if version >= 3 else "",
        "group_instance_id": request.group_instance_id if version >= 3 else None,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": p.committed_leader_epoch if version >= 2 else -1,
                        "committed_metadata": p.committed_metadata,
                    }
                    for p in t.partitions or []
                ],
            }
            for t in request.topics or []
        ],
    }


def txn_offset_commit_response(version: int, answer: Mapping[str, Any]) -> TxnOffsetCommitResponse:
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    Partition = Topic.TxnOffsetCommitResponsePartition
    since = FENCED_SINCE["txn_offset_commit"]
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            Topic(
                name=t["name"],
                partitions=[
                    Partition(
                        partition_index=p["partition_index"], error_code=fenced_code(p["error_code"], version, since)
                    )
                    for p in t["partitions"]
                ],
            )
            for t in answer.get("topics") or []
        ],
    )


def txn_offset_commit_error(
    request: TxnOffsetCommitRequest, version: int, error: KafkaError
) -> TxnOffsetCommitResponse:
    topics = [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": int(error.code)} for p in t.partitions or []
            ],
        }
        for t in request.topics or []
    ]
    return txn_offset_commit_response(version, {"topics": topics})


# --- DescribeTransactions / ListTransactions --------------------------------------------------------


def describe_transactions_response(version: int, states: list[Mapping[str, Any]]) -> DescribeTransactionsResponse:
    State = DescribeTransactionsResponse.TransactionState
    Topic = State.TopicData
    return DescribeTransactionsResponse(
        throttle_time_ms=0,
        transaction_states=[
            State(
                error_code=int(s.get("error_code", 0)),
                transactional_id=s["transactional_id"],
                transaction_state=s.get("transaction_state", ""),
                transaction_timeout_ms=s.get("transaction_timeout_ms", 0),
                transaction_start_time_ms=s.get("transaction_start_time_ms", -1),
                producer_id=s.get("producer_id", -1),
                producer_epoch=s.get("producer_epoch", -1),
                topics=[Topic(topic=t["topic"], partitions=t["partitions"]) for t in s.get("topics") or []],
            )
            for s in states
        ],
    )


def describe_transactions_error(
    request: DescribeTransactionsRequest, version: int, error: KafkaError
) -> DescribeTransactionsResponse:
    return describe_transactions_response(
        version, [{"transactional_id": t, "error_code": int(error.code)} for t in request.transactional_ids or []]
    )


def list_transactions_body(request: ListTransactionsRequest, version: int) -> dict[str, Any]:
    return {
        "state_filters": list(request.state_filters or []),
        "producer_id_filters": list(request.producer_id_filters or []),
        "duration_filter_ms": int(request.duration_filter) if version >= 1 else -1,
    }


def list_transactions_response(version: int, answer: Mapping[str, Any]) -> ListTransactionsResponse:
    State = ListTransactionsResponse.TransactionState
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=int(answer.get("error_code", 0)),
        unknown_state_filters=list(answer.get("unknown_state_filters") or []),
        transaction_states=[
            State(
                transactional_id=s["transactional_id"],
                producer_id=s["producer_id"],
                transaction_state=s["transaction_state"],
            )
            for s in answer.get("states") or []
        ],
    )


def list_transactions_error(
    request: ListTransactionsRequest, version: int, error: KafkaError
) -> ListTransactionsResponse:
    return list_transactions_response(version, {"error_code": int(error.code)})
