"""Produce responses encoded straight to bytes: the one answer the codec's library does not build.

A broker answers every Produce, and building kafka-python's message objects and
encoding them cost about a tenth of a broker's CPU at a paced load
(docs/perf-kafka-clients.md). This writes the body of ProduceResponse v0-v13
from plain tuples, byte for byte what the library writes for the same values
(tests/unit/protocol/test_kafka_produce_response.py compares them on generated
responses of every version). The codec frames it like any other body
(codec.EncodedBody).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kraftpy.protocol.records.varint import encode_unsigned_varint

# Where fields appear, by version (Kafka's ProduceResponse.json).
LOG_APPEND_TIME_VERSION = 2
LOG_START_OFFSET_VERSION = 5
RECORD_ERRORS_VERSION = 8
FLEXIBLE_VERSION = 9
LEADER_HINT_VERSION = 10  # current_leader and node_endpoints, tagged (KIP-951)
TOPIC_IDS_VERSION = 13

_I32 = struct.Struct(">i")
_PARTITION_V0 = struct.Struct(">ihq")  # index, error_code, base_offset
_I64 = struct.Struct(">q")
_LEADER = struct.Struct(">ii")


class PartitionAnswer(NamedTuple):
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    leader_hint: tuple[int, int] | None = None  # (leader_id, leader_epoch): current_leader, v10+


class TopicAnswer(NamedTuple):
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[PartitionAnswer]


NodeEndpoint = tuple[int, str, int, str | None]  # node_id, host, port, rack


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (encode_unsigned_varint(len(data) + 1) if flexible else struct.pack(">h", len(data))) + data


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(value, flexible)


def _array_length(count: int, flexible: bool) -> bytes:
    return encode_unsigned_varint(count + 1) if flexible else _I32.pack(count)


def _partition(p: PartitionAnswer, version: int, flexible: bool) -> bytes:
    out = _PARTITION_V0.pack(p.index, p.error_code, p.base_offset)
    if version >= LOG_APPEND_TIME_VERSION:
        out += _I64.pack(p.log_append_time_ms)
    if version >= LOG_START_OFFSET_VERSION:
        out += _I64.pack(p.log_start_offset)
    if version >= RECORD_ERRORS_VERSION:
        out += _array_length(0, flexible)  # record_errors: none named
        out += _nullable_string(p.error_message, flexible)
    if flexible:
        if version >= LEADER_HINT_VERSION and p.leader_hint is not None:
            leader = _LEADER.pack(*p.leader_hint) + b"\x00"
            out += b"\x01\x00" + encode_unsigned_varint(len(leader)) + leader  # one tagged field: tag 0, current_leader
        else:
            out += b"\x00"
    return out


def _endpoint(endpoint: NodeEndpoint) -> bytes:
    node_id, host, port, rack = endpoint
    return _I32.pack(node_id) + _string(host, True) + _I32.pack(port) + _nullable_string(rack, True) + b"\x00"


def encode_produce_response(version: int, topics: list[TopicAnswer], node_endpoints: list[NodeEndpoint]) -> bytes:
    """The body of a ProduceResponse of `version` (throttle_time_ms 0), without header or size prefix."""
    flexible = version >= FLEXIBLE_VERSION
    parts = [_array_length(len(topics), flexible)]
    for topic in topics:
        if version >= TOPIC_IDS_VERSION:
            parts.append((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            parts.append(_string(topic.name or "", flexible))
        parts.append(_array_length(len(topic.partitions), flexible))
        parts += [_partition(p, version, flexible) for p in topic.partitions]
        if flexible:
            parts.append(b"\x00")
    if version >= 1:
        parts.append(_I32.pack(0))  # throttle_time_ms
    if flexible:
        if version >= LEADER_HINT_VERSION and node_endpoints:
            field = _array_length(len(node_endpoints), True) + b"".join(_endpoint(e) for e in node_endpoints)
            parts.append(b"\x01\x00" + encode_unsigned_varint(len(field)) + field)
        else:
            parts.append(b"\x00")
    return b"".join(parts)
