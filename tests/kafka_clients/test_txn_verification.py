"""KIP-890 part 1 on a real cluster: a partition leader accepts a transactional write only once the
transaction coordinator confirms the partition is in the producer's ongoing transaction.

The misbehaving producer is hand-rolled (kraftpy's codec, kafka-python's message classes): a
transactional batch sent without AddPartitionsToTxn, and a late write arriving after its transaction
committed, perfectly in sequence. Both are refused with INVALID_TXN_STATE, neither opens a
transaction on the partition (the LSO stays at the high watermark), and the late write cannot slip
into the producer's next transaction. The same for a TxnOffsetCommit without AddOffsetsToTxn.
librdkafka's ordinary transactions keep working
(tests/kafka_clients/test_txn_coordinator.py, test_txn_end_to_end.py run with verification on).
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)

from kraftpy.protocol.errors import ErrorCode as E
from kraftpy.protocol.records.batch import build_batch
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw
from tests.kafka_clients.test_data_protocol import leader_of
from tests.kafka_clients.test_groups_clients import find_coordinator
from tests.kafka_clients.test_txn_coordinator import describe, init, txn_coordinator

TOPIC = "txn-verify"
COMMITTED = "txn-verify-offsets"  # the topic whose offsets a transaction commits
TXN_ID = "verify-raw"
Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


def call_leader(cluster: LocalCluster, partition: int, api_key: int, version: int, request: object) -> object:
    raw = Raw(leader_of(cluster, TOPIC, partition)[0])
    try:
        return raw.call(api_key, version, request)
    finally:
        raw.close()


def write(
    cluster: LocalCluster, partition: int, value: bytes, pid: int, epoch: int, seq: int, txn_id: str | None = TXN_ID
) -> int:
    """A transactional batch of one record, sent as a producer would; the partition's error code."""
    records = build_batch(
        [(b"k", value, (), 1_700_000_000_000)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=txn_id, acks=-1, timeout_ms=10_000,
        topic_data=[T(name=TOPIC, partition_data=[T.PartitionProduceData(index=partition, records=records)])],
    )  # fmt: skip
    answer = call_leader(cluster, partition, 0, 9, request)
    return answer.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]


def offsets(cluster: LocalCluster, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) of the partition, from its leader."""
    out = []
    for isolation in (0, 1):
        T = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[T(name=TOPIC, partitions=[T.ListOffsetsPartition(partition_index=partition, timestamp=-1)])],
        )
        p = call_leader(cluster, partition, 2, 7, request).topics[0].partitions[0]  # type: ignore[attr-defined]
        assert p.error_code == 0, p
        out.append(p.offset)
    return out[0], out[1]


def open_txns(cluster: LocalCluster, partition: int) -> list[int]:
    """Producer ids with a transaction open on the partition (DescribeProducers)."""
    T = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest(topics=[T(name=TOPIC, partition_indexes=[partition])])
    answer = call_leader(cluster, partition, 61, 0, request)
    active = answer.topics[0].partitions[0].active_producers  # type: ignore[attr-defined]
    return [p.producer_id for p in active if p.current_txn_start_offset >= 0]


def add(wire: Raw, pid: int, epoch: int, partitions: list[int]) -> None:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[Topic(name=TOPIC, partitions=partitions)],
    )  # fmt: skip
    answer = wire.call(24, 3, request)
    codes = [r.partition_error_code for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition]
    assert codes == [0] * len(partitions), answer


def commit(wire: Raw, pid: int, epoch: int) -> None:
    end = wire.call(
        26, 3, EndTxnRequest(transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True)
    )
    assert end.error_code == 0, end
    wait_for("CompleteCommit", lambda: describe(wire, TXN_ID).transaction_state == "CompleteCommit")


def read_committed(cluster: LocalCluster, partition: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "verify-reader",
            "isolation.level": "read_committed",
        }
    )
    values: list[bytes] = []
    try:
        tp = TopicPartition(TOPIC, partition)
        end = consumer.get_watermark_offsets(tp, timeout=30)[1]  # the LSO for read_committed
        consumer.assign([TopicPartition(TOPIC, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while consumer.position([tp])[0].offset < end and time.monotonic() < deadline:
            values.extend(m.value() for m in consumer.consume(num_messages=100, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    return values


def test_raw_and_late_transactional_writes_are_refused(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok(
        "topics", "create", TOPIC, "--partitions", "2", "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    wire = Raw(txn_coordinator(kafka_cluster, TXN_ID))
    try:
        producer = init(wire, TXN_ID)
        assert producer.error_code == 0
        pid, epoch = producer.producer_id, producer.producer_epoch

        # A raw write: the partition was never added to a transaction.
        assert write(kafka_cluster, 0, b"raw", pid, epoch, 0) == E.INVALID_TXN_STATE
        assert write(kafka_cluster, 0, b"raw", pid, epoch, 0, txn_id=None) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        hw, lso = offsets(kafka_cluster, 0)
        assert (hw, lso) == (0, 0) and open_txns(kafka_cluster, 0) == []

        # A proper transaction on partition 0, committed.
        add(wire, pid, epoch, [0])
        assert write(kafka_cluster, 0, b"t1", pid, epoch, 0) == E.NONE
        commit(wire, pid, epoch)
        hw, lso = wait_for("the marker replicated", lambda: ((o := offsets(kafka_cluster, 0))[0] == o[1] and o) or None)

        # The late write of that transaction (in sequence, same epoch) after the commit: refused, and
        # it opens nothing, so the LSO does not stop at it.
        assert write(kafka_cluster, 0, b"late", pid, epoch, 1) == E.INVALID_TXN_STATE
        assert offsets(kafka_cluster, 0) == (hw, lso) and open_txns(kafka_cluster, 0) == []

        # The producer's next transaction (partition 1 only) cannot take it in either.
        add(wire, pid, epoch, [1])
        assert write(kafka_cluster, 1, b"t2", pid, epoch, 0) == E.NONE
        assert write(kafka_cluster, 0, b"late", pid, epoch, 1) == E.INVALID_TXN_STATE
        commit(wire, pid, epoch)
        assert offsets(kafka_cluster, 0) == (hw, lso) and open_txns(kafka_cluster, 0) == []
        assert read_committed(kafka_cluster, 0) == [b"t1"]
        assert read_committed(kafka_cluster, 1) == [b"t2"]
    finally:
        wire.close()


def txn_offset_commit(wire: Raw, txn_id: str, group: str, pid: int, epoch: int, offset: int) -> int:
    """A TxnOffsetCommit (v3) of `offset` for COMMITTED-0 by the producer; the partition's error code."""
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    P = T.TxnOffsetCommitRequestPartition
    request = TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None,
        topics=[T(name=COMMITTED, partitions=[P(partition_index=0, committed_offset=offset, committed_metadata="")])],
    )  # fmt: skip
    answer = wire.call(28, 3, request)
    return answer.topics[0].partitions[0].error_code  # type: ignore[attr-defined]


def stable_offset(wire: Raw, group: str) -> tuple[int, int]:
    """OffsetFetch v7 with require_stable of COMMITTED-0: (error code, committed offset)."""
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    request = OffsetFetchRequest(group_id=group, topics=[T(name=COMMITTED, partition_indexes=[0])], require_stable=True)
    answer = wire.call(9, 7, request)
    if answer.error_code != 0:  # type: ignore[attr-defined]
        return answer.error_code, -1  # type: ignore[attr-defined]
    p = answer.topics[0].partitions[0]  # type: ignore[attr-defined]
    return p.error_code, p.committed_offset


def test_a_txn_offset_commit_outside_the_transaction_is_refused(kafka_cluster: LocalCluster) -> None:
    """Without AddOffsetsToTxn the commit is refused and leaves no open transaction on
    __consumer_offsets (unverified, it was written as a transactional batch that no marker ever
    ended, and require_stable fetches of the group answered UNSTABLE_OFFSET_COMMIT for ever)."""
    txn_id, group = "verify-offsets", "verify-offsets-group"
    kafka_cluster.ok("topics", "create", COMMITTED, "--partitions", "1", "--replication-factor", "3", "--if-not-exists")
    wire = Raw(txn_coordinator(kafka_cluster, txn_id))
    groups = Raw(find_coordinator(kafka_cluster, group))
    try:
        producer = init(wire, txn_id)
        pid, epoch = producer.producer_id, producer.producer_epoch
        wait_for("the group's offsets partition loaded", lambda: stable_offset(groups, group) == (E.NONE, -1))
        assert txn_offset_commit(groups, txn_id, group, pid, epoch, 5) == E.INVALID_TXN_STATE
        assert stable_offset(groups, group) == (E.NONE, -1)

        # Through the transaction it is accepted, held until the commit, then visible.
        producer_fields = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch}
        added = wire.call(25, 3, AddOffsetsToTxnRequest(group_id=group, **producer_fields))
        assert added.error_code == 0, added
        assert txn_offset_commit(groups, txn_id, group, pid, epoch, 7) == E.NONE
        assert stable_offset(groups, group)[0] == E.UNSTABLE_OFFSET_COMMIT
        end = wire.call(26, 3, EndTxnRequest(committed=True, **producer_fields))
        assert end.error_code == 0, end
        wait_for("the committed offset", lambda: stable_offset(groups, group) == (E.NONE, 7))

        # A late commit of that finished transaction is refused too, and hides nothing. The markers
        # (which made offset 7 visible) go out before the coordinator writes CompleteCommit; until
        # then verification answers CONCURRENT_TRANSACTIONS, which a TxnOffsetCommit gets as the
        # retriable COORDINATOR_NOT_AVAILABLE (NOT_ENOUGH_REPLICAS as on a produce, then Kafka's
        # mapping of a failed offsets write): a client retries. Seen 15 of 15 right after EndTxn.
        wait_for("CompleteCommit", lambda: describe(wire, txn_id).transaction_state == "CompleteCommit")
        assert txn_offset_commit(groups, txn_id, group, pid, epoch, 9) == E.INVALID_TXN_STATE
        assert stable_offset(groups, group) == (E.NONE, 7)
    finally:
        wire.close()
        groups.close()


def node_at(cluster: LocalCluster, address: str) -> int:
    port = int(address.rsplit(":", 1)[1])
    return next(n.node_id for n in cluster.layout().nodes if n.kafka_port == port)


def test_a_txn_offset_commit_the_coordinator_cannot_verify_is_retried_not_aborted(kafka_cluster: LocalCluster) -> None:
    """The transaction coordinator's node dies between AddOffsetsToTxn and TxnOffsetCommit: the group
    coordinator cannot verify the commit. It answers COORDINATOR_NOT_AVAILABLE, as Kafka maps a failed
    offsets write (maybeConvertOffsetCommitError), and the client looks the coordinator up again and
    retries. Before, it passed on the produce path's NOT_ENOUGH_REPLICAS, which librdkafka treats as
    abortable on a TxnOffsetCommit: the transaction was aborted for a coordinator that was only moving.
    Retried, the commit goes through once __transaction_state has a new leader."""
    kafka_cluster.ok("topics", "create", COMMITTED, "--partitions", "1", "--replication-factor", "3", "--if-not-exists")
    group = "verify-unreachable-group"
    group_node = node_at(kafka_cluster, find_coordinator(kafka_cluster, group))
    for txn_id in (f"verify-unreachable-{i}" for i in range(100)):
        address = txn_coordinator(kafka_cluster, txn_id)
        if (txn_node := node_at(kafka_cluster, address)) != group_node:
            break
    else:
        raise AssertionError(f"every transactional id tried is coordinated on node {group_node}, as the group")
    wire = Raw(address)
    groups = Raw(find_coordinator(kafka_cluster, group))
    killed = False
    try:
        producer = init(wire, txn_id)
        pid, epoch = producer.producer_id, producer.producer_epoch
        fields = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch}
        added = wire.call(25, 3, AddOffsetsToTxnRequest(group_id=group, **fields))
        assert added.error_code == 0, added
        wire.close()
        kafka_cluster.kill(txn_node)
        killed = True
        # Before its session expires the dead node still leads __transaction_state: unreachable.
        assert txn_offset_commit(groups, txn_id, group, pid, epoch, 11) == E.COORDINATOR_NOT_AVAILABLE

        def retried() -> bool | None:
            code = txn_offset_commit(groups, txn_id, group, pid, epoch, 11)
            assert code in (E.NONE, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS), E(code)
            return code == E.NONE or None

        wait_for("the retried commit verified by the new coordinator", retried, timeout_s=60)
        assert stable_offset(groups, group)[0] == E.UNSTABLE_OFFSET_COMMIT  # held by the open transaction
        moved = groups.call(10, 1, FindCoordinatorRequest(key=txn_id, key_type=1, version=1))  # a live node asked
        wire = Raw(f"{moved.host}:{moved.port}")
        end = wire.call(26, 3, EndTxnRequest(committed=True, **fields))
        assert end.error_code == 0, end
        wait_for("the committed offset", lambda: stable_offset(groups, group) == (E.NONE, 11))
    finally:
        wire.close()
        groups.close()
        if killed:
            kafka_cluster.bring_back()
