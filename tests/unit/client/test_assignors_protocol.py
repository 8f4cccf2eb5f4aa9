"""The consumer protocol's encoding (what JoinGroup/SyncGroup carry); choosing assignors and the rebalance protocol."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.client.group.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    StickyAssignor,
    common_protocol,
    make_assignors,
)
from kraftpy.protocol.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    subscribed_topics,
)
from kraftpy.protocol.types import TopicPartition

partitions = st.lists(
    st.builds(TopicPartition, st.text(min_size=1, max_size=5), st.integers(0, 2**31 - 1)), max_size=8, unique=True
).map(lambda tps: tuple(sorted(tps)))


@given(
    topics=st.lists(st.text(max_size=6), max_size=5).map(lambda t: tuple(sorted(set(t)))),
    user_data=st.one_of(st.none(), st.binary(max_size=16)),
    owned=partitions,
    generation=st.integers(-1, 2**31 - 1),
    rack=st.one_of(st.none(), st.text(max_size=4)),
)
def test_subscriptions_round_trip(topics, user_data, owned, generation, rack) -> None:
    subscription = Subscription(topics, user_data, owned, generation, rack)
    assert decode_subscription(encode_subscription(subscription)) == subscription
    assert subscribed_topics(encode_subscription(subscription)) == frozenset(topics)


@given(owned=partitions, user_data=st.one_of(st.none(), st.binary(max_size=16)))
def test_assignments_round_trip(owned, user_data) -> None:
    assignment = Assignment(owned, user_data)
    assert decode_assignment(encode_assignment(assignment)) == assignment


def test_an_empty_assignment_is_the_empty_byte_string_the_coordinator_fills_in() -> None:
    assert decode_assignment(b"") == Assignment()


# Kafka's layout, written out by hand so the codec is checked against the schema and not against itself.
def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def _array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def _topic_partitions(topic: str, parts: list[int]) -> bytes:
    return _str(topic) + _array([struct.pack(">i", p) for p in parts])


def test_a_subscription_is_kafkas_consumer_protocol_v3_byte_for_byte() -> None:
    subscription = Subscription(("a", "b"), b"u", (TopicPartition("a", 1), TopicPartition("a", 0)), 7, "rack-1")
    expected = (
        struct.pack(">h", 3)
        + _array([_str("a"), _str("b")])
        + _bytes(b"u")
        + _array([_topic_partitions("a", [0, 1])])
        + struct.pack(">i", 7)
        + _str("rack-1")
    )
    assert encode_subscription(subscription) == expected


def test_an_assignment_is_kafkas_consumer_protocol_v3_byte_for_byte() -> None:
    assignment = Assignment((TopicPartition("t", 2), TopicPartition("s", 0)), None)
    expected = struct.pack(">h", 3) + _array([_topic_partitions("s", [0]), _topic_partitions("t", [2])]) + _bytes(None)
    assert encode_assignment(assignment) == expected


def test_what_older_kafka_clients_send_decodes_with_kafkas_defaults() -> None:
    # v0 is what kafkajs and kafka-python's default assignors send: topics and user data only.
    v0 = struct.pack(">h", 0) + _array([_str("t")]) + _bytes(b"")
    assert decode_subscription(v0) == Subscription(("t",), b"", (), -1, None)
    v1 = struct.pack(">h", 1) + _array([_str("t")]) + _bytes(None) + _array([_topic_partitions("t", [3])])
    assert decode_subscription(v1).owned_partitions == (TopicPartition("t", 3),)
    a0 = struct.pack(">h", 0) + _array([_topic_partitions("t", [0, 1])]) + _bytes(None)
    assert decode_assignment(a0).partitions == (TopicPartition("t", 0), TopicPartition("t", 1))


def test_newer_versions_with_extra_fields_still_decode() -> None:
    # Kafka reads a newer version with the newest schema it knows and ignores what follows.
    v3_body = encode_subscription(Subscription(("t",)))[2:]
    data = struct.pack(">h", 9) + v3_body + b"shiny new field"
    assert decode_subscription(data).topics == ("t",)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        struct.pack(">h", -1) + _array([]) + _bytes(None),
        struct.pack(">h", 0) + struct.pack(">i", 5) + _str("t"),
        struct.pack(">h", 0) + struct.pack(">i", 2**31 - 1),
        struct.pack(">h", 0) + struct.pack(">i", -1) + _bytes(None),
        struct.pack(">h", 1) + _array([_str("t")]) + _bytes(None) + _array([_topic_partitions("t", [-1])]),
        struct.pack(">h", 0) + _array([b"\x00\x02\xff\xfe"]) + _bytes(None),
    ],
    ids=[
        "empty",
        "one-byte",
        "negative-version",
        "short-array",
        "huge-count",
        "null-topics",
        "negative-partition",
        "not-utf8",
    ],
)
def test_malformed_subscriptions_are_refused_and_the_broker_learns_nothing_from_them(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)
    assert subscribed_topics(data) is None


def test_malformed_assignments_are_refused() -> None:
    for data in (b"\x00", struct.pack(">h", 0) + struct.pack(">i", 1) + _str("t") + struct.pack(">i", 1) + b"\x00"):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(data)


def test_assignors_by_name_and_the_common_rebalance_protocol() -> None:
    default = make_assignors(["range", "cooperative-sticky"])
    assert [a.name for a in default] == ["range", "cooperative-sticky"]
    assert common_protocol(default) is RebalanceProtocol.EAGER  # range is eager-only
    assert common_protocol([CooperativeStickyAssignor()]) is RebalanceProtocol.COOPERATIVE
    assert common_protocol([StickyAssignor(), RangeAssignor()]) is RebalanceProtocol.EAGER
    custom = RangeAssignor()
    assert make_assignors([custom])[0] is custom
    with pytest.raises(ValueError, match="unknown partition assignor"):
        make_assignors(["fastest"])
    with pytest.raises(ValueError, match="unique"):
        make_assignors(["range", "range"])
    with pytest.raises(ValueError, match="at least one"):
        make_assignors([])
