"""The data path on the Kafka listener: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, InitProducerId,
DescribeProducers.

Each handler translates with its core (broker/kafka/produce.py, fetch.py,
offsets.py, producers.py) and calls the broker's own handler, where every check
and all the semantics live. Docs: docs/kafka-listener.md, "Data APIs".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from kraftpy.broker.kafka import fetch, offsets, produce, producers
from kraftpy.broker.kafka.shell.api_handler import ApiHandler
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import FETCH, PRODUCE
from kraftpy.protocol.kafka.shell.listener import CLOSE_CONNECTION, RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

LIST_OFFSETS = 2
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_PRODUCERS = 61


async def handle_produce(apis: BrokerApis, ctx: RequestContext, request: ProduceRequest) -> Any:
    version = ctx.header.api_version
    image = apis.image()
    ask = produce.read_request(request, version, image)
    answer = await apis.handler("produce")(ask.body) if produce.needs_route(ask) else None
    if ask.acks == 0:  # nothing is sent back: no answer is encoded
        return CLOSE_CONNECTION if produce.has_error(produce.produce_answers(ask, answer, version)) else None
    return produce.produce_response(ask, answer, version, image, ctx.listener_name)


def produce_error(request: ProduceRequest, version: int, error: KafkaError) -> Any:
    # Nothing is ever written to an acks=0 producer: a failed request closes its connection, as Kafka does.
    return CLOSE_CONNECTION if request.acks == 0 else produce.produce_error(request, version, error)


async def handle_fetch(apis: BrokerApis, ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    version = ctx.header.api_version
    refused = fetch.session_error(request, version)
    if refused is not None:
        return refused
    image = apis.image()
    ask = fetch.read_request(request, version, image)
    # The listener's allowance bounds the records read to the memory its answers may hold.
    answer = None
    if fetch.needs_route(ask):
        answer = await apis.replica_manager.fetch_handler(ask.body, ctx.answer_allowance)
    return fetch.fetch_response(ask, answer, image, ctx.listener_name)


async def handle_list_offsets(
    apis: BrokerApis, ctx: RequestContext, request: ListOffsetsRequest
) -> ListOffsetsResponse:
    ask = offsets.read_list_offsets(request, ctx.header.api_version)
    answer = await apis.handler("list_offsets")(ask.body) if offsets.needs_route(ask.body) else None
    return offsets.list_offsets_response(ask, answer)


async def handle_offsets_for_epoch(
    apis: BrokerApis, ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    body = offsets.read_offsets_for_epoch(request, ctx.header.api_version)
    answer = await apis.handler("offsets_for_leader_epoch")(body) if offsets.needs_route(body) else None
    return offsets.offsets_for_epoch_response(request, answer)


async def handle_init_producer_id(
    apis: BrokerApis, ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    body = producers.read_init_producer_id(request, ctx.header.api_version)
    answer = await apis.handler("init_producer_id")(body)
    return producers.init_producer_id_response(answer or {}, ctx.header.api_version)


async def handle_describe_producers(
    apis: BrokerApis, ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    rm = apis.replica_manager
    topics = []
    for t in request.topics or []:
        parts = []
        for index in t.partition_indexes or []:
            try:
                hosted = rm.lookup(t.name, index)
                if not hosted.is_leader:
                    raise KafkaError(
                        f"broker {apis.broker_id} does not lead {t.name}-{index}", ErrorCode.NOT_LEADER_OR_FOLLOWER
                    )
                state = [
                    (
                        e.producer_id,
                        e.producer_epoch,
                        e.last_seq,
                        e.last_timestamp,
                        e.coordinator_epoch,
                        e.current_txn_first_offset,
                    )
                    for e in hosted.core.producers.producers.values()
                ]
                parts.append(producers.producers_partition(index, None, state))
            except KafkaError as exc:
                parts.append(producers.producers_partition(index, exc))
        topics.append((t.name, parts))
    return producers.describe_producers_response(topics)


HANDLERS = {
    PRODUCE: ApiHandler(handle_produce, produce_error),
    FETCH: ApiHandler(handle_fetch, fetch.fetch_error),
    LIST_OFFSETS: ApiHandler(handle_list_offsets, offsets.list_offsets_error),
    OFFSET_FOR_LEADER_EPOCH: ApiHandler(handle_offsets_for_epoch, offsets.offsets_for_epoch_error),
    INIT_PRODUCER_ID: ApiHandler(handle_init_producer_id, producers.init_producer_id_error),
    DESCRIBE_PRODUCERS: ApiHandler(handle_describe_producers, producers.describe_producers_error),
}
