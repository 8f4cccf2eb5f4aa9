"""Metadata (with auto-creation of topics) and DescribeTopicPartitions on the Kafka listener."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from kraftpy.broker.kafka.metadata import metadata_response, missing_topics, read_request
from kraftpy.broker.kafka.shell.api_handler import ApiHandler
from kraftpy.broker.kafka.topic_partitions import (
    describe_topic_partitions_error,
    describe_topic_partitions_response,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import DESCRIBE_TOPIC_PARTITIONS
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

log = logging.getLogger(__name__)

METADATA = 3


async def handle_metadata(apis: BrokerApis, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    ask = read_request(request, ctx.header.api_version)
    image = apis.image()
    creating: list[str] = []
    missing = missing_topics(image, ask)
    if missing and ask.allow_auto_create and apis.config.auto_create_topics_enable:
        creating = await auto_create(apis, missing)
        image = apis.image()
    return metadata_response(
        image,
        ask,
        listener_name=ctx.listener_name,
        cluster_id=apis.cluster_id,
        controller_id=apis.broker_id,
        creating=creating,
    )


async def auto_create(apis: BrokerApis, names: list[str]) -> list[str]:
    """Ask the controller to create `names` with the cluster's defaults; the names it took or already had."""
    body = {"topics": [{"name": n, "num_partitions": -1, "replication_factor": -1} for n in names]}
    # A Metadata request waits for this at most one controller request timeout: the client asks again.
    wait_ms = apis.replica_manager.settings.controller_request_timeout_ms
    try:
        answer = await apis.call_controller("/controller/create_topics", body, wait_ms)
    except KafkaError as exc:
        log.info("auto-creating %s failed: %s", ", ".join(names), exc)
        return []
    ok = (int(ErrorCode.NONE), int(ErrorCode.TOPIC_ALREADY_EXISTS))
    return [t["name"] for t in answer.get("topics", []) if t.get("error_code") in ok]


def metadata_error(request: MetadataRequest, version: int, error: KafkaError) -> MetadataResponse:
    names = [t.name for t in request.topics or [] if getattr(t, "name", None) is not None]
    topics = [
        MetadataResponse.MetadataResponseTopic(error_code=int(error.code), name=n, is_internal=False, partitions=[])
        for n in names
    ]
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=topics)


async def handle_describe_topic_partitions(
    apis: BrokerApis, ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    return describe_topic_partitions_response(apis.image(), request)


HANDLERS = {
    METADATA: ApiHandler(handle_metadata, metadata_error),
    DESCRIBE_TOPIC_PARTITIONS: ApiHandler(handle_describe_topic_partitions, describe_topic_partitions_error),
}
