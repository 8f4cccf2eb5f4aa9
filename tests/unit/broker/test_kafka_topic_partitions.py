"""DescribeTopicPartitions (broker/kafka/topic_partitions.py): ELR from the real controller, paging, refusals.

Requests and answers go through the codec at v0, as a client sends and reads
them. The ELR partition comes from the controller's own decisions (the
ControllerHarness, min ISR 2: the fault run of seed 2304); the paging cases
from images built of metadata records.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from kraftpy.broker.kafka import metadata
from kraftpy.broker.kafka.api_versions import api_versions_answer
from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.broker.kafka.topic_partitions import MAX_RESPONSE_PARTITIONS, describe_topic_partitions_response
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener, PartitionRecord, RegisterBrokerRecord, TopicRecord, UnfenceBrokerRecord
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.apis import API_VERSIONS, DESCRIBE_TOPIC_PARTITIONS, METADATA
from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, decode_response, encode_request, encode_response
from kraftpy.protocol.kafka.shell.listener import RequestContext
from kraftpy.protocol.topics import OFFSETS_TOPIC
from tests.unit.metadata.test_controller_elr import cluster, lapse, restart, shrink

NOT_ASKED = -(2**31)  # Kafka's "authorized operations not asked for"
Cursor = DescribeTopicPartitionsRequest.Cursor


def request(names: list[str] = (), limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    """The request as the broker decodes it from a client's v0 frame."""
    sent = DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in names],
        response_partition_limit=limit,
        cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    frame = encode_request(RequestHeader(DESCRIBE_TOPIC_PARTITIONS, 0, 1, "test"), sent)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version) == (DESCRIBE_TOPIC_PARTITIONS, 0)
    return decoded


def answered(response: Any) -> Any:
    """The answer as a client decodes it."""
    header = RequestHeader(DESCRIBE_TOPIC_PARTITIONS, 0, 9, "test")
    correlation_id, decoded = decode_response(header, encode_response(header, response)[4:])
    assert correlation_id == 9
    return decoded


def describe(image: MetadataImage, req: Any, **kwargs: Any) -> Any:
    return answered(describe_topic_partitions_response(image, req, **kwargs))


def image(topics: dict[str, int], *, fenced: tuple[int, ...] = ()) -> MetadataImage:
    """Brokers 1-3 (unfenced unless in `fenced`); each topic's partitions on (1, 2), led by 1."""
    records: list[Any] = []
    for broker_id in (1, 2, 3):
        records.append(
            RegisterBrokerRecord(
                broker_id, f"inc-{broker_id}", broker_id, (Listener("PLAINTEXT", "h", 9091 + broker_id),), None
            )
        )
        if broker_id not in fenced:
            records.append(UnfenceBrokerRecord(broker_id, broker_id))
    for n, (name, count) in enumerate(topics.items()):
        topic_id = uuid.UUID(int=n + 1)
        records.append(TopicRecord(name, topic_id))
        records += [PartitionRecord(topic_id, p, (1, 2), (1, 2), 1) for p in range(count)]
    return apply_records(MetadataImage.EMPTY, records)


def pages(img: MetadataImage, names: list[str], limit: int) -> list[list[tuple[str, int]]]:
    """Every page, following NextCursor from the first request until there is none."""
    out: list[list[tuple[str, int]]] = []
    cursor = None
    while True:
        answer = describe(img, request(names, limit, cursor))
        out.append([(t.name, p.partition_index) for t in answer.topics for p in t.partitions])
        if answer.next_cursor is None:
            return out
        cursor = (answer.next_cursor.topic_name, answer.next_cursor.partition_index)
        assert len(out) < 50, "the cursor does not move"


# --- ELR, leaderless partitions, offline replicas --------------------------------------------------------


def test_a_partition_below_min_isr_shows_its_elr_and_a_leaderless_one_its_last_known_elr() -> None:
    """The controller's own decisions: ISR {3, 1} shrinks to {3} (min ISR 2) when node 1 is fenced, so 1 is
    eligible; then node 3, the last ISR member, restarts uncleanly: no leader, empty ISR, 3 last known."""
    h = cluster((3, 1, 2))
    shrink(h, (3, 1))
    lapse(h, 1)
    (topic,) = describe(h.committed, request(["t"])).topics
    (p,) = topic.partitions
    assert (p.error_code, p.leader_id, p.isr_nodes) == (0, 3, [3])
    assert (p.eligible_leader_replicas, p.last_known_elr) == ([1], [])
    assert (p.replica_nodes, p.offline_replicas) == ([3, 1, 2], [1])  # node 1 is fenced

    restart(h, 3, clean=False)
    (topic,) = describe(h.committed, request(["t"])).topics
    (p,) = topic.partitions
    registration = h.committed.topic("t").partitions[0]
    assert p.error_code == 0  # Kafka's handler: no partition error, leader -1 says it (Metadata differs)
    assert (p.leader_id, p.leader_epoch) == (-1, registration.leader_epoch)
    assert (p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr) == ([], [1], [3])
    assert p.offline_replicas == [1]
    assert (topic.error_code, topic.name, topic.topic_id) == (0, "t", h.committed.topic("t").topic_id)


def test_partitions_read_as_metadata_reads_them() -> None:
    """Leader, epoch, replicas, ISR, offline replicas, errors and the internal flag agree with Metadata's."""
    img = image({"a": 2, OFFSETS_TOPIC: 1}, fenced=(2,))
    ask = metadata.read_request(MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False), 12)
    meta = metadata.metadata_response(img, ask, listener_name="PLAINTEXT", cluster_id="c", controller_id=1)
    ours = describe(img, request())
    fields = ("error_code", "partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes")

    def flat(topics: Any) -> list[tuple[Any, ...]]:
        return [
            (t.name, t.topic_id, t.is_internal, *(getattr(p, f) for f in fields), list(p.offline_replicas))
            for t in topics
            for p in t.partitions
        ]

    assert flat(ours.topics) == flat(meta.topics)
    assert [p.offline_replicas for t in ours.topics for p in t.partitions] == [[2], [2], [2]]


# --- paging -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("names", [[], ["c", "a", "b", "a"]])
def test_a_small_limit_pages_through_every_partition_once_in_order(names: list[str]) -> None:
    img = image({"b": 2, "a": 3, "c": 1})
    assert pages(img, names, 2) == [
        [("a", 0), ("a", 1)],
        [("a", 2), ("b", 0)],
        [("b", 1), ("c", 0)],
    ]


def test_a_page_that_ends_with_a_topic_points_the_cursor_at_the_next_topic() -> None:
    answer = describe(image({"a": 3, "b": 1}), request(limit=3))
    assert [(t.name, len(t.partitions)) for t in answer.topics] == [("a", 3)]
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == ("b", 0)
    last = describe(image({"a": 3, "b": 1}), request(limit=4))
    assert last.next_cursor is None


@pytest.mark.parametrize(("limit", "expected"), [(0, 1), (-1, 1), (-(2**31), 1), (2**31 - 1, 5), (7, 5)])
def test_the_limit_is_at_least_one_partition_and_at_most_the_cap(limit: int, expected: int) -> None:
    answer = describe(image({"a": 9}), request(["a"], limit), max_partitions=5)
    assert len(answer.topics[0].partitions) == expected
    assert answer.next_cursor.partition_index == expected


def test_kafkas_cap_of_2000_partitions_bounds_a_huge_limit() -> None:
    answer = describe(image({"big": MAX_RESPONSE_PARTITIONS + 1}), request(limit=2**31 - 1))
    assert MAX_RESPONSE_PARTITIONS == 2000
    assert len(answer.topics[0].partitions) == 2000
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == ("big", 2000)


def test_a_cursor_past_the_last_partition_gives_the_topic_empty_and_ends() -> None:
    answer = describe(image({"a": 2, "b": 1}), request(["a", "b"], cursor=("a", 2**31 - 1)))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics] == [("a", []), ("b", [0])]
    assert answer.next_cursor is None


def test_an_all_topics_cursor_naming_an_unknown_topic_starts_at_the_next_name() -> None:
    answer = describe(image({"a": 1, "c": 1}), request(cursor=("b", 0)))
    assert [t.name for t in answer.topics] == ["c"]


# --- unknown topics and refusals ------------------------------------------------------------------------


def test_unknown_and_invalid_names_are_answered_and_take_no_room_on_the_page() -> None:
    answer = describe(image({"b": 1, "d": 1}), request(["d", "zz-gone", "A bad name!", "b", "a-gone"], limit=1))
    got = [(t.name, t.error_code, t.topic_id, len(t.partitions)) for t in answer.topics]
    zero = None  # the zero UUID on the wire, as Kafka gives a topic it does not know
    assert got == [
        ("A bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION, zero, 0),
        ("a-gone", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, zero, 0),
        ("b", 0, uuid.UUID(int=1), 1),
    ]
    # The page is full after "b": the next page starts at "d", whose unknown neighbour waits for it.
    assert (answer.next_cursor.topic_name, answer.next_cursor.partition_index) == ("d", 0)


def test_all_topics_lists_no_unknown_topic() -> None:
    answer = describe(image({"a": 1}), request())
    assert [(t.name, t.error_code) for t in answer.topics] == [("a", 0)]


def apis_for(img: MetadataImage) -> BrokerApis:
    node = SimpleNamespace(config=SimpleNamespace(node_id=1), cluster_id="test-cluster")
    return BrokerApis(SimpleNamespace(node=node, metadata=SimpleNamespace(image=img)))


def context() -> RequestContext:
    return RequestContext(RequestHeader(DESCRIBE_TOPIC_PARTITIONS, 0, 1, "test"), "PLAINTEXT", "127.0.0.1", 5000)


@pytest.mark.parametrize(
    ("names", "cursor"),
    [
        (["a", "b"], ("c", 0)),  # the cursor's topic is not among those named
        (["b"], ("a", 0)),  # ... nor after it
        (["a"], ("a", -1)),  # a negative partition
    ],
)
async def test_a_cursor_kafka_refuses_is_an_invalid_request_on_every_topic(
    names: list[str], cursor: tuple[str, int]
) -> None:
    apis = apis_for(image({"a": 1, "b": 1}))
    answer = answered(await apis.handle(context(), request(names, cursor=cursor)))
    assert sorted((t.name, t.error_code, t.partitions) for t in answer.topics) == [
        (n, ErrorCode.INVALID_REQUEST, []) for n in sorted(names)
    ]
    assert answer.next_cursor is None


async def test_an_all_topics_request_with_a_negative_cursor_partition_is_refused_with_no_topics() -> None:
    apis = apis_for(image({"a": 1}))
    answer = answered(await apis.handle(context(), request(cursor=("a", -5))))
    assert (answer.topics, answer.next_cursor) == ([], None)
    assert apis.errors_by_api == {DESCRIBE_TOPIC_PARTITIONS: 1}


# --- authorization and advertising ---------------------------------------------------------------------


def test_every_topic_is_described_internal_ones_flagged_with_authorized_operations_not_asked() -> None:
    """No authorizer on the listener (docs/kafka-listener.md, "Security"): as Metadata, every topic is
    described to everyone, internal topics included, and no authorized operations are reported."""
    answer = describe(image({"a": 1, OFFSETS_TOPIC: 1}), request())
    assert [(t.name, t.is_internal) for t in answer.topics] == [(OFFSETS_TOPIC, True), ("a", False)]
    named = describe(image({"a": 1}), request(["a", "__transaction_state"]))
    assert [(t.name, t.is_internal, t.error_code) for t in named.topics] == [
        ("__transaction_state", True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("a", False, 0),
    ]
    assert {t.topic_authorized_operations for t in [*answer.topics, *named.topics]} == {NOT_ASKED}


def test_the_broker_serves_and_advertises_describe_topic_partitions_v0() -> None:
    apis = apis_for(image({}))
    assert DESCRIBE_TOPIC_PARTITIONS in apis.one_at_a_time_api_keys
    answer = api_versions_answer(None, 0, apis.served)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)
    assert {API_VERSIONS, METADATA} <= set(ranges)
