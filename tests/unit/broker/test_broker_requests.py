"""Request reading and batch checks of the data-plane handlers: every bad field is named, every bad batch typed."""

from __future__ import annotations

import pytest

from kraftpy.broker.api.common import error_fields, group_by_topic, read_partitions
from kraftpy.broker.api.produce import check_producer_batch
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch


def read(body):
    return read_partitions(body, lambda part: part.get("x"))


def test_read_partitions_keeps_order_and_names_the_bad_place() -> None:
    body = {
        "topics": [
            {"name": "a", "partitions": [{"partition": 1, "x": 5}, {"partition": 0}]},
            {"name": "b", "partitions": []},
        ]
    }
    assert read(body) == [("a", 1, 5), ("a", 0, None)]
    cases = {
        "'topics'": {},
        "topics[0] must be a map": {"topics": [3]},
        "topics[0]: missing required field 'name'": {"topics": [{"partitions": []}]},
        "topics[0]: field 'partitions'": {"topics": [{"name": "a", "partitions": {}}]},
        "topics[0].partitions[1]: field 'partition' must be >= 0": {
            "topics": [{"name": "a", "partitions": [{"partition": 0}, {"partition": -2}]}]
        },
        "listed twice": {
            "topics": [{"name": "a", "partitions": [{"partition": 0}]}, {"name": "a", "partitions": [{"partition": 0}]}]
        },
        "is 300 long": {"topics": [{"name": "t" * 300, "partitions": []}]},
    }
    for named, body in cases.items():
        with pytest.raises(KafkaError) as raised:
            read(body)
        assert raised.value.code == ErrorCode.INVALID_REQUEST and named in raised.value.message, raised.value.message


def test_answers_group_by_topic_and_carry_error_names() -> None:
    grouped = group_by_topic([("a", 0, {"v": 1}), ("b", 0, {"v": 2}), ("a", 1, {"v": 3})])
    assert grouped == [
        {"name": "a", "partitions": [{"partition": 0, "v": 1}, {"partition": 1, "v": 3}]},
        {"name": "b", "partitions": [{"partition": 0, "v": 2}]},
    ]
    assert error_fields(ErrorCode.NONE) == {"error_code": 0}
    assert error_fields(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no")["error"] == "NOT_LEADER_OR_FOLLOWER"
    assert error_fields(KafkaError("m", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, leader_id=3))["details"] == {
        "leader_id": 3
    }


def test_producer_batches_are_checked_at_header_level() -> None:
    good = build_batch([(None, b"a"), (None, b"b")])
    segment = 1 << 30
    assert check_producer_batch(good, 1000, segment).records_count == 2
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        check_producer_batch(bytes(flipped), 1000, segment)
    with pytest.raises(CorruptRecordError):
        check_producer_batch(good[:30], 1000, segment)
    expectations = [
        (good + good, 1000, segment, ErrorCode.INVALID_RECORD),
        (good, 20, segment, ErrorCode.MESSAGE_TOO_LARGE),
        (good, 1000, len(good) - 1, ErrorCode.RECORD_LIST_TOO_LARGE),  # a segment could not hold it
        (build_batch([(None, b"c")], is_control=True), 1000, segment, ErrorCode.INVALID_RECORD),
        # A transactional batch needs a producer id and a sequence (a control batch stays refused, above).
        (build_batch([(None, b"t")], is_transactional=True), 1000, segment, ErrorCode.INVALID_RECORD),
        (
            build_batch([(None, b"c")], is_control=True, is_transactional=True, producer_id=1, producer_epoch=0),
            1000,
            segment,
            ErrorCode.INVALID_RECORD,
        ),
    ]
    for records, limit, segment_bytes, code in expectations:
        with pytest.raises(KafkaError) as raised:
            check_producer_batch(records, limit, segment_bytes)
        assert raised.value.code == code
    transactional = build_batch([(None, b"t")], is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    assert check_producer_batch(transactional, 1000, segment).is_transactional
