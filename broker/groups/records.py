"""Records of `__consumer_offsets`: keys and values in CBOR, versioned, after Kafka's GroupMetadataManager.

Design notes: docs/groups.md, section "broker/groups/records.py".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

Record = tuple[bytes, bytes | None]


class GroupRecordError(KafkaError):
    """A record of __consumer_offsets that cannot be decoded: loading must stop, never guess."""

    code = ErrorCode.CORRUPT_MESSAGE


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


RecordKey = OffsetCommitKey | GroupMetadataKey


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata / OffsetCommitValue)."""

    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberRecord, ...]


# --- partitioning ---------------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition whose leader coordinates `group_id` (Kafka's partitionFor)."""
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would overflow).
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- encoding -------------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return cbor2.dumps([OFFSET_COMMIT_KEY_VERSION, key.group, key.topic, key.partition])
    return cbor2.dumps([GROUP_METADATA_KEY_VERSION, key.group])


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    body = {
        "version": OFFSET_COMMIT_VALUE_VERSION,
        "offset": value.offset,
        "leader_epoch": -1 if value.leader_epoch is None else value.leader_epoch,
        "metadata": value.metadata,
        "commit_timestamp": value.commit_timestamp_ms,
    }
    return cbor2.dumps(body, canonical=True)


def encode_group_value(value: GroupMetadataValue) -> bytes:
    body = {
        "version": GROUP_METADATA_VALUE_VERSION,
        "protocol_type": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "current_state_timestamp": -1 if value.current_state_timestamp_ms is None else value.current_state_timestamp_ms,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout": m.rebalance_timeout_ms,
                "session_timeout": m.session_timeout_ms,
                "subscription": m.subscription,
                "assignment": m.assignment,
            }
            for m in value.members
        ],
    }
    return cbor2.dumps(body, canonical=True)


def offset_commit_record(group: str, topic: str, partition: int, value: OffsetAndMetadata) -> Record:
    return encode_key(OffsetCommitKey(group, topic, partition)), encode_offset_value(value)


def group_metadata_record(group: str, value: GroupMetadataValue) -> Record:
    return encode_key(GroupMetadataKey(group)), encode_group_value(value)


def tombstone(key: RecordKey) -> Record:
    return encode_key(key), None


# --- decoding -------------------------------------------------------------------------------------


def _loads(data: bytes, what: str) -> Any:
    try:
        return cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for garbage; all mean the same here
        raise GroupRecordError(f"{what} is not valid CBOR: {exc}") from None


def _get(body: dict[str, Any], name: str, kind: type | tuple[type, ...], what: str, nullable: bool = False) -> Any:
    value = body.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GroupRecordError(f"{what}: field {name!r} is missing or of the wrong type ({value!r:.60})")
    return value


def decode_key(data: bytes) -> RecordKey:
    key = _loads(data, "record key")
    if not isinstance(key, list) or not key or type(key[0]) is not int:
        raise GroupRecordError(f"record key must be a versioned array, got {key!r:.80}")
    version = key[0]
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        if len(key) != 4 or not (isinstance(key[1], str) and isinstance(key[2], str) and type(key[3]) is int):
            raise GroupRecordError(f"offset commit key must be [version, group, topic, partition], got {key!r:.80}")
        return OffsetCommitKey(key[1], key[2], key[3])
    if version == GROUP_METADATA_KEY_VERSION:
        if len(key) != 2 or not isinstance(key[1], str):
            raise GroupRecordError(f"group metadata key must be [version, group], got {key!r:.80}")
        return GroupMetadataKey(key[1])
    raise GroupRecordError(f"unknown record key version {version}")


def _versioned_map(data: bytes, what: str, newest: int) -> dict[str, Any]:
    body = _loads(data, what)
    if not isinstance(body, dict):
        raise GroupRecordError(f"{what} must be a CBOR map")
    version = body.get("version")
    if type(version) is not int or not 0 <= version <= newest:
        raise GroupRecordError(f"{what} has unsupported version {version!r}")
    return body


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    what = "offset commit value"
    body = _versioned_map(data, what, OFFSET_COMMIT_VALUE_VERSION)
    epoch = body.get("leader_epoch", -1)
    if type(epoch) is not int:
        raise GroupRecordError(f"{what}: leader_epoch must be an integer")
    return OffsetAndMetadata(
        offset=_get(body, "offset", int, what),
        leader_epoch=None if epoch < 0 else epoch,
        metadata=_get(body, "metadata", str, what, nullable=True) or "",
        commit_timestamp_ms=_get(body, "commit_timestamp", int, what),
    )


def decode_group_value(data: bytes) -> GroupMetadataValue:
    what = "group metadata value"
    body = _versioned_map(data, what, GROUP_METADATA_VALUE_VERSION)
    raw_members = _get(body, "members", list, what)
    members = []
    for m in raw_members:
        if not isinstance(m, dict):
            raise GroupRecordError(f"{what}: members must be maps")
        members.append(
            MemberRecord(
                member_id=_get(m, "member_id", str, what),
                group_instance_id=_get(m, "group_instance_id", str, what, nullable=True),
                client_id=_get(m, "client_id", str, what),
                client_host=_get(m, "client_host", str, what),
                rebalance_timeout_ms=_get(m, "rebalance_timeout", int, what),
                session_timeout_ms=_get(m, "session_timeout", int, what),
                subscription=_get(m, "subscription", bytes, what),
                assignment=_get(m, "assignment", bytes, what),
            )
        )
    timestamp = _get(body, "current_state_timestamp", int, what, nullable=True)
    return GroupMetadataValue(
        protocol_type=_get(body, "protocol_type", str, what),
        generation=_get(body, "generation", int, what),
        protocol=_get(body, "protocol", str, what, nullable=True),
        leader=_get(body, "leader", str, what, nullable=True),
        current_state_timestamp_ms=None if timestamp is None or timestamp < 0 else timestamp,
        members=tuple(members),
    )


def decode_record(key: bytes, value: bytes | None) -> tuple[RecordKey, OffsetAndMetadata | GroupMetadataValue | None]:
    """One record as read from the log; the value is None for a tombstone."""
    decoded = decode_key(key)
    if value is None:
        return decoded, None
    if isinstance(decoded, OffsetCommitKey):
        return decoded, decode_offset_value(value)
    return decoded, decode_group_value(value)
