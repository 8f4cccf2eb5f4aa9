"""produce_response.py writes exactly the bytes kafka-python's generated ProduceResponse writes.

Generated answers of every version: names, messages and hosts long enough to
cross the compact encodings' one-byte length (127/128) and with multi-byte UTF-8,
errors with and without a leader hint (current_leader, v10+), node endpoints or
none, topic ids (v13).
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.produce import ProduceResponse

from kraftpy.protocol.kafka.codec import EncodedBody, RequestHeader, decode_response, encode_response
from kraftpy.protocol.kafka.produce_response import (
    LEADER_HINT_VERSION,
    NodeEndpoint,
    PartitionAnswer,
    TopicAnswer,
    encode_produce_response,
)

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(min_size=0, max_size=200)

partitions = st.builds(
    PartitionAnswer,
    INT32,
    st.integers(-(2**15), 2**15 - 1),
    INT64,
    INT64,
    INT64,
    st.none() | TEXT,
    st.none() | st.tuples(INT32, INT32),
)
topics = st.builds(
    TopicAnswer, TEXT, st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)), st.lists(partitions, max_size=4)
)
endpoints = st.lists(st.tuples(INT32, TEXT, INT32, st.none() | TEXT), max_size=3)


def library_bytes(version: int, answers: list[TopicAnswer], nodes: list[NodeEndpoint]) -> bytes:
    responses = []
    for topic in answers:
        parts = []
        for p in topic.partitions:
            out = PartitionResponse(
                index=p.index,
                error_code=p.error_code,
                base_offset=p.base_offset,
                log_append_time_ms=p.log_append_time_ms,
                log_start_offset=p.log_start_offset,
                record_errors=[],
                error_message=p.error_message,
            )
            if version >= LEADER_HINT_VERSION and p.leader_hint is not None:
                out.current_leader = PartitionResponse.LeaderIdAndEpoch(
                    leader_id=p.leader_hint[0], leader_epoch=p.leader_hint[1]
                )
            parts.append(out)
        responses.append(TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=parts))
    node_endpoints = [ProduceResponse.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in nodes]
    response = ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=node_endpoints)
    response._header = None
    return bytes(response.encode(version=version))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 13), st.lists(topics, max_size=3), endpoints)
def test_every_version_is_the_librarys_bytes(version: int, answers: list[TopicAnswer], nodes: list) -> None:
    # Before v8 a partition has no error_message and before v10 no leader hint: the library drops them too.
    assert encode_produce_response(version, answers, nodes) == library_bytes(version, answers, nodes)


@settings(max_examples=50, deadline=None)
@given(st.integers(3, 13), st.lists(topics, min_size=1, max_size=2))
def test_the_framed_answer_decodes_to_the_same_values(version: int, answers: list[TopicAnswer]) -> None:
    header = RequestHeader(0, version, 99, "client")
    body = EncodedBody(encode_produce_response(version, answers, []))
    correlation_id, decoded = decode_response(header, encode_response(header, body)[4:])
    assert correlation_id == 99
    for topic, got in zip(answers, decoded.responses, strict=True):
        if version >= 13:  # the library reads the all-zero id as None
            assert (got.topic_id or uuid.UUID(int=0)) == topic.topic_id
        else:
            assert got.name == topic.name
        assert [(p.index, p.error_code, p.base_offset) for p in got.partition_responses] == [
            (p.index, p.error_code, p.base_offset) for p in topic.partitions
        ]
