"""WriteTxnMarkers (api key 27) on the Kafka listener: Kafka's request to the `/broker/write_txn_markers` body
and the route's answer back. Pure translation; the route (broker/api/write_txn_markers.py) does the work.

v0-v1 (v1 is flexible). Docs: docs/kafka-listener.md, "WriteTxnMarkers".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from kraftpy.protocol.errors import ErrorCode, KafkaError

MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = MarkerResult.WritableTxnMarkerTopicResult
PartitionResult = TopicResult.WritableTxnMarkerPartitionResult


def read_request(request: WriteTxnMarkersRequest) -> dict[str, Any]:
    """The route's body: Kafka's field names in snake_case (the contract in docs/transactions.md)."""
    return {
        "markers": [
            {
                "producer_id": m.producer_id,
                "producer_epoch": m.producer_epoch,
                "transaction_result": bool(m.transaction_result),
                "coordinator_epoch": m.coordinator_epoch,
                "topics": [
                    {"name": t.name, "partition_indexes": list(t.partition_indexes or [])} for t in m.topics or []
                ],
            }
            for m in request.markers or []
        ]
    }


def response(answer: Mapping[str, Any]) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(
        markers=[
            MarkerResult(
                producer_id=m["producer_id"],
                topics=[
                    TopicResult(
                        name=t["name"],
                        partitions=[
                            PartitionResult(partition_index=p["partition_index"], error_code=p["error_code"])
                            for p in t["partitions"]
                        ],
                    )
                    for t in m["topics"]
                ],
            )
            for m in answer.get("markers", [])
        ]
    )


def error_response(request: WriteTxnMarkersRequest, version: int, error: KafkaError) -> WriteTxnMarkersResponse:
    """`error` on every partition of every marker (Kafka's getErrorResponse)."""
    code = int(error.code if error.code != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR)
    return WriteTxnMarkersResponse(
        markers=[
            MarkerResult(
                producer_id=m.producer_id,
                topics=[
                    TopicResult(
                        name=t.name,
                        partitions=[
                            PartitionResult(partition_index=i, error_code=code) for i in t.partition_indexes or []
                        ],
                    )
                    for t in m.topics or []
                ],
            )
            for m in request.markers or []
        ]
    )
