"""The Kafka listener's side of the partition transactions: WriteTxnMarkers, read_committed Fetch, ListOffsets."""

from __future__ import annotations

import pytest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from kraftpy.broker.kafka import fetch, offsets, producers, txn_markers
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.unit.broker.test_kafka_data_apis import fetch_request, image, list_offsets_request, received, sent

M = WriteTxnMarkersRequest.WritableTxnMarker


def markers_request() -> WriteTxnMarkersRequest:
    topic = M.WritableTxnMarkerTopic(name="t", partition_indexes=[0, 2])
    return WriteTxnMarkersRequest(
        markers=[M(producer_id=42, producer_epoch=3, transaction_result=True, topics=[topic], coordinator_epoch=9)]
    )


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_maps_to_the_route_and_back(version: int) -> None:
    body = txn_markers.read_request(received(27, version, markers_request()))
    assert body == {
        "markers": [
            {
                "producer_id": 42,
                "producer_epoch": 3,
                "transaction_result": True,
                "coordinator_epoch": 9,
                "topics": [{"name": "t", "partition_indexes": [0, 2]}],
            }
        ]
    }
    answer = {
        "markers": [
            {
                "producer_id": 42,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "error_code": 0},
                            {"partition_index": 2, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)},
                        ],
                    }
                ],
            }
        ]
    }
    out = sent(27, version, txn_markers.response(answer))
    parts = out.markers[0].topics[0].partitions
    assert out.markers[0].producer_id == 42
    assert [(p.partition_index, p.error_code) for p in parts] == [(0, 0), (2, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))]
    error = txn_markers.error_response(markers_request(), version, KafkaError("no", ErrorCode.INVALID_REQUEST))
    assert [p.error_code for p in sent(27, version, error).markers[0].topics[0].partitions] == [42, 42]


def test_a_read_committed_fetch_carries_the_lso_and_the_aborted_list() -> None:
    img = image()
    ask = fetch.read_request(received(1, 12, fetch_request(12, isolation=1)), 12, img)
    assert ask.body["isolation_level"] == 1
    part = {
        "partition": 0, "error_code": 0, "high_watermark": 20, "last_stable_offset": 12, "log_start_offset": 0,
        "records": b"", "diverging_epoch": None, "aborted_transactions": [{"producer_id": 5, "first_offset": 3}],
    }  # fmt: skip
    answer = {"topics": [{"name": "t", "partitions": [part, {**part, "partition": 1}, {**part, "partition": 2}]}]}
    p0 = sent(1, 12, fetch.fetch_response(ask, answer, img, "PLAINTEXT")).responses[0].partitions[0]
    assert (p0.high_watermark, p0.last_stable_offset) == (20, 12)
    assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(5, 3)]
    plain = fetch.read_request(received(1, 12, fetch_request(12, isolation=0)), 12, img)
    assert plain.body["isolation_level"] == 0
    p0 = sent(1, 12, fetch.fetch_response(plain, answer, img, "PLAINTEXT")).responses[0].partitions[0]
    assert p0.aborted_transactions is None


def test_list_offsets_passes_the_isolation_level() -> None:
    request = list_offsets_request([-1])  # isolation_level 1
    assert offsets.read_list_offsets(received(2, 7, request), 7).body["isolation_level"] == 1
    request.isolation_level = 0
    assert offsets.read_list_offsets(received(2, 7, request), 7).body["isolation_level"] == 0


def test_describe_producers_reports_an_open_transaction() -> None:
    part = producers.producers_partition(0, None, [(9, 1, 4, 100, 7, 55), (3, 0, 2, 50)])
    by_id = {p.producer_id: p for p in part.active_producers}
    assert (by_id[9].coordinator_epoch, by_id[9].current_txn_start_offset) == (7, 55)
    assert (by_id[3].coordinator_epoch, by_id[3].current_txn_start_offset) == (-1, -1)
