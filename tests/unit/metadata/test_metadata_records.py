"""Metadata records: CBOR round trips for every type, and clear errors for anything else."""

from __future__ import annotations

import uuid

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.metadata.records import (
    RECORD_TYPES,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    Listener,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterValueRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_record,
    decode_records,
    describe_records,
    encode_record,
    encode_records,
    record_to_list,
)
from kraftpy.protocol.errors import ErrorCode

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small = st.integers(min_value=-1, max_value=10_000)
ids = st.uuids()
text = st.text(max_size=30)
id_lists = st.lists(st.integers(0, 100), max_size=6).map(tuple)

records = st.one_of(
    st.builds(
        RegisterBrokerRecord,
        small,
        text,
        ints,
        st.lists(st.builds(Listener, text, text, st.integers(0, 65535)), max_size=3).map(tuple),
        st.none() | text,
    ),
    st.builds(UnregisterBrokerRecord, small, ints),
    st.builds(TopicRecord, text, ids),
    st.builds(PartitionRecord, ids, small, id_lists, id_lists, small, ints, ints),
    st.builds(
        ConfigRecord,
        st.sampled_from([2, 4]),
        text,
        text,
        st.none() | ints | st.booleans() | text | st.floats(allow_nan=False),
    ),
    st.builds(PartitionChangeRecord, ids, small, st.none() | small, st.none() | id_lists),
    st.builds(FenceBrokerRecord, small, ints),
    st.builds(UnfenceBrokerRecord, small, ints),
    st.builds(RemoveTopicRecord, ids),
    st.builds(ProducerIdsRecord, small, ints, ints),
    st.builds(BrokerRegistrationChangeRecord, small, ints, st.none() | st.booleans(), st.none() | st.booleans()),
    st.just(NoOpRecord()),
    st.builds(RegisterValueRecord, text, ints),
)


@given(records)
def test_every_record_round_trips(record) -> None:
    assert decode_record(encode_record(record)) == record


@given(st.lists(records, max_size=20))
def test_batches_round_trip(batch) -> None:
    assert decode_records(encode_records(batch)) == batch


def test_every_record_type_is_covered_and_ids_are_unique() -> None:
    assert len({cls.TYPE for cls in RECORD_TYPES}) == len(RECORD_TYPES) == 13
    assert RegisterBrokerRecord.TYPE == 0 and PartitionChangeRecord.TYPE == 5 and NoOpRecord.TYPE == 20


def test_wire_form_is_type_version_then_fields() -> None:
    topic_id = uuid.UUID(int=7)
    record = PartitionChangeRecord(topic_id, 3, leader=2, isr=(2, 1))
    assert record_to_list(record) == [5, 1, topic_id.bytes, 3, 2, [2, 1]]
    assert cbor2.loads(encode_record(record)) == [5, 1, topic_id.bytes, 3, 2, [2, 1]]


def _error(data: bytes) -> MetadataRecordError:
    with pytest.raises(MetadataRecordError) as info:
        decode_record(data)
    assert info.value.code == ErrorCode.INVALID_RECORD
    return info.value


def test_unknown_type_is_a_clear_error() -> None:
    assert "unknown metadata record type 99" in str(_error(cbor2.dumps([99, 1])))


def test_unknown_version_is_a_clear_error() -> None:
    error = _error(cbor2.dumps([2, 7, "t", uuid.uuid4().bytes]))
    assert "unsupported version 7 of metadata record TopicRecord" in error.message
    assert "[1]" in error.message


def test_wrong_field_count_and_types_are_clear_errors() -> None:
    assert "has 2 fields, got 1" in _error(cbor2.dumps([2, 1, "t"])).message
    assert "16-byte uuid" in _error(cbor2.dumps([2, 1, "t", b"short"])).message
    assert "expected an integer" in _error(cbor2.dumps([7, 1, "one", 2])).message
    assert "array of integers" in _error(cbor2.dumps([3, 1, uuid.uuid4().bytes, 0, [1, "x"], [1], 1, 0, 0])).message
    assert "expected a boolean" in _error(cbor2.dumps([17, 1, 1, 1, 1, None])).message  # int, not bool
    assert "config value" in _error(cbor2.dumps([4, 1, 2, "t", "k", [1]])).message


def test_garbage_is_a_clear_error() -> None:
    assert "not valid CBOR" in _error(b"\xff\xff").message
    assert "[type, version" in _error(cbor2.dumps({"type": 1})).message
    with pytest.raises(MetadataRecordError, match="CBOR array of records"):
        decode_records(cbor2.dumps(5))


def test_describe_records_counts_types() -> None:
    topic_id = uuid.uuid4()
    batch = [
        TopicRecord("t", topic_id),
        PartitionRecord(topic_id, 0, (1,), (1,), 1),
        PartitionRecord(topic_id, 1, (1,), (1,), 1),
    ]
    assert describe_records(batch) == "Topic x1, Partition x2"
