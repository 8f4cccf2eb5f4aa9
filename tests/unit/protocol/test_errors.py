"""Kafka error codes keep Kafka's numbers and travel through to_dict/from_dict intact."""

from __future__ import annotations

from kraftpy.protocol.errors import CrcMismatchError, ErrorCode, KafkaError


def test_numbers_match_kafka() -> None:
    # A few anchors from Kafka's Errors.java; a renumbering would break wire compatibility.
    assert ErrorCode.NONE == 0
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.TOPIC_ALREADY_EXISTS == 36
    assert ErrorCode.NOT_CONTROLLER == 41
    assert ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER == 45
    assert ErrorCode.FENCED_LEADER_EPOCH == 74
    assert ErrorCode.UNKNOWN_LEADER_EPOCH == 75


def test_round_trip_keeps_code_message_and_details() -> None:
    err = KafkaError("controller moved", ErrorCode.NOT_CONTROLLER, leader_id=2)
    back = KafkaError.from_dict(err.to_dict())
    assert back.code is ErrorCode.NOT_CONTROLLER
    assert back.message == "controller moved"
    assert back.details == {"leader_id": 2}
    assert str(back) == "NOT_CONTROLLER: controller moved"
    assert back.retriable


def test_unknown_code_from_peer_maps_to_unknown_server_error() -> None:
    assert KafkaError.from_dict({"error_code": 9999, "message": "x"}).code is ErrorCode.UNKNOWN_SERVER_ERROR


def test_corrupt_errors_name_their_position() -> None:
    err = CrcMismatchError("bad crc", 128)
    assert err.code is ErrorCode.CORRUPT_MESSAGE
    assert err.position == 128
    assert "at position 128" in str(err)
