"""Kafka frames to typed messages and back: the one seam between a Kafka listener and the codec.

A frame is what follows Kafka's 4-byte size prefix. Requests and responses are
kafka-python 3.x's classes generated from Kafka's message schemas (the choice and
its measurements: docs/kafka-codec.md); only this module names that library, so
it can be swapped; Produce answers come already written (EncodedBody). Hostile
bytes never escape as anything but a KafkaError: CORRUPT_MESSAGE when even the
header is unreadable, UNSUPPORTED_VERSION for an API or version outside
protocol/kafka/apis.py, INVALID_REQUEST for a body that does not parse; the
error's details carry the header fields read so far.
Notes: docs/kafka-codec.md, section "Notes from the code".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.admin.cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import API_VERSIONS, SUPPORTED_APIS

# The library's message classes, by API key: (request class, response class).
_MESSAGES: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    cls_pair[0].API_KEY: cls_pair
    for cls_pair in (
        (ProduceRequest, ProduceResponse),
        (FetchRequest, FetchResponse),
        (ListOffsetsRequest, ListOffsetsResponse),
        (MetadataRequest, MetadataResponse),
        (OffsetCommitRequest, OffsetCommitResponse),
        (OffsetFetchRequest, OffsetFetchResponse),
        (FindCoordinatorRequest, FindCoordinatorResponse),
        (JoinGroupRequest, JoinGroupResponse),
        (HeartbeatRequest, HeartbeatResponse),
        (LeaveGroupRequest, LeaveGroupResponse),
        (SyncGroupRequest, SyncGroupResponse),
        (DescribeGroupsRequest, DescribeGroupsResponse),
        (ListGroupsRequest, ListGroupsResponse),
        (ApiVersionsRequest, ApiVersionsResponse),
        (CreateTopicsRequest, CreateTopicsResponse),
        (DeleteTopicsRequest, DeleteTopicsResponse),
        (DeleteRecordsRequest, DeleteRecordsResponse),
        (InitProducerIdRequest, InitProducerIdResponse),
        (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
        (DescribeConfigsRequest, DescribeConfigsResponse),
        (AlterConfigsRequest, AlterConfigsResponse),
        (DescribeLogDirsRequest, DescribeLogDirsResponse),
        (CreatePartitionsRequest, CreatePartitionsResponse),
        (DeleteGroupsRequest, DeleteGroupsResponse),
        (ElectLeadersRequest, ElectLeadersResponse),
        (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
        (OffsetDeleteRequest, OffsetDeleteResponse),
        (DescribeClusterRequest, DescribeClusterResponse),
        (DescribeProducersRequest, DescribeProducersResponse),
        (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
        (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
        (EndTxnRequest, EndTxnResponse),
        (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
        (DescribeTransactionsRequest, DescribeTransactionsResponse),
        (ListTransactionsRequest, ListTransactionsResponse),
        (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
        (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse),
    )
}

_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_MAX_UVARINT_BYTES = 5


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Kafka's request header (v1, or v2 with tagged fields in flexible versions)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def message_classes(api_key: int) -> tuple[type[ApiMessage], type[ApiMessage]]:
    """The (request, response) classes of an API we serve."""
    return _MESSAGES[api_key]


def is_flexible(api_key: int, api_version: int) -> bool:
    """True when this version uses compact encodings and tagged fields (and header v2 / v1)."""
    return _MESSAGES[api_key][0].flexible_version_q(api_version)


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, ApiMessage]:
    """One request frame (without its size prefix) into its header and body.

    Raises KafkaError only: CORRUPT_MESSAGE, UNSUPPORTED_VERSION or INVALID_REQUEST.
    """
    view = memoryview(frame)
    if len(view) < _HEADER_FIXED.size:
        raise KafkaError(
            f"a request frame of {len(view)} bytes is shorter than a request header", ErrorCode.CORRUPT_MESSAGE
        )
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(view, 0)
    known = {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id}
    api = SUPPORTED_APIS.get(api_key)
    if api is None or not api.supports(api_version):
        what = f"API key {api_key}" if api is None else f"{api.name} v{api_version}"
        raise KafkaError(f"{what} is not supported", ErrorCode.UNSUPPORTED_VERSION, **known)
    request_cls, _ = _MESSAGES[api_key]
    flexible = request_cls.flexible_version_q(api_version)
    try:
        client_id, pos = read_client_id(view, _HEADER_FIXED.size)
        if flexible:
            pos = _skip_tagged_fields(view, pos)
        body = _decode_body(request_cls, api_version, flexible, view, pos, strict_end=False)
    except KafkaError as exc:
        raise KafkaError(exc.message, ErrorCode.INVALID_REQUEST, **known) from None
    except Exception as exc:  # the library's decoder on hostile bytes: any failure means a bad body
        raise KafkaError(
            f"{api.name} v{api_version} request does not parse: {type(exc).__name__}: {exc}",
            ErrorCode.INVALID_REQUEST,
            **known,
        ) from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), body


class EncodedBody(NamedTuple):
    """A response body already in the request's version (produce_response.py writes Produce answers so)."""

    body: bytes


def encode_response(header: RequestHeader, response: ApiMessage | EncodedBody) -> bytes:
    """The size-prefixed response frame answering `header`'s request, in that request's version.

    ApiVersions answers always use response header v0 (KIP-511), so a client
    that does not know our versions yet can read the answer.
    """
    flexible = is_flexible(header.api_key, header.api_version)
    tagged_header = flexible and header.api_key != API_VERSIONS
    head = _INT32.pack(header.correlation_id) + (b"\x00" if tagged_header else b"")
    body = response.body if isinstance(response, EncodedBody) else _encode_body(response, header.api_version)
    return _framed(head, body)


def encode_request(header: RequestHeader, request: ApiMessage) -> bytes:
    """The size-prefixed request frame (for tests and tools that speak to a Kafka listener)."""
    flexible = is_flexible(header.api_key, header.api_version)
    head = _HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id)
    if header.client_id is None:
        head += _INT16.pack(-1)
    else:
        client_id = header.client_id.encode()
        head += _INT16.pack(len(client_id)) + client_id
    if flexible:
        head += b"\x00"
    return _framed(head, _encode_body(request, header.api_version))


def decode_response(header: RequestHeader, frame: bytes | memoryview) -> tuple[int, ApiMessage]:
    """A response frame (without its size prefix) to the request `header`: (correlation_id, body)."""
    view = memoryview(frame)
    _, response_cls = _MESSAGES[header.api_key]
    flexible = response_cls.flexible_version_q(header.api_version)
    try:
        (correlation_id,) = _INT32.unpack_from(view, 0)
        pos = _INT32.size
        if flexible and header.api_key != API_VERSIONS:
            pos = _skip_tagged_fields(view, pos)
        return correlation_id, _decode_body(response_cls, header.api_version, flexible, view, pos)
    except KafkaError as exc:
        raise KafkaError(exc.message, ErrorCode.CORRUPT_MESSAGE) from None
    except Exception as exc:  # as in decode_request
        raise KafkaError(f"response does not parse: {type(exc).__name__}: {exc}", ErrorCode.CORRUPT_MESSAGE) from None


# Schemas that travel inside other messages as opaque bytes: a version int16, then the fields.
_EMBEDDED: dict[str, Any] = {
    "consumer_subscription": ConsumerProtocolSubscription,
    "consumer_assignment": ConsumerProtocolAssignment,
}


def encode_embedded(schema: str, version: int, fields: dict[str, Any]) -> bytes:
    """One embedded schema's bytes (Kafka's ConsumerProtocolSubscription/Assignment), its version first."""
    cls = _EMBEDDED[schema]
    return bytes(cls(version=version, **fields).encode(version=version))


def decode_embedded(schema: str, data: bytes) -> tuple[int, dict[str, Any]]:
    """(version, fields as plain dicts and lists) of one embedded schema's bytes.

    A version above the schema's highest is read as the highest, trailing bytes
    ignored (Kafka's ConsumerProtocol does the same, so newer members can join);
    ValueError for bytes that do not decode.
    """
    cls = _EMBEDDED[schema]
    try:
        message = cls.decode(data)
    except Exception as exc:  # struct.error, ValueError, UnicodeDecodeError...: all mean "not this schema"
        raise ValueError(f"not a {schema} ({type(exc).__name__}: {exc})") from None
    return message.version, message.to_dict(json=False)


def _framed(head: bytes, body: bytes) -> bytes:
    return _INT32.pack(len(head) + len(body)) + head + body


def _encode_body(message: ApiMessage, api_version: int) -> bytes:
    # A decoded message has no header slot set; the library's encode reads it.
    if not hasattr(message, "_header"):
        message._header = None
    return bytes(message.encode(version=api_version))


def _decode_body(
    cls: type[ApiMessage], api_version: int, flexible: bool, view: memoryview, pos: int, *, strict_end: bool = True
) -> Any:
    # The library's compiled decoder, called directly (as its own decode does) for the end position.
    # A body that runs past the frame fails to decode. One that stops short of the frame's end is
    # refused when `strict_end`; a request's is not: Kafka's broker ignores bytes after a request's
    # body (AbstractRequest.parseRequest reads the fields and stops), and librdkafka 2.16 sends some.
    decode = cls._struct.compiled_decode_from(api_version, compact=flexible, tagged=flexible, data_class=cls[None])
    body, end = decode(view, pos)
    if end > len(view) or (strict_end and end != len(view)):
        raise KafkaError(f"the body ends at byte {end} of a {len(view)}-byte frame", ErrorCode.INVALID_REQUEST)
    return body


def read_client_id(view: memoryview, pos: int) -> tuple[str | None, int]:
    if pos + _INT16.size > len(view):
        raise KafkaError("the header ends before its client id", ErrorCode.INVALID_REQUEST)
    (length,) = _INT16.unpack_from(view, pos)
    pos += _INT16.size
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(view):
        raise KafkaError(f"client id length {length} does not fit the frame", ErrorCode.INVALID_REQUEST)
    return str(view[pos : pos + length], "utf-8"), pos + length


def read_uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_UVARINT_BYTES):
        if pos >= len(view):
            raise KafkaError("a varint runs off the end of the frame", ErrorCode.INVALID_REQUEST)
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos
    raise KafkaError("a varint is longer than 5 bytes", ErrorCode.INVALID_REQUEST)


def _skip_tagged_fields(view: memoryview, pos: int) -> int:
    # The header's tagged fields: none are defined for us, so each is skipped by its size.
    count, pos = read_uvarint(view, pos)
    for _ in range(count):
        _, pos = read_uvarint(view, pos)
        size, pos = read_uvarint(view, pos)
        if pos + size > len(view):
            raise KafkaError(f"a tagged field of {size} bytes runs off the end of the frame", ErrorCode.INVALID_REQUEST)
        pos += size
    return pos
