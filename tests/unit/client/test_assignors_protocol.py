"""The consumer protocol's encoding (what JoinGroup/SyncGroup carry); choosing assignors and the rebalance protocol."""

from __future__ import annotations

import cbor2
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


def test_newer_versions_with_extra_fields_still_decode() -> None:
    data = cbor2.dumps({"version": 9, "topics": ["t"], "shiny_new_field": [1, 2]})
    assert decode_subscription(data).topics == ("t",)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        cbor2.dumps([1]),
        cbor2.dumps({"topics": ["t"]}),
        cbor2.dumps({"version": 1, "topics": "t"}),
        cbor2.dumps({"version": 1, "topics": ["t"], "owned_partitions": [["t", [-1]]]}),
        cbor2.dumps({"version": 1, "topics": ["t"], "generation_id": "1"}),
    ],
)
def test_malformed_subscriptions_are_refused_and_the_broker_learns_nothing_from_them(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)
    assert subscribed_topics(data) is None


def test_malformed_assignments_are_refused() -> None:
    for data in (b"\x00", cbor2.dumps({"version": 1, "assigned_partitions": [["t", ["x"]]]})):
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
