"""InitProducerId and DescribeProducers on the Kafka listener: idempotent producers' ids and state.

InitProducerId v0-v6 maps to the `init_producer_id` handler (any broker hands out
ids from its block; KIP-360 epoch bumps). With a transactional_id the route asks
this broker's transaction coordinator (NOT_COORDINATOR unless it owns the id;
docs/transactions.md); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v4, as
Kafka answers clients that predate KIP-588. DescribeProducers v0 lists the
partition leader's producer state (id, epoch, last sequence, last timestamp);
coordinator_epoch and current_txn_start_offset are -1, as for a
non-transactional producer in Kafka. Docs: docs/kafka-listener.md, "Data APIs".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from kraftpy.protocol.errors import ErrorCode, KafkaError

ProducersTopic = DescribeProducersResponse.TopicResponse
ProducersPartition = ProducersTopic.PartitionResponse
ProducerState = ProducersPartition.ProducerState


# The first InitProducerId version whose clients know PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_SINCE = 4


def read_init_producer_id(request: InitProducerIdRequest, version: int) -> dict[str, Any]:
    body = {
        "transactional_id": request.transactional_id,
        "producer_id": getattr(request, "producer_id", -1),
        "producer_epoch": getattr(request, "producer_epoch", -1),
    }
    if request.transactional_id is not None:
        body["transaction_timeout_ms"] = int(request.transaction_timeout_ms)
    return body


def fenced_code(code: int, version: int, since: int) -> int:
    """PRODUCER_FENCED for clients that know it (request version >= `since`), else INVALID_PRODUCER_EPOCH."""
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)


def init_producer_id_response(
    answer: Mapping[str, Any], version: int = PRODUCER_FENCED_SINCE
) -> InitProducerIdResponse:
    code = int(answer.get("error_code", 0))
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=fenced_code(code, version, PRODUCER_FENCED_SINCE),
        producer_id=int(answer["producer_id"]) if code == 0 else -1,
        producer_epoch=int(answer["producer_epoch"]) if code == 0 else -1,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )


def init_producer_id_error(request: InitProducerIdRequest, version: int, error: KafkaError) -> InitProducerIdResponse:
    return InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=fenced_code(error.code, version, PRODUCER_FENCED_SINCE),
        producer_id=-1,
        producer_epoch=-1,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )


# One producer's state as the shell reads it from the partition core:
# (producer_id, producer_epoch, last_sequence, last_timestamp[, coordinator_epoch, current_txn_start_offset]).
Producer = tuple[int, ...]


def producers_partition(index: int, error: KafkaError | None, producers: Iterable[Producer] = ()) -> ProducersPartition:
    if error is not None:
        return ProducersPartition(
            partition_index=index, error_code=int(error.code), error_message=error.message, active_producers=[]
        )
    active = [
        ProducerState(
            producer_id=pid,
            producer_epoch=epoch,
            last_sequence=last_seq,
            last_timestamp=last_ts,
            coordinator_epoch=txn[0] if txn else -1,
            # The first offset of the producer's open transaction here (-1: none), as Kafka reports it.
            current_txn_start_offset=txn[1] if txn else -1,
        )
        for pid, epoch, last_seq, last_ts, *txn in sorted(producers)
    ]
    return ProducersPartition(partition_index=index, error_code=0, error_message=None, active_producers=active)


def describe_producers_response(topics: list[tuple[str, list[ProducersPartition]]]) -> DescribeProducersResponse:
    return DescribeProducersResponse(
        throttle_time_ms=0, topics=[ProducersTopic(name=name, partitions=parts) for name, parts in topics]
    )


def describe_producers_error(
    request: DescribeProducersRequest, version: int, error: KafkaError
) -> DescribeProducersResponse:
    return describe_producers_response(
        [(t.name, [producers_partition(i, error) for i in t.partition_indexes or []]) for t in request.topics or []]
    )
