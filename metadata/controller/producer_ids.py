"""Producer-id blocks: the controller hands brokers blocks of 1000 ids for idempotent producers.

The next free id lives in the image (ProducerIds records), so blocks stay
unique and increasing across controller failovers: a new active controller
continues from the committed state, and its predecessor's uncommitted blocks
were never answered.
"""

from __future__ import annotations

from kraftpy.metadata.controller.cluster_control import check_broker_epoch
from kraftpy.metadata.controller.config import PRODUCER_ID_BLOCK_SIZE
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ControllerResult,
)
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import ProducerIdsRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT64_MAX


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest, block_size: int = PRODUCER_ID_BLOCK_SIZE
) -> ControllerResult:
    check_broker_epoch(image, request.broker_id, request.broker_epoch)
    start = image.producer_ids.next_producer_id
    if start > INT64_MAX - block_size:
        raise KafkaError("Exhausted all producer ids", ErrorCode.UNKNOWN_SERVER_ERROR)
    record = ProducerIdsRecord(request.broker_id, request.broker_epoch, start + block_size)
    return ControllerResult((record,), AllocateProducerIdsResponse(start, block_size))
