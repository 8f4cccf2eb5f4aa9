"""`__consumer_offsets` records in Kafka's layouts, checked against bytes written out by hand.

The expected bytes follow Kafka's OffsetCommitKey/Value and GroupMetadataKey/Value schemas field
by field, so a change of layout fails here even where encode and decode would still agree.
"""

from __future__ import annotations

import struct

import pytest

from kraftpy.broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    MemberRecord,
    OffsetAndMetadata,
    OffsetCommitKey,
    decode_record,
    encode_group_value,
    encode_key,
    encode_offset_value,
    tombstone,
)


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def compact(text: str | None) -> bytes:
    """A compact string: unsigned varint length + 1 (0 is null); the lengths here are < 127."""
    return b"\x00" if text is None else bytes([len(text) + 1]) + text.encode()


MEMBER = MemberRecord(
    member_id="m-1",
    group_instance_id="static-1",
    client_id="cid",
    client_host="/127.0.0.1",
    rebalance_timeout_ms=300_000,
    session_timeout_ms=45_000,
    subscription=b"\x00\x03sub",
    assignment=b"asg",
)
GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m-1",
    current_state_timestamp_ms=1_700_000_000_000,
    members=(MEMBER,),
)
GROUP_KEY = encode_key(GroupMetadataKey("g"))


def test_an_offset_commit_key_is_version_1_then_group_topic_partition() -> None:
    key = OffsetCommitKey("g", "orders", 3)
    assert encode_key(key) == b"\x00\x01" + s16("g") + s16("orders") + struct.pack(">i", 3)
    # Version 0 is the same layout (Kafka reads both as an offset commit).
    assert decode_record(b"\x00\x00" + s16("g") + s16("orders") + struct.pack(">i", 3), None) == (key, None)


def test_a_group_metadata_key_is_version_2_then_the_group() -> None:
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x02" + s16("g")


def test_an_offset_commit_value_is_written_as_version_3() -> None:
    value = OffsetAndMetadata(offset=42, leader_epoch=5, metadata="meta", commit_timestamp_ms=1234)
    expected = b"\x00\x03" + struct.pack(">qi", 42, 5) + s16("meta") + struct.pack(">q", 1234)
    assert encode_offset_value(value) == expected
    no_epoch = OffsetAndMetadata(offset=42, leader_epoch=None, metadata="", commit_timestamp_ms=1)
    assert encode_offset_value(no_epoch)[10:14] == struct.pack(">i", -1)


@pytest.mark.parametrize(
    ("body", "epoch"),
    [
        (b"\x00\x00" + struct.pack(">q", 42) + s16("meta") + struct.pack(">q", 1234), None),
        (b"\x00\x01" + struct.pack(">q", 42) + s16("meta") + struct.pack(">qq", 1234, 99), None),
        (b"\x00\x02" + struct.pack(">q", 42) + s16("meta") + struct.pack(">q", 1234), None),
        (b"\x00\x03" + struct.pack(">qi", 42, 5) + s16("meta") + struct.pack(">q", 1234), 5),
        # v4: flexible, compact string and an empty tagged-field section.
        (b"\x00\x04" + struct.pack(">qi", 42, 5) + compact("meta") + struct.pack(">q", 1234) + b"\x00", 5),
    ],
    ids=["v0", "v1-expire", "v2", "v3", "v4-flexible"],
)
def test_every_offset_commit_value_version_kafka_wrote_decodes(body: bytes, epoch: int | None) -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    _, value = decode_record(key, body)
    assert value == OffsetAndMetadata(offset=42, leader_epoch=epoch, metadata="meta", commit_timestamp_ms=1234)


def _member_v3() -> bytes:
    return (
        s16("m-1")
        + s16("static-1")
        + s16("cid")
        + s16("/127.0.0.1")
        + struct.pack(">ii", 300_000, 45_000)
        + struct.pack(">i", 5)
        + b"\x00\x03sub"
        + struct.pack(">i", 3)
        + b"asg"
    )


def test_a_group_metadata_value_is_written_as_version_3() -> None:
    expected = (
        b"\x00\x03"
        + s16("consumer")
        + struct.pack(">i", 7)
        + s16("range")
        + s16("m-1")
        + struct.pack(">q", 1_700_000_000_000)
        + struct.pack(">i", 1)
        + _member_v3()
    )
    assert encode_group_value(GROUP) == expected
    empty = GroupMetadataValue("consumer", 0, None, None, None, ())
    assert encode_group_value(empty) == b"\x00\x03" + s16("consumer") + struct.pack(">ihhqi", 0, -1, -1, -1, 0)


def test_old_and_flexible_group_metadata_versions_decode() -> None:
    key = encode_key(GroupMetadataKey("g"))
    v0 = (
        b"\x00\x00"
        + s16("consumer")
        + struct.pack(">i", 7)
        + s16("range")
        + s16("m-1")
        + struct.pack(">i", 1)
        + s16("m-1")
        + s16("cid")
        + s16("/127.0.0.1")
        + struct.pack(">i", 45_000)  # v0: the session timeout only
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    _, value = decode_record(key, v0)
    (member,) = value.members
    assert (value.generation, value.current_state_timestamp_ms, member.group_instance_id) == (7, None, None)
    assert member.rebalance_timeout_ms == member.session_timeout_ms == 45_000
    v4 = (
        b"\x00\x04"
        + compact("consumer")
        + struct.pack(">i", 7)
        + compact("range")
        + compact("m-1")
        + struct.pack(">q", 1_700_000_000_000)
        + b"\x02"  # one member (compact array: n + 1)
        + compact("m-1")
        + compact("static-1")
        + compact("cid")
        + compact("/127.0.0.1")
        + struct.pack(">ii", 300_000, 45_000)
        + b"\x06\x00\x03sub"  # compact bytes: length + 1
        + b"\x04asg"
        + b"\x01\x05\x02hi"  # one unknown tagged field (tag 5, 2 bytes): skipped, as Kafka does
        + b"\x00"
    )
    assert decode_record(key, v4) == (GroupMetadataKey("g"), GROUP)


def test_records_round_trip_and_a_tombstone_has_no_value() -> None:
    key = GroupMetadataKey("g")
    assert decode_record(encode_key(key), encode_group_value(GROUP)) == (key, GROUP)
    assert decode_record(*tombstone(key)) == (key, None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"", None),
        (b"\x00", None),
        (b"\x00\x03" + s16("g"), None),  # KIP-848 consumer-group records: not ours to read
        (b"\xff\xff" + s16("g"), None),
        (b"\x00\x02\x00\x05ab", None),  # string runs past the end
        (b"\x00\x02\x00\x02\xff\xfe", None),  # not UTF-8
        (b"\x00\x02\xff\xff", None),  # a null group
        (b"\x00\x01" + s16("g") + s16("t"), None),  # no partition
        (b"\x84\x01ag", None),  # the old CBOR layout is not read as Kafka's
        (GROUP_KEY, b"\x00\x05"),
        (GROUP_KEY, b"\x00\x03" + s16("consumer") + struct.pack(">ihhqi", 0, -1, -1, -1, -1)),
        (
            encode_key(GroupMetadataKey("g")),
            b"\x00\x03" + s16("consumer") + struct.pack(">ihhqi", 0, -1, -1, -1, 10**6),
        ),
        (encode_key(OffsetCommitKey("g", "t", 0)), b"\x00\x03" + struct.pack(">q", 1)),
        (encode_key(OffsetCommitKey("g", "t", 0)), b"\x00\x04" + struct.pack(">qi", 1, 0) + b"\xff\xff\xff\xff\xff"),
    ],
)
def test_bytes_that_are_not_a_record_are_refused_with_corrupt_message(key: bytes, value: bytes | None) -> None:
    with pytest.raises(GroupRecordError) as caught:
        decode_record(key, value)
    assert caught.value.code.name == "CORRUPT_MESSAGE"
