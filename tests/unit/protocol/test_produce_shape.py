"""is_light_produce: a Produce frame's elements counted without decoding it, in every version we decode."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.produce import ProduceRequest

from kraftpy.protocol.kafka.apis import PRODUCE, SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, encode_request
from kraftpy.protocol.kafka.produce_shape import is_light_produce

VERSIONS = range(3, SUPPORTED_APIS[PRODUCE].max_version + 1)
Topic = ProduceRequest.TopicProduceData
Partition = Topic.PartitionProduceData


def produce_frame(version: int, partitions_per_topic: list[int], records: bytes = b"r" * 64) -> bytes:
    """A Produce request frame without its size prefix."""
    topics = [
        Topic(
            name=None if version >= 13 else f"topic-{t}",
            topic_id=uuid.uuid4() if version >= 13 else None,
            partition_data=[Partition(index=p, records=records) for p in range(count)],
        )
        for t, count in enumerate(partitions_per_topic)
    ]
    request = ProduceRequest(transactional_id="txn", acks=-1, timeout_ms=1000, topic_data=topics, version=version)
    return encode_request(RequestHeader(PRODUCE, version, 7, "client"), request)[4:]


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    partitions=st.lists(st.integers(min_value=0, max_value=12), max_size=6),
    limit=st.integers(min_value=0, max_value=60),
)
def test_the_count_is_the_decoders(version: int, partitions: list[int], limit: int) -> None:
    frame = produce_frame(version, partitions)
    elements = len(partitions) + sum(partitions)
    assert is_light_produce(frame, limit) == (elements <= limit)
    _, decoded = decode_request(frame)  # what it called light, the decoder reads as that many
    assert [len(t.partition_data) for t in decoded.topic_data] == partitions


def test_large_batches_are_light_and_many_partitions_are_not() -> None:
    assert is_light_produce(produce_frame(9, [2], records=b"x" * (4 << 20)))
    assert not is_light_produce(produce_frame(9, [2_000], records=b""))
    assert not is_light_produce(produce_frame(8, [600, 600], records=b""))


@given(version=st.sampled_from(VERSIONS), cut=st.integers(min_value=1, max_value=200))
def test_a_truncated_or_padded_frame_is_not_light(version: int, cut: int) -> None:
    frame = produce_frame(version, [3])
    assert not is_light_produce(frame[: max(0, len(frame) - cut)])
    assert not is_light_produce(frame + b"\x00")


def test_other_apis_and_refused_versions_are_not_light() -> None:
    frame = produce_frame(9, [1])
    metadata = (3).to_bytes(2, "big") + frame[2:]
    assert not is_light_produce(metadata)
    old = frame[:2] + (2).to_bytes(2, "big") + frame[4:]  # Produce v2: decoded only to be refused
    assert not is_light_produce(old)
