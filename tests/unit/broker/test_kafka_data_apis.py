"""The data-path Kafka translation (broker/kafka/{produce,fetch,offsets,producers}.py), every version.

Each test builds the request a client would send, passes it through the codec
as the listener receives it, translates it to the route's body, answers with a
route-shaped dict, and encodes and decodes the Kafka response it builds: what
the client reads is checked, field by field, for every version we serve.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from kraftpy.broker.kafka import fetch, metadata, offsets, produce, producers
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import (
    Listener,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

TOPIC_ID = uuid.UUID(int=7)
UNKNOWN_ID = uuid.UUID(int=99)
BATCH = b"\x00" * 61 + b"opaque batch bytes"


def image() -> MetadataImage:
    records: list[MetadataRecord] = []
    for b in (1, 2, 3):
        listeners = (Listener("INTERNAL", "10.0.0.1", 19000 + b), Listener("PLAINTEXT", "127.0.0.1", 9091 + b))
        records += [RegisterBrokerRecord(b, f"inc-{b}", b, listeners, f"rack-{b}"), UnfenceBrokerRecord(b, b)]
    records.append(TopicRecord("t", TOPIC_ID))
    records += [PartitionRecord(TOPIC_ID, p, (1, 2, 3), (1, 2, 3), 1) for p in range(3)]
    return apply_records(MetadataImage.EMPTY, records, offset=len(records) - 1)


def versions(api_key: int, low: int | None = None) -> list[int]:
    r = SUPPORTED_APIS[api_key]
    return list(range(r.min_version if low is None else low, r.max_version + 1))


def received(api_key: int, version: int, request: ApiMessage) -> ApiMessage:
    """The request as the listener decodes it from the client's bytes."""
    header, decoded = decode_request(encode_request(RequestHeader(api_key, version, 11, "client"), request)[4:])
    assert header.api_version == version
    return decoded


def sent(api_key: int, version: int, response: ApiMessage) -> Any:
    """The response as the client decodes it from the bytes we write."""
    header = RequestHeader(api_key, version, 11, "client")
    correlation_id, decoded = decode_response(header, encode_response(header, response)[4:])
    assert correlation_id == 11
    return decoded


NOT_LEADER = {
    "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
    "error": "NOT_LEADER_OR_FOLLOWER",
    "message": "broker 1 does not lead t-1",
    "details": {"leader_id": 2, "leader_epoch": 7, "leader_address": "10.0.0.1:19002"},
}


# --- Produce ------------------------------------------------------------------------------------


def produce_request(version: int, acks: int = -1) -> ProduceRequest:
    Topic = ProduceRequest.TopicProduceData
    Part = Topic.PartitionProduceData
    parts = [Part(index=0, records=BATCH), Part(index=1, records=BATCH)]
    topics = [Topic(name="t", topic_id=TOPIC_ID, partition_data=parts)]
    if version >= 13:
        topics.append(Topic(name=None, topic_id=UNKNOWN_ID, partition_data=[Part(index=0, records=BATCH)]))
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1500, topic_data=topics)


@pytest.mark.parametrize("version", versions(0, low=3))
def test_produce_round_trips_every_served_version(version: int) -> None:
    img = image()
    ask = produce.read_request(received(0, version, produce_request(version)), version, img)
    assert ask.body == {
        "acks": -1,
        "timeout_ms": 1500,
        "topics": [
            {"name": "t", "partitions": [{"partition": 0, "records": BATCH}, {"partition": 1, "records": BATCH}]}
        ],
    }
    answer = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "error_code": 0,
                        "base_offset": 42,
                        "log_start_offset": 3,
                        "log_append_time_ms": 555,
                    },
                    {"partition": 1, **NOT_LEADER, "base_offset": -1, "log_start_offset": -1},
                ],
            }
        ]
    }
    out = sent(0, version, produce.produce_response(ask, answer, version, img, "PLAINTEXT"))
    topic = out.responses[0]
    assert topic.topic_id == TOPIC_ID if version >= 13 else topic.name == "t"
    ok, moved = topic.partition_responses
    assert (ok.index, ok.error_code, ok.base_offset, ok.log_append_time_ms) == (0, 0, 42, 555)
    assert ok.log_start_offset == (3 if version >= 5 else -1)
    assert (moved.index, moved.error_code, moved.base_offset) == (1, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1)
    if version >= 8:
        assert ok.error_message is None and ok.record_errors == []
        assert moved.error_message == "broker 1 does not lead t-1"
    if version >= 10:
        assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 7)
        assert [(n.node_id, n.host, n.port, n.rack) for n in out.node_endpoints] == [(2, "127.0.0.1", 9093, "rack-2")]
    if version >= 13:
        unknown = out.responses[1]
        assert unknown.topic_id == UNKNOWN_ID
        assert [p.error_code for p in unknown.partition_responses] == [int(ErrorCode.UNKNOWN_TOPIC_ID)]


def test_produce_without_a_log_append_time_answers_minus_one() -> None:
    ask = produce.read_request(produce_request(9), 9, image())
    answer = {"topics": [{"name": "t", "partitions": [{"partition": 0, "error_code": 0, "base_offset": 1}]}]}
    out = sent(0, 9, produce.produce_response(ask, answer, 9, image(), "PLAINTEXT"))
    assert out.responses[0].partition_responses[0].log_append_time_ms == -1


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_are_refused_on_every_partition(version: int) -> None:
    ask = produce.read_request(received(0, version, produce_request(version)), version, image())
    assert not produce.needs_route(ask)
    out = sent(0, version, produce.produce_response(ask, None, version, image(), "PLAINTEXT"))
    codes = [p.error_code for t in out.responses for p in t.partition_responses]
    assert codes == [int(ErrorCode.UNSUPPORTED_VERSION)] * 2
    assert produce.has_error(produce.produce_answers(ask, None, version))


@pytest.mark.parametrize("version", versions(0))
def test_produce_error_response_every_version(version: int) -> None:
    request = received(0, version, produce_request(version))
    out = sent(0, version, produce.produce_error(request, version, KafkaError("bad", ErrorCode.INVALID_REQUEST)))
    codes = [p.error_code for t in out.responses for p in t.partition_responses]
    assert codes and set(codes) == {int(ErrorCode.INVALID_REQUEST)}


# --- Fetch ----------------------------------------------------------------------------------------


def fetch_request(version: int, *, replica_id: int = -1, isolation: int = 0, epoch: int = -1) -> FetchRequest:
    Topic = FetchRequest.FetchTopic
    Part = Topic.FetchPartition
    parts = [
        Part(partition=p, current_leader_epoch=4, fetch_offset=10 * p, last_fetched_epoch=-1, log_start_offset=-1,
             partition_max_bytes=1 << 20)
        for p in range(3)
    ]  # fmt: skip
    topics = [Topic(topic="t", topic_id=TOPIC_ID, partitions=parts)]
    if version >= 13:
        topics.append(Topic(topic=None, topic_id=UNKNOWN_ID, partitions=[parts[0]]))
    kwargs: dict[str, Any] = {"replica_id": replica_id}
    if version >= 15:
        kwargs = {"replica_state": FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1)}
    return FetchRequest(
        max_wait_ms=500, min_bytes=1, max_bytes=1 << 24, isolation_level=isolation, session_id=0,
        session_epoch=epoch, topics=topics, forgotten_topics_data=[], rack_id="", **kwargs,
    )  # fmt: skip


FETCH_ANSWER = {
    "topics": [
        {
            "name": "t",
            "partitions": [
                {"partition": 0, "error_code": 0, "high_watermark": 20, "log_start_offset": 2, "records": BATCH,
                 "diverging_epoch": None},
                {"partition": 1, "error_code": 0, "high_watermark": 30, "log_start_offset": 0, "records": b"",
                 "diverging_epoch": {"epoch": 3, "end_offset": 8}},
                {"partition": 2, **NOT_LEADER, "high_watermark": -1, "log_start_offset": -1, "records": b"",
                 "diverging_epoch": None},
            ],
        }
    ]
}  # fmt: skip


@pytest.mark.parametrize("version", versions(1))
@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_round_trips_every_version(version: int, isolation: int) -> None:
    img = image()
    ask = fetch.read_request(received(1, version, fetch_request(version, isolation=isolation)), version, img)
    parts = ask.body["topics"][0]["partitions"]
    assert ask.body["replica_id"] == -1 and ask.body["max_wait_ms"] == 500 and ask.body["min_bytes"] == 1
    assert ask.body["max_bytes"] == 1 << 24
    assert [p["fetch_offset"] for p in parts] == [0, 10, 20]
    assert {p["current_leader_epoch"] for p in parts} == {4 if version >= 9 else -1}
    out = sent(1, version, fetch.fetch_response(ask, FETCH_ANSWER, img, "PLAINTEXT"))
    if version >= 7:
        assert (out.error_code, out.session_id) == (0, 0)
    topic = out.responses[0]
    assert topic.topic_id == TOPIC_ID if version >= 13 else topic.topic == "t"
    p0, p1, p2 = topic.partitions
    assert (p0.partition_index, p0.error_code, p0.high_watermark, p0.last_stable_offset) == (0, 0, 20, 20)
    assert p0.log_start_offset == (2 if version >= 5 else -1)
    assert bytes(p0.records) == BATCH and not p1.records
    assert p0.aborted_transactions == ([] if isolation == 1 else None)
    assert p2.error_code == int(ErrorCode.NOT_LEADER_OR_FOLLOWER) and p2.high_watermark == -1
    if version >= 11:
        assert p0.preferred_read_replica == -1
    if version >= 12:
        assert p0.diverging_epoch is None and p0.current_leader is None
        assert (p1.diverging_epoch.epoch, p1.diverging_epoch.end_offset) == (3, 8)
        assert (p2.current_leader.leader_id, p2.current_leader.leader_epoch) == (2, 7)
    if version >= 13:
        assert [p.error_code for p in out.responses[1].partitions] == [int(ErrorCode.UNKNOWN_TOPIC_ID)]
    if version >= 16:
        assert [(n.node_id, n.port) for n in out.node_endpoints] == [(2, 9093)]


@pytest.mark.parametrize("version", versions(1))
def test_fetch_from_a_replica_is_refused_on_every_partition(version: int) -> None:
    request = received(1, version, fetch_request(version, replica_id=2))
    with pytest.raises(KafkaError) as raised:
        fetch.read_request(request, version, image())
    assert raised.value.code == ErrorCode.INVALID_REQUEST
    out = sent(1, version, fetch.fetch_error(request, version, raised.value))
    if version >= 7:
        assert out.error_code == int(ErrorCode.INVALID_REQUEST)
    codes = [p.error_code for t in out.responses for p in t.partitions]
    assert codes and set(codes) == {int(ErrorCode.INVALID_REQUEST)}


@pytest.mark.parametrize("version", versions(1, low=7))
def test_incremental_fetch_sessions_are_refused_full_ones_served(version: int) -> None:
    for epoch in (0, -1):  # open or close a session: a full fetch, answered without a session
        assert fetch.session_error(received(1, version, fetch_request(version, epoch=epoch)), version) is None
    request = received(1, version, fetch_request(version, epoch=1))
    out = sent(1, version, fetch.session_error(request, version))
    assert (out.error_code, out.session_id, out.responses) == (int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0, [])


def test_a_negative_fetch_offset_is_out_of_range_on_its_partition_only() -> None:
    request = fetch_request(12)
    request.topics[0].partitions[1].fetch_offset = -5
    ask = fetch.read_request(request, 12, image())
    assert [p["partition"] for p in ask.body["topics"][0]["partitions"]] == [0, 2]
    out = fetch.fetch_response(ask, FETCH_ANSWER, image(), "PLAINTEXT")
    assert [p.error_code for p in out.responses[0].partitions] == [
        0,
        int(ErrorCode.OFFSET_OUT_OF_RANGE),
        int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ]


# --- ListOffsets and OffsetForLeaderEpoch ----------------------------------------------------------


def list_offsets_request(timestamps: list[int]) -> ListOffsetsRequest:
    Topic = ListOffsetsRequest.ListOffsetsTopic
    Part = Topic.ListOffsetsPartition
    parts = [Part(partition_index=i, current_leader_epoch=5, timestamp=ts) for i, ts in enumerate(timestamps)]
    return ListOffsetsRequest(
        replica_id=-1, isolation_level=1, topics=[Topic(name="t", partitions=parts)], timeout_ms=0
    )


@pytest.mark.parametrize("version", versions(2))
def test_list_offsets_round_trips_every_version(version: int) -> None:
    timestamps = [-1, -2, 1_700_000_000_000, -3, -4, -5, -6, -7]
    ask = offsets.read_list_offsets(received(2, version, list_offsets_request(timestamps)), version)
    routed = ask.body["topics"][0]["partitions"]
    assert [(p["partition"], p["timestamp"]) for p in routed] == [
        (0, -1),
        (1, -2),
        (2, 1_700_000_000_000),
        (3, -3),  # max-timestamp goes to the route too
        (4, -2),
    ]
    assert {p["current_leader_epoch"] for p in routed} == {5 if version >= 4 else -1}
    answer = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition": 0, "error_code": 0, "timestamp": -1, "offset": 100, "leader_epoch": 5},
                    {"partition": 1, "error_code": 0, "timestamp": -1, "offset": 3, "leader_epoch": 1},
                    {"partition": 2, "error_code": 0, "timestamp": 1_700_000_000_007, "offset": 50, "leader_epoch": 4},
                    {"partition": 3, "error_code": 0, "timestamp": 1_700_000_000_009, "offset": 61, "leader_epoch": 4},
                    {"partition": 4, "error_code": int(ErrorCode.FENCED_LEADER_EPOCH), "offset": -1},
                ],
            }
        ]
    }
    out = sent(2, version, offsets.list_offsets_response(ask, answer))
    got = [(p.partition_index, p.error_code, p.timestamp, p.offset) for p in out.topics[0].partitions]
    assert got == [
        (0, 0, -1, 100),
        (1, 0, -1, 3),
        (2, 0, 1_700_000_000_007, 50),
        (3, 0, 1_700_000_000_009, 61),
        (4, int(ErrorCode.FENCED_LEADER_EPOCH), -1, -1),
        (5, 0, -1, -1),
        (6, 0, -1, -1),
        (7, int(ErrorCode.INVALID_REQUEST), -1, -1),
    ]
    if version >= 4:
        assert [p.leader_epoch for p in out.topics[0].partitions][:3] == [5, 1, 4]
    err = sent(2, version, offsets.list_offsets_error(list_offsets_request([-1]), version, KafkaError("x")))
    assert err.topics[0].partitions[0].error_code == int(ErrorCode.UNKNOWN_SERVER_ERROR)


@pytest.mark.parametrize("version", versions(23))
def test_offset_for_leader_epoch_round_trips_every_version(version: int) -> None:
    Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    Part = Topic.OffsetForLeaderPartition
    request = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[Topic(topic="t", partitions=[Part(partition=0, current_leader_epoch=6, leader_epoch=4)])],
    )
    decoded = received(23, version, request)
    body = offsets.read_offsets_for_epoch(decoded, version)
    assert body["topics"] == [
        {"name": "t", "partitions": [{"partition": 0, "current_leader_epoch": 6, "leader_epoch": 4}]}
    ]
    assert body["replica_id"] == (-1 if version >= 3 else -2)
    answer = {
        "topics": [
            {"name": "t", "partitions": [{"partition": 0, "error_code": 0, "leader_epoch": 4, "end_offset": 77}]}
        ]
    }
    out = sent(23, version, offsets.offsets_for_epoch_response(decoded, answer))
    p = out.topics[0].partitions[0]
    assert (p.partition, p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 4, 77)
    err = sent(
        23, version, offsets.offsets_for_epoch_error(decoded, version, KafkaError("x", ErrorCode.NOT_CONTROLLER))
    )
    assert err.topics[0].partitions[0].error_code == int(ErrorCode.NOT_CONTROLLER)


# --- InitProducerId and DescribeProducers -----------------------------------------------------------


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id_round_trips_every_version(version: int) -> None:
    request = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=12, producer_epoch=3
    )
    body = producers.read_init_producer_id(received(22, version, request), version)
    assert body == {"transactional_id": None, **({"producer_id": 12, "producer_epoch": 3} if version >= 3 else
                                                  {"producer_id": -1, "producer_epoch": -1})}  # fmt: skip
    out = sent(22, version, producers.init_producer_id_response({"producer_id": 12, "producer_epoch": 4}))
    assert (out.error_code, out.producer_id, out.producer_epoch) == (0, 12, 4)
    error = KafkaError("transactions are not supported", ErrorCode.UNSUPPORTED_VERSION)
    out = sent(22, version, producers.init_producer_id_error(request, version, error))
    assert (out.error_code, out.producer_id, out.producer_epoch) == (int(ErrorCode.UNSUPPORTED_VERSION), -1, -1)


def test_describe_producers_round_trips() -> None:
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0, 1])]
    )
    decoded = received(61, 0, request)
    response = producers.describe_producers_response(
        [("t", [producers.producers_partition(0, None, [(9, 1, 41, 1_700_000_000_000), (3, 0, 4, 17)]),
                producers.producers_partition(1, KafkaError("not here", ErrorCode.NOT_LEADER_OR_FOLLOWER))])]
    )  # fmt: skip
    out: DescribeProducersResponse = sent(61, 0, response)
    p0, p1 = out.topics[0].partitions
    assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp) for s in p0.active_producers] == [
        (3, 0, 4, 17),
        (9, 1, 41, 1_700_000_000_000),
    ]
    assert {(s.coordinator_epoch, s.current_txn_start_offset) for s in p0.active_producers} == {(-1, -1)}
    assert (p1.error_code, p1.error_message, p1.active_producers) == (
        int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
        "not here",
        [],
    )
    err = sent(61, 0, producers.describe_producers_error(decoded, 0, KafkaError("x", ErrorCode.BROKER_NOT_AVAILABLE)))
    assert [p.error_code for p in err.topics[0].partitions] == [int(ErrorCode.BROKER_NOT_AVAILABLE)] * 2


# --- Metadata: what every data client asks first ------------------------------------------------------


@pytest.mark.parametrize("version", versions(3))
def test_metadata_with_topics_encodes_in_every_version(version: int) -> None:
    """authorized_operations is a bitfield in the codec: Kafka's 'not asked for' must still encode (v8+)."""
    ask = metadata.MetadataAsk(("t",), (), True)
    response = metadata.metadata_response(image(), ask, listener_name="PLAINTEXT", cluster_id="c", controller_id=1)
    out = sent(3, version, response)
    assert [(p.partition_index, p.leader_id) for p in out.topics[0].partitions] == [(0, 1), (1, 1), (2, 1)]
    assert [(b.node_id, b.port) for b in out.brokers] == [(1, 9092), (2, 9093), (3, 9094)]


def test_a_null_topic_name_before_topic_ids_is_an_invalid_topic() -> None:
    request = produce_request(9)
    request.topic_data[0].name = None
    ask = produce.read_request(request, 9, image())
    out = sent(0, 9, produce.produce_response(ask, None, 9, image(), "PLAINTEXT"))
    assert [p.error_code for p in out.responses[0].partition_responses] == [int(ErrorCode.INVALID_TOPIC_EXCEPTION)] * 2
    fetch_req = fetch_request(12)
    fetch_req.topics[0].topic = None
    answer = fetch.fetch_response(fetch.read_request(fetch_req, 12, image()), None, image(), "PLAINTEXT")
    assert {p.error_code for p in answer.responses[0].partitions} == {int(ErrorCode.INVALID_TOPIC_EXCEPTION)}
