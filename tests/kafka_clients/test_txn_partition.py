"""The partition side of transactions on a real cluster, read by librdkafka (confluent-kafka).

Transactional batches go in through the Kafka listener in raw frames (kraftpy's codec) with producer
ids from InitProducerId, markers through WriteTxnMarkers (api key 27), as a transaction coordinator
would send them. A read_committed consumer must see committed records, never aborted ones, and nothing
at or past an open transaction's first offset (the LSO); a read_uncommitted one sees everything. The
open transaction must survive its partition leader being SIGKILLed and restarted. The test plays the
coordinator itself, so KIP-890's verification (test_txn_verification.py) is off while it runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest, WriteTxnMarkersRequest

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw
from tests.kafka_clients.test_data_protocol import fetch, leader_of, produce

TOPIC = "txn-partition"
TIMEOUT_S = 30
READ_COMMITTED = 1


def restart_with_verification(cluster: LocalCluster, enabled: bool) -> None:
    cluster.ok("cluster", "stop", "--dir", str(cluster.dir))
    cluster.write_setting("transaction_partition_verification_enable", "true" if enabled else "false")
    # After a full restart the first node up leads every partition; the controller would spread them
    # back 10 s later, coordinators with them, under the next test.
    cluster.bring_back()


@pytest.fixture(scope="module", autouse=True)
def without_verification(kafka_cluster: LocalCluster) -> Iterator[None]:
    """Raw transactional batches and hand-sent markers, with no coordinator: Kafka's
    transaction.partition.verification.enable=false; the shared cluster gets it back afterwards."""
    restart_with_verification(kafka_cluster, False)
    try:
        yield
    finally:
        restart_with_verification(kafka_cluster, True)


def call_leader(cluster: LocalCluster, api_key: int, version: int, request: Any) -> Any:
    raw = Raw(leader_of(cluster, TOPIC, 0)[0])
    try:
        return raw.call(api_key, version, request)
    finally:
        raw.close()


def new_producer_id(cluster: LocalCluster) -> tuple[int, int]:
    answer = call_leader(cluster, 22, 4, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000))
    assert answer.error_code == 0
    return answer.producer_id, answer.producer_epoch


def write(cluster: LocalCluster, values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1) -> int:
    records = build_batch(
        [(b"k", v, (), 1_700_000_000_000) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=pid >= 0,
    )

    def answered() -> Any:
        part = call_leader(cluster, 0, 9, produce(TOPIC, records)).responses[0].partition_responses[0]
        # A refused batch appended nothing: sent again while the new leader still opens its log.
        return None if part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER else part

    part = wait_for("the partition's leader to take the batch", answered, timeout_s=30)
    assert part.error_code == 0, part
    return part.base_offset


def marker(cluster: LocalCluster, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest(
        markers=[
            M(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[M.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )
    answer = call_leader(cluster, 27, 1, request)
    return answer.markers[0].topics[0].partitions[0].error_code


def latest(cluster: LocalCluster, isolation_level: int) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[T(name=TOPIC, partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
    )
    p = call_leader(cluster, 2, 7, request).topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def consume(cluster: LocalCluster, isolation: str, until: int) -> list[bytes]:
    """Every value a fresh consumer reads below offset `until` (bounded wait), in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"txn-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 15
        position = 0
        while time.monotonic() < deadline and position < until:
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                values.append(m.value())
            positions = consumer.position([TopicPartition(TOPIC, 0)])
            position = max(position, positions[0].offset)
    finally:
        consumer.close()
    return values


def open_txn_start(cluster: LocalCluster, pid: int) -> int:
    T = DescribeProducersRequest.TopicRequest
    answer = call_leader(cluster, 61, 0, DescribeProducersRequest(topics=[T(name=TOPIC, partition_indexes=[0])]))
    active = answer.topics[0].partitions[0].active_producers
    return next(p.current_txn_start_offset for p in active if p.producer_id == pid)


def test_read_committed_sees_committed_data_only_and_an_open_txn_survives_its_leader(
    kafka_cluster: LocalCluster,
) -> None:
    kafka_cluster.ok(
        "topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    (committer, ce), (aborter, ae), (opener, oe) = (new_producer_id(kafka_cluster) for _ in range(3))
    write(kafka_cluster, [b"c1", b"c2"], committer, ce, 0)
    write(kafka_cluster, [b"a1"], aborter, ae, 0)
    assert marker(kafka_cluster, committer, ce, commit=True) == 0
    write(kafka_cluster, [b"a2"], aborter, ae, 1)
    assert marker(kafka_cluster, aborter, ae, commit=False) == 0
    write(kafka_cluster, [b"plain1"])
    open_first = write(kafka_cluster, [b"open1"], opener, oe, 0)
    write(kafka_cluster, [b"plain2"])
    end = latest(kafka_cluster, 0)
    assert latest(kafka_cluster, READ_COMMITTED) == open_first  # the LSO stops at the open transaction
    assert open_txn_start(kafka_cluster, opener) == open_first

    assert consume(kafka_cluster, "read_uncommitted", end) == [
        b"c1", b"c2", b"a1", b"a2", b"plain1", b"open1", b"plain2"
    ]  # fmt: skip
    assert consume(kafka_cluster, "read_committed", open_first) == [b"c1", b"c2", b"plain1"]
    assert marker(kafka_cluster, opener, oe, commit=True) == 0
    assert latest(kafka_cluster, READ_COMMITTED) == latest(kafka_cluster, 0)  # nothing open: LSO = HW

    # A stale producer epoch and a stale coordinator are refused, as Kafka's producer state refuses them.
    stale, _ = new_producer_id(kafka_cluster)
    write(kafka_cluster, [b"open2"], stale, 1, 0)  # the partition now knows epoch 1 of this id
    assert marker(kafka_cluster, stale, 0, commit=True) == int(ErrorCode.INVALID_PRODUCER_EPOCH)
    assert marker(kafka_cluster, stale, 1, commit=False, coordinator_epoch=5) == 0
    assert marker(kafka_cluster, stale, 1, commit=False, coordinator_epoch=4) == int(
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    )

    # An open transaction survives its SIGKILLed leader (the new leader has it from replication) and the
    # old leader's restart (it rebuilds it from its producer snapshot and log), leading again.
    pid, epoch = new_producer_id(kafka_cluster)
    held = write(kafka_cluster, [b"held"], pid, epoch, 0)
    write(kafka_cluster, [b"after-held"])
    assert latest(kafka_cluster, READ_COMMITTED) == held
    described = kafka_cluster.describe(TOPIC)["partitions"][0]
    old_leader = described["leader"]
    kafka_cluster.kill(old_leader)
    try:
        wait_for("a new leader", lambda: _leader(kafka_cluster) not in (old_leader, -1) or None, timeout_s=TIMEOUT_S)
        assert wait_for("the new leader's LSO", lambda: _lso_or_none(kafka_cluster), timeout_s=TIMEOUT_S) == held
    finally:
        kafka_cluster.bring_back()  # back in the ISR, and leading again where it is the preferred replica
    assert old_leader in kafka_cluster.describe(TOPIC)["partitions"][0]["isr"]
    assert wait_for("the LSO", lambda: _lso_or_none(kafka_cluster), timeout_s=TIMEOUT_S) == held
    assert open_txn_start(kafka_cluster, pid) == held
    assert consume(kafka_cluster, "read_committed", held) == [b"c1", b"c2", b"plain1", b"open1", b"plain2"]
    # A read_committed long poll parked at the LSO is woken when the marker moves it (delayed fetch).
    poller = Raw(leader_of(kafka_cluster, TOPIC, 0)[0])
    woken: list[Any] = []
    try:
        header = poller.send(1, 12, fetch(TOPIC, held, max_wait_ms=20_000, isolation_level=READ_COMMITTED))
        thread = threading.Thread(target=lambda: woken.append(poller.read(header)))
        thread.start()
        assert marker(kafka_cluster, pid, epoch, commit=True) == 0
        thread.join(TIMEOUT_S)
    finally:
        poller.close()
    polled = woken[0].responses[0].partitions[0]
    data = [r.value for b in decode_batches(polled.records) if not b.is_control for r in b.records]
    assert data == [b"held", b"after-held"]
    assert polled.last_stable_offset > held  # answered once the marker moved the LSO, not before
    assert polled.aborted_transactions == []
    after = latest(kafka_cluster, 0)
    assert latest(kafka_cluster, READ_COMMITTED) == after
    committed = consume(kafka_cluster, "read_committed", after)
    assert committed == [b"c1", b"c2", b"plain1", b"open1", b"plain2", b"held", b"after-held"]


def _leader(cluster: LocalCluster) -> int:
    return cluster.describe(TOPIC)["partitions"][0]["leader"]


def _lso_or_none(cluster: LocalCluster) -> int | None:
    try:
        return latest(cluster, READ_COMMITTED)
    except (AssertionError, OSError, ConnectionError):
        return None
