"""Records of `__consumer_offsets` in Kafka's layouts: OffsetCommitKey/Value and GroupMetadataKey/Value.

We write key versions 1 and 2 and value version 3 (what Kafka writes) and read value versions 0-4
(4 is the flexible form), so tools that read Kafka's offsets topic read ours.

Design notes: docs/groups.md, section "broker/groups/records.py".
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.fields import I16, I32, I64, FieldReader, byte_string, nullable_string, string

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
NEWEST_OFFSET_COMMIT_VALUE_VERSION = 4
NEWEST_GROUP_METADATA_VALUE_VERSION = 4

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
        return I16.pack(OFFSET_COMMIT_KEY_VERSION) + string(key.group) + string(key.topic) + I32.pack(key.partition)
    return I16.pack(GROUP_METADATA_KEY_VERSION) + string(key.group)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return b"".join(
        (
            I16.pack(OFFSET_COMMIT_VALUE_VERSION),
            I64.pack(value.offset),
            I32.pack(-1 if value.leader_epoch is None else value.leader_epoch),
            string(value.metadata),
            I64.pack(value.commit_timestamp_ms),
        )
    )


def _member(m: MemberRecord) -> bytes:
    return b"".join(
        (
            string(m.member_id),
            nullable_string(m.group_instance_id),
            string(m.client_id),
            string(m.client_host),
            I32.pack(m.rebalance_timeout_ms),
            I32.pack(m.session_timeout_ms),
            byte_string(m.subscription),
            byte_string(m.assignment),
        )
    )


def encode_group_value(value: GroupMetadataValue) -> bytes:
    timestamp = -1 if value.current_state_timestamp_ms is None else value.current_state_timestamp_ms
    return b"".join(
        (
            I16.pack(GROUP_METADATA_VALUE_VERSION),
            string(value.protocol_type),
            I32.pack(value.generation),
            nullable_string(value.protocol),
            nullable_string(value.leader),
            I64.pack(timestamp),
            I32.pack(len(value.members)),
            *(_member(m) for m in value.members),
        )
    )


def offset_commit_record(group: str, topic: str, partition: int, value: OffsetAndMetadata) -> Record:
    return encode_key(OffsetCommitKey(group, topic, partition)), encode_offset_value(value)


def group_metadata_record(group: str, value: GroupMetadataValue) -> Record:
    return encode_key(GroupMetadataKey(group)), encode_group_value(value)


def tombstone(key: RecordKey) -> Record:
    return encode_key(key), None


# --- decoding -------------------------------------------------------------------------------------


def _versioned(data: bytes, what: str, newest: int, first_flexible: int | None = None) -> tuple[int, FieldReader]:
    reader = FieldReader(data, GroupRecordError)
    version = reader.fixed(I16)
    if not 0 <= version <= newest:
        raise GroupRecordError(f"{what} has unsupported version {version}")
    reader.flexible = first_flexible is not None and version >= first_flexible
    return version, reader


def decode_key(data: bytes) -> RecordKey:
    # Kafka's coordinator keys: the leading int16 is the record type (0 and 1: an offset commit, 2: group
    # metadata); 3 and up are KIP-848's consumer-group records, which this coordinator does not write.
    version, reader = _versioned(data, "record key", GROUP_METADATA_KEY_VERSION)
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        return OffsetCommitKey(reader.string(), reader.string(), reader.fixed(I32))
    return GroupMetadataKey(reader.string())


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    version, reader = _versioned(data, "offset commit value", NEWEST_OFFSET_COMMIT_VALUE_VERSION, first_flexible=4)
    offset = reader.fixed(I64)
    epoch = reader.fixed(I32) if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp_ms = reader.fixed(I64)
    if version == 1:
        reader.fixed(I64)  # the expire timestamp of v1: Kafka's retention no longer reads it, nor does ours
    reader.tagged()
    return OffsetAndMetadata(offset, None if epoch < 0 else epoch, metadata, commit_timestamp_ms)


def _read_member(reader: FieldReader, version: int) -> MemberRecord:
    member_id = reader.string()
    instance_id = reader.nullable_string() if version >= 3 else None
    client_id = reader.string()
    client_host = reader.string()
    rebalance_timeout_ms = reader.fixed(I32) if version >= 1 else None
    session_timeout_ms = reader.fixed(I32)
    member = MemberRecord(
        member_id=member_id,
        group_instance_id=instance_id,
        client_id=client_id,
        client_host=client_host,
        # v0 had one timeout for both (Kafka reads it so too).
        rebalance_timeout_ms=session_timeout_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
        session_timeout_ms=session_timeout_ms,
        subscription=reader.byte_string(),
        assignment=reader.byte_string(),
    )
    reader.tagged()
    return member


def decode_group_value(data: bytes) -> GroupMetadataValue:
    what = "group metadata value"
    version, reader = _versioned(data, what, NEWEST_GROUP_METADATA_VALUE_VERSION, first_flexible=4)
    protocol_type = reader.string()
    generation = reader.fixed(I32)
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    timestamp = reader.fixed(I64) if version >= 2 else -1
    count = reader.array_len()
    if count < 0:
        raise GroupRecordError(f"{what}: members is null")
    members = tuple(_read_member(reader, version) for _ in range(count))
    reader.tagged()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=None if timestamp < 0 else timestamp,
        members=members,
    )


def decode_record(key: bytes, value: bytes | None) -> tuple[RecordKey, OffsetAndMetadata | GroupMetadataValue | None]:
    """One record as read from the log; the value is None for a tombstone."""
    decoded = decode_key(key)
    if value is None:
        return decoded, None
    if isinstance(decoded, OffsetCommitKey):
        return decoded, decode_offset_value(value)
    return decoded, decode_group_value(value)
