"""WriteTxnMarkers on the Kafka listener: the same handler as `/broker/write_txn_markers` (contract point 1).

Translation in broker/kafka/txn_markers.py. Docs: docs/kafka-listener.md, "WriteTxnMarkers".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from kraftpy.broker.kafka import txn_markers
from kraftpy.broker.kafka.shell.api_handler import ApiHandler
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

WRITE_TXN_MARKERS = 27


async def handle_write_txn_markers(
    apis: BrokerApis, ctx: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    answer = await apis.handler("write_txn_markers")(txn_markers.read_request(request))
    return txn_markers.response(answer)


HANDLERS = {WRITE_TXN_MARKERS: ApiHandler(handle_write_txn_markers, txn_markers.error_response)}
