"""The data APIs' edges on a real broker, spoken in raw Kafka frames: refusals, acks=0, sessions, long polls.

What clients rarely show: Produce v0-v2 refused, acks=0 answered by silence (or
a closed connection on an error), incremental fetch sessions refused, replica
fetches refused, topic ids (v13), ListOffsets specials, OffsetForLeaderEpoch,
InitProducerId without a transactional id, DescribeProducers.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw

TIMEOUT_S = 30


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> tuple[str, uuid.UUID, int]:
    """(Kafka address of the leader, topic id, leader epoch)."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)])
    # Any live broker answers; a test may have killed the first one (a client does the same).
    servers = cluster.bootstrap_servers.split(",")
    for i, server in enumerate(servers):
        try:
            raw = Raw(server)
        except OSError:
            if i == len(servers) - 1:
                raise
            continue
        try:
            meta = raw.call(3, 12, request)
        finally:
            raw.close()
        break
    t = meta.topics[0]
    p = next(x for x in t.partitions if x.partition_index == partition)
    broker = next(b for b in meta.brokers if b.node_id == p.leader_id)
    return f"{broker.host}:{broker.port}", t.topic_id, p.leader_epoch


def produce(topic: str | None, records: bytes, acks: int = -1, topic_id: uuid.UUID | None = None) -> ProduceRequest:
    Topic = ProduceRequest.TopicProduceData
    part = Topic.PartitionProduceData(index=0, records=records)
    return ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=10_000,
        topic_data=[Topic(name=topic, topic_id=topic_id, partition_data=[part])],
    )  # fmt: skip


def fetch(topic: str, offset: int, *, version: int = 12, max_wait_ms: int = 0, **kw: Any) -> FetchRequest:
    Topic = FetchRequest.FetchTopic
    part = Topic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=-1)
    fields: dict[str, Any] = {"replica_id": -1, "session_id": 0, "session_epoch": -1, "isolation_level": 0}
    fields.update(kw)
    return FetchRequest(
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        topics=[Topic(topic=topic, topic_id=fields.pop("topic_id", None), partitions=[part])],
        forgotten_topics_data=[], rack_id="", **fields,
    )  # fmt: skip


def batch(*values: bytes) -> bytes:
    return build_batch([(b"k", v, (), 1_700_000_000_000) for v in values])


def values_in(records: bytes) -> list[bytes]:
    return [r.value for b in decode_batches(records) for r in b.records]


@pytest.fixture(scope="module")
def topic(kafka_cluster: LocalCluster) -> str:
    kafka_cluster.ok("topics", "create", "raw", "--partitions", "1", "--replication-factor", "3")
    return "raw"


@pytest.fixture
def leader(kafka_cluster: LocalCluster, topic: str) -> Iterator[Raw]:
    raw = Raw(leader_of(kafka_cluster, topic, 0)[0])
    yield raw
    raw.close()


def test_produce_v0_to_v2_are_refused_on_every_partition(leader: Raw, topic: str) -> None:
    for version in (0, 1, 2):
        answer = leader.call(0, version, produce(topic, batch(b"old")))
        assert answer.responses[0].partition_responses[0].error_code == int(ErrorCode.UNSUPPORTED_VERSION)


def test_produce_and_fetch_by_topic_id(kafka_cluster: LocalCluster, leader: Raw, topic: str) -> None:
    _, topic_id, _ = leader_of(kafka_cluster, topic, 0)
    answer = leader.call(0, 13, produce(None, batch(b"by-id"), topic_id=topic_id))
    p = answer.responses[0].partition_responses[0]
    assert (answer.responses[0].topic_id, p.error_code) == (topic_id, 0)
    got = leader.call(1, 13, fetch("", p.base_offset, version=13, topic_id=topic_id))
    assert values_in(got.responses[0].partitions[0].records)[0] == b"by-id"
    unknown = leader.call(0, 13, produce(None, batch(b"x"), topic_id=uuid.uuid4()))
    assert unknown.responses[0].partition_responses[0].error_code == int(ErrorCode.UNKNOWN_TOPIC_ID)


def test_acks_zero_gets_no_answer_and_its_records_are_written(leader: Raw, topic: str) -> None:
    before = leader.call(2, 7, list_offsets(topic, -1)).topics[0].partitions[0].offset
    leader.send(0, 9, produce(topic, batch(b"silent-1", b"silent-2"), acks=0))
    # The next answer on the connection is the next request's: nothing was written for the produce.
    versions = leader.call(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert versions.error_code == 0
    # acks=0 promises nothing about when: the records become readable once the followers have them (HW).
    wait_for(
        "the acks=0 records below the high watermark",
        lambda: leader.call(2, 7, list_offsets(topic, -1)).topics[0].partitions[0].offset >= before + 2,
    )
    got = leader.call(1, 12, fetch(topic, before))
    assert values_in(got.responses[0].partitions[0].records)[:2] == [b"silent-1", b"silent-2"]


def test_acks_zero_with_an_error_closes_the_connection(leader: Raw) -> None:
    leader.send(0, 9, produce("no-such-topic-here", batch(b"lost"), acks=0))
    assert leader.closed_by_peer()


def test_incremental_fetch_sessions_are_refused(leader: Raw, topic: str) -> None:
    full = leader.call(1, 12, fetch(topic, 0, session_id=0, session_epoch=0))
    assert (full.error_code, full.session_id) == (0, 0)  # a new session was asked for: none is given
    incremental = leader.call(1, 12, fetch(topic, 0, session_id=1234, session_epoch=1))
    assert (incremental.error_code, incremental.session_id) == (int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0)
    assert incremental.responses == []


def test_a_replica_fetch_on_the_kafka_listener_is_refused(leader: Raw, topic: str) -> None:
    answer = leader.call(1, 12, fetch(topic, 0, replica_id=2))
    assert answer.error_code == int(ErrorCode.INVALID_REQUEST)
    assert answer.responses[0].partitions[0].error_code == int(ErrorCode.INVALID_REQUEST)
    state = FetchRequest.ReplicaState(replica_id=3, replica_epoch=5)
    answer = leader.call(1, 15, fetch(topic, 0, version=15, replica_state=state, replica_id=-1))
    assert answer.error_code == int(ErrorCode.INVALID_REQUEST)


def test_a_long_poll_is_woken_by_a_produce(kafka_cluster: LocalCluster, leader: Raw, topic: str) -> None:
    end = leader.call(2, 7, list_offsets(topic, -1)).topics[0].partitions[0].offset
    result: list[Any] = []
    poller = Raw(leader_of(kafka_cluster, topic, 0)[0])
    try:
        header = poller.send(1, 12, fetch(topic, end, max_wait_ms=20_000))
        thread = threading.Thread(target=lambda: result.append(poller.read(header)))
        thread.start()
        answer = leader.call(0, 9, produce(topic, batch(b"wake")))
        assert answer.responses[0].partition_responses[0].error_code == 0
        thread.join(TIMEOUT_S)
    finally:
        poller.close()
    p = result[0].responses[0].partitions[0]
    assert values_in(p.records) == [b"wake"]
    assert p.high_watermark == p.last_stable_offset == end + 1


def list_offsets(topic: str, timestamp: int, epoch: int = -1) -> ListOffsetsRequest:
    Topic = ListOffsetsRequest.ListOffsetsTopic
    part = Topic.ListOffsetsPartition(partition_index=0, current_leader_epoch=epoch, timestamp=timestamp)
    return ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[Topic(name=topic, partitions=[part])])


def test_list_offsets_latest_earliest_timestamp_and_the_specials(
    kafka_cluster: LocalCluster, leader: Raw, topic: str
) -> None:
    _, _, epoch = leader_of(kafka_cluster, topic, 0)
    leader.call(0, 9, produce(topic, batch(b"lo")))

    def one(ts: int, version: int = 9, e: int = epoch) -> Any:
        return leader.call(2, version, list_offsets(topic, ts, e)).topics[0].partitions[0]

    latest, earliest = one(-1), one(-2)
    assert latest.error_code == earliest.error_code == 0
    assert earliest.offset == 0 and latest.offset > 0 and latest.leader_epoch == epoch
    assert one(1_700_000_000_000).offset == 0  # every record here carries that CreateTime
    assert one(-4).offset == 0  # earliest local: no tiered storage
    assert one(-5).offset == -1  # latest tiered: nothing is tiered
    largest = one(-3)  # max-timestamp (KIP-734): the first record holding the largest timestamp
    assert (largest.error_code, largest.offset, largest.timestamp) == (0, 0, 1_700_000_000_000)
    assert largest.leader_epoch == epoch
    assert one(-7).error_code == int(ErrorCode.INVALID_REQUEST)  # no such special
    assert one(-1, e=epoch + 1).error_code == int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    assert one(-1, version=1).offset == latest.offset


def test_offset_for_leader_epoch_ends_at_the_log_end(kafka_cluster: LocalCluster, leader: Raw, topic: str) -> None:
    _, _, epoch = leader_of(kafka_cluster, topic, 0)
    leader.call(0, 9, produce(topic, batch(b"e")))
    end = leader.call(2, 7, list_offsets(topic, -1)).topics[0].partitions[0].offset
    Topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    part = Topic.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch, leader_epoch=epoch)
    answer = leader.call(
        23, 4, OffsetForLeaderEpochRequest(replica_id=-1, topics=[Topic(topic=topic, partitions=[part])])
    )
    p = answer.topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, epoch, end)


def test_init_producer_id_idempotent(leader: Raw) -> None:
    ok = leader.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000))
    assert ok.error_code == 0 and ok.producer_id >= 0 and ok.producer_epoch == 0
    # KIP-360's reset names the current id and epoch; as from Kafka, it gets a new id (never a bump of
    # the named one, which would fence whoever holds it).
    reset = leader.call(
        22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                     producer_id=ok.producer_id, producer_epoch=0)
    )  # fmt: skip
    assert reset.error_code == 0 and reset.producer_id not in (-1, ok.producer_id) and reset.producer_epoch == 0
    # With a transactional id: tests/kafka_clients/test_txn_coordinator.py.


def test_describe_producers_lists_an_idempotent_producer(kafka_cluster: LocalCluster, leader: Raw, topic: str) -> None:
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, key=b"k", value=b"idem-%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
    )
    p = leader.call(61, 0, request).topics[0].partitions[0]
    assert p.error_code == 0
    assert any(s.last_sequence >= 4 and s.producer_id >= 0 for s in p.active_producers), p.active_producers
    follower = next(a for a in kafka_cluster.bootstrap_servers.split(",") if a != leader_of(kafka_cluster, topic, 0)[0])
    other = Raw(follower)
    try:
        answer = other.call(61, 0, request).topics[0].partitions[0]
    finally:
        other.close()
    assert answer.error_code == int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_a_retried_idempotent_batch_is_written_once(leader: Raw, topic: str) -> None:
    pid = leader.call(22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000))
    records = build_batch(
        [(b"k", b"once-1", (), 1_700_000_000_000), (b"k", b"once-2", (), 1_700_000_000_000)],
        producer_id=pid.producer_id,
        producer_epoch=pid.producer_epoch,
        base_sequence=0,
    )
    first = leader.call(0, 9, produce(topic, records)).responses[0].partition_responses[0]
    again = leader.call(0, 9, produce(topic, records)).responses[0].partition_responses[0]  # the retry
    assert (first.error_code, again.error_code) == (0, 0)
    assert again.base_offset == first.base_offset
    got = leader.call(1, 12, fetch(topic, first.base_offset))
    assert values_in(got.responses[0].partitions[0].records) == [b"once-1", b"once-2"]


def test_max_bytes_bounds_a_fetch_but_one_batch_always_comes(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok("topics", "create", "bounded", "--partitions", "1", "--replication-factor", "3")
    leader = Raw(leader_of(kafka_cluster, "bounded", 0)[0])
    topic = "bounded"
    # Timestamps of now: batches far older than segment.ms would each roll a segment (as in Kafka), and a
    # fetch reads from one segment.
    for value in (b"a" * 100, b"b" * 100, b"c" * 100):
        answer = leader.call(0, 9, produce(topic, build_batch([(b"k", value)])))
        assert answer.responses[0].partition_responses[0].error_code == 0
    start = 0
    # KIP-74: a fetch bounded below one batch still returns the first whole batch, and only it.
    bounded = fetch(topic, start)
    bounded.max_bytes = 1
    small = leader.call(1, 12, bounded)
    assert values_in(small.responses[0].partitions[0].records) == [b"a" * 100]
    everything = leader.call(1, 12, fetch(topic, start))
    assert values_in(everything.responses[0].partitions[0].records) == [b"a" * 100, b"b" * 100, b"c" * 100]
    leader.close()


def test_a_request_listing_a_partition_twice_is_refused_and_the_connection_serves_on(leader: Raw, topic: str) -> None:
    request = produce(topic, batch(b"twice"))
    request.topic_data[0].partition_data.append(request.topic_data[0].partition_data[0])
    answer = leader.call(0, 9, request)
    assert [p.error_code for p in answer.responses[0].partition_responses] == [int(ErrorCode.INVALID_REQUEST)] * 2
    assert leader.call(0, 9, produce(topic, batch(b"after"))).responses[0].partition_responses[0].error_code == 0


def test_fetch_checks_the_leader_epoch_and_a_follower_points_at_the_leader(
    kafka_cluster: LocalCluster, leader: Raw, topic: str
) -> None:
    address, topic_id, epoch = leader_of(kafka_cluster, topic, 0)
    ahead = fetch(topic, 0)
    ahead.topics[0].partitions[0].current_leader_epoch = epoch + 1
    assert leader.call(1, 12, ahead).responses[0].partitions[0].error_code == int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    follower = Raw(next(a for a in kafka_cluster.bootstrap_servers.split(",") if a != address))
    try:
        answer = follower.call(1, 16, fetch(topic, 0, version=16, topic_id=topic_id))
    finally:
        follower.close()
    p = answer.responses[0].partitions[0]
    assert p.error_code == int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert p.current_leader.leader_epoch == epoch
    [endpoint] = answer.node_endpoints
    assert (endpoint.node_id, f"{endpoint.host}:{endpoint.port}") == (p.current_leader.leader_id, address)
