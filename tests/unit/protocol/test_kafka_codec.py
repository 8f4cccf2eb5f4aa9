"""The Kafka codec seam (protocol/kafka/codec.py): round trips, a real client's bytes, hostile frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.old import produce as old_produce
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS, is_refused_version
from kraftpy.protocol.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    message_classes,
)

ALL_VERSIONS = [
    (key, version)
    for key, api in sorted(SUPPORTED_APIS.items())
    for version in range(api.min_version, api.max_version + 1)
]

_SIMPLE = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "uuid": st.uuids(),
    "string": st.text(max_size=6),
    "bytes": st.binary(max_size=8),
    "records": st.binary(max_size=32),  # record batches stay opaque bytes here
}


def _field_strategy(field, version: int) -> st.SearchStrategy:
    if field.is_struct_array():
        inner = _struct_strategy(field.array_of, version)
        strategy = st.lists(inner, max_size=2)
    elif field.is_array():
        strategy = st.lists(_SIMPLE.get(field.array_of.type_str, st.just(0)), max_size=3)
    elif field.is_struct():
        strategy = _struct_strategy(field, version)
    else:
        strategy = _SIMPLE.get(field.type_str, st.just(field.default))
    if field.nullable_for_version_q(version):
        strategy = st.none() | strategy
    return strategy


def _struct_strategy(struct_field, version: int) -> st.SearchStrategy:
    fields = {f.name: _field_strategy(f, version) for f in struct_field.fields.values() if f.for_version_q(version)}
    return st.fixed_dictionaries(fields).map(lambda values: struct_field.data_class(version=version, **values))


def _message_strategy(cls: type[ApiMessage], version: int) -> st.SearchStrategy:
    fields = {f.name: _field_strategy(f, version) for f in cls._struct.fields.values() if f.for_version_q(version)}
    return st.fixed_dictionaries(fields).map(lambda values: cls(version=version, **values))


_ROUND_TRIP = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_every_request_version_round_trips(api_key: int, version: int) -> None:
    request_cls, _ = message_classes(api_key)

    @_ROUND_TRIP
    @given(request=_message_strategy(request_cls, version), correlation_id=st.integers(-(2**31), 2**31 - 1))
    def round_trip(request: ApiMessage, correlation_id: int) -> None:
        header = RequestHeader(api_key, version, correlation_id, "client-1")
        frame = encode_request(header, request)
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
        decoded_header, decoded = decode_request(frame[4:])
        assert decoded_header == header
        assert encode_request(decoded_header, decoded) == frame

    round_trip()


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_every_response_version_round_trips(api_key: int, version: int) -> None:
    _, response_cls = message_classes(api_key)
    header = RequestHeader(api_key, version, 42, None)

    @_ROUND_TRIP
    @given(response=_message_strategy(response_cls, version))
    def round_trip(response: ApiMessage) -> None:
        frame = encode_response(header, response)
        correlation_id, decoded = decode_response(header, frame[4:])
        assert correlation_id == 42
        assert encode_response(header, decoded) == frame

    round_trip()


# --- a real client's bytes -------------------------------------------------------------------------------


def _client_frame(request: ApiMessage, correlation_id: int = 7) -> bytes:
    """The frame as kafka-python's client puts it on the wire (size prefix, header, body)."""
    request.with_header(correlation_id=correlation_id, client_id="kafka-python")
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize(
    "request_obj",
    [
        MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="orders")]),
        MetadataRequest[12](topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False),
        ApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3.0.12"),
        ProduceRequest[9](
            transactional_id=None,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="orders",
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(index=2, records=b"\x01" * 70)
                    ],
                )
            ],
        ),
    ],
    ids=["metadata-v1", "metadata-v12", "api-versions-v3", "produce-v9"],
)
def test_kafka_python_client_frames_decode_and_re_encode_to_the_same_bytes(request_obj: ApiMessage) -> None:
    frame = _client_frame(request_obj)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version) == (request_obj.API_KEY, request_obj.API_VERSION)
    assert (header.correlation_id, header.client_id) == (7, "kafka-python")
    assert decoded == request_obj
    assert encode_request(header, decoded) == frame


def test_a_hand_built_api_versions_v3_frame_decodes_field_by_field() -> None:
    # Header v2: key 18, version 3, correlation 1, client id "rdkafka", no tagged fields;
    # body: compact strings "librdkafka" and "2.3.0" (length + 1 as a varint), no tagged fields.
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07rdkafka\x00" + b"\x0blibrdkafka\x062.3.0\x00"
    header, request = decode_request(frame)
    assert header == RequestHeader(18, 3, 1, "rdkafka")
    assert (request.client_software_name, request.client_software_version) == ("librdkafka", "2.3.0")
    assert encode_request(header, request)[4:] == frame


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_decode_and_answer_in_their_own_layout(version: int) -> None:
    # kafka-python's hand-written pre-schema classes: an independent statement of the old layouts.
    old_request = getattr(old_produce, f"ProduceRequest_v{version}")(
        acks=1, timeout_ms=1500, topic_data=[("orders", [(0, b"\x00" * 40)])]
    )
    old_request.with_header(correlation_id=9, client_id="rdkafka")
    header, request = decode_request(bytes(old_request.encode(header=True, framed=True))[4:])
    assert is_refused_version(header.api_key, header.api_version)
    assert (request.acks, request.timeout_ms) == (1, 1500)
    assert request.topic_data[0].partition_data[0].records == b"\x00" * 40

    partition = {"index": 0, "error_code": int(ErrorCode.UNSUPPORTED_VERSION), "base_offset": -1}
    old_fields = [0, int(ErrorCode.UNSUPPORTED_VERSION), -1] + ([-1] if version >= 2 else [])
    old_response = getattr(old_produce, f"ProduceResponse_v{version}")(
        *([[("orders", [tuple(old_fields)])]] + ([0] if version >= 1 else []))
    )
    response = ProduceResponse(
        version=version,
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="orders",
                partition_responses=[
                    ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                        **partition, log_append_time_ms=-1, version=version
                    )
                ],
                version=version,
            )
        ],
        throttle_time_ms=0,
    )
    frame = encode_response(header, response)
    assert frame[4:8] == struct.pack(">i", 9)
    assert frame[8:] == bytes(old_response.encode())


def test_api_versions_responses_use_header_v0_even_when_flexible() -> None:
    # KIP-511: a client reads the answer before it knows our versions, so no tagged-field byte follows
    # the correlation id; the body's error code comes right after it.
    header = RequestHeader(18, 3, 5, "c")
    _, response_cls = message_classes(18)
    response = response_cls(version=3, error_code=int(ErrorCode.UNSUPPORTED_VERSION), api_keys=[], throttle_time_ms=0)
    frame = encode_response(header, response)
    assert frame[4:8] == struct.pack(">i", 5)
    assert frame[8:10] == struct.pack(">h", ErrorCode.UNSUPPORTED_VERSION)
    assert decode_response(header, frame[4:])[1].error_code == ErrorCode.UNSUPPORTED_VERSION


def test_other_flexible_responses_carry_header_v1() -> None:
    header = RequestHeader(3, 12, 5, "c")
    _, response_cls = message_classes(3)
    frame = encode_response(header, response_cls(version=12, throttle_time_ms=7, brokers=[], topics=[]))
    assert frame[4:13] == struct.pack(">i", 5) + b"\x00" + struct.pack(">i", 7)


# --- hostile frames --------------------------------------------------------------------------------------


def _metadata_v12_frame() -> bytes:
    return _client_frame(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="t")]))[4:]


def _code_of(frame: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        decode_request(frame)
    return info.value.code


@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x03\x00\x0c\x00\x00\x00"])
def test_a_frame_shorter_than_a_header_is_a_corrupt_message(frame: bytes) -> None:
    assert _code_of(frame) is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(
    ("api_key", "version"), [(4, 0), (17, 1), (1000, 0), (-1, 0), (18, 5), (1, 3), (3, 14), (0, -1)]
)
def test_an_unknown_api_or_version_is_unsupported_and_keeps_the_correlation_id(api_key: int, version: int) -> None:
    frame = struct.pack(">hhih", api_key, version, 77, -1)
    with pytest.raises(KafkaError) as info:
        decode_request(frame)
    assert info.value.code is ErrorCode.UNSUPPORTED_VERSION
    assert info.value.details == {"api_key": api_key, "api_version": version, "correlation_id": 77}


def test_every_truncation_of_a_real_frame_is_refused_with_a_typed_error() -> None:
    frame = _metadata_v12_frame()
    for end in range(len(frame)):
        assert _code_of(frame[:end]) in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_REQUEST)


def test_bytes_after_a_request_body_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16's all-topics Metadata v13 carries 3 bytes after the body; Kafka reads the fields
    # and ignores the rest (tests/kafka_clients/test_kafka_listener_clients.py).
    rdkafka = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")
    header, request = decode_request(rdkafka)
    assert (header.api_key, header.api_version, header.client_id) == (3, 13, "rdkafka")
    assert request.topics is None and request.allow_auto_topic_creation is False
    assert decode_request(_metadata_v12_frame() + b"\x00")[1] == decode_request(_metadata_v12_frame())[1]


def test_bytes_after_a_response_body_are_refused() -> None:
    header = RequestHeader(18, 0, 1, None)
    frame = encode_response(header, ApiVersionsResponse(error_code=0, api_keys=[]))[4:] + b"\x00"
    with pytest.raises(KafkaError):
        decode_response(header, frame)


def test_a_header_tagged_field_running_off_the_frame_is_an_invalid_request() -> None:
    # ApiVersions v3, client id null, then 1 tagged field (tag 0) claiming 100 bytes.
    frame = struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x00\x64" + b"\x00" * 4
    assert _code_of(frame) is ErrorCode.INVALID_REQUEST


def test_unknown_tagged_fields_in_a_body_are_kept_not_refused() -> None:
    # Kafka skips tagged fields it does not know: ApiVersions v3 body with one unknown tag (99, 2 bytes).
    frame = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00" + b"\x02a\x02b\x01\x63\x02zz"
    header, request = decode_request(frame)
    assert header.api_version == 3
    assert request.client_software_name == "a"


def test_a_negative_string_length_in_a_legacy_header_is_an_invalid_request() -> None:
    assert _code_of(struct.pack(">hhih", 3, 1, 1, -5) + b"\x00" * 8) is ErrorCode.INVALID_REQUEST


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    key_version=st.sampled_from(ALL_VERSIONS),
    tail=st.binary(max_size=64),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
)
def test_garbage_frames_raise_only_kafka_errors(key_version: tuple[int, int], tail: bytes, flips) -> None:
    api_key, version = key_version
    frame = bytearray(struct.pack(">hhih", api_key, version, 1, 3) + b"cli" + tail)
    for position, value in flips:
        if position < len(frame):
            frame[position] = value
    try:
        decode_request(bytes(frame))
    except KafkaError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(position=st.integers(0, 10_000), value=st.integers(0, 255))
def test_a_real_frame_with_one_byte_changed_decodes_or_raises_a_kafka_error(position: int, value: int) -> None:
    frame = bytearray(_metadata_v12_frame())
    frame[position % len(frame)] = value
    try:
        decode_request(bytes(frame))
    except KafkaError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST)
