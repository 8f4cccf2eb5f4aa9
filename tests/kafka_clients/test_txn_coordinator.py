"""The transaction coordinator through the Kafka listener: FindCoordinator(TRANSACTION), InitProducerId,
AddPartitionsToTxn, EndTxn, Describe/ListTransactions by hand (kafka-python's protocol classes) and
confluent-kafka's transactional producer (init_transactions, fencing of a zombie)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError as ClientError
from confluent_kafka import KafkaException, Producer
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from kraftpy.protocol.errors import ErrorCode as E
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw

TIMEOUT_S = 30
Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic


def txn_coordinator(cluster: LocalCluster, txn_id: str, version: int = 1) -> str:
    """host:port of the Kafka listener coordinating `txn_id` (waits for __transaction_state)."""
    kafka_ports = {a.rsplit(":", 1)[1] for a in cluster.bootstrap_servers.split(",")}

    def found():
        wire = Raw(cluster.bootstrap_servers.split(",")[0])
        try:
            if version >= 4:
                request = FindCoordinatorRequest(key_type=1, coordinator_keys=[txn_id], version=version)
                answer = wire.call(10, version, request).coordinators[0]
            else:
                answer = wire.call(10, version, FindCoordinatorRequest(key=txn_id, key_type=1, version=version))
        finally:
            wire.close()
        if answer.error_code == 0:
            assert str(answer.port) in kafka_ports
            return f"{answer.host}:{answer.port}"
        assert answer.error_code in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR), answer
        return None

    return wait_for(f"the coordinator of {txn_id}", found, timeout_s=60)


def init(wire: Raw, txn_id: str, timeout_ms: int = 60_000, version: int = 4, **producer):
    def answered():
        r = wire.call(
            22, version, InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=timeout_ms, **producer)
        )
        # Retriable while __transaction_state's leader is being chosen or loaded (a loaded machine).
        retriable = (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS)
        return None if r.error_code in retriable else r

    return wait_for(f"InitProducerId of {txn_id}", answered)


def describe(wire: Raw, txn_id: str):
    return wire.call(65, 0, DescribeTransactionsRequest(transactional_ids=[txn_id])).transaction_states[0]


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_for_transactions(kafka_cluster: LocalCluster, version: int) -> None:
    address = txn_coordinator(kafka_cluster, f"find-{version}", version)
    assert address in kafka_cluster.bootstrap_servers.split(",")
    assert kafka_cluster.ok("topics", "describe", "__transaction_state").stdout.count("partition") >= 1


def test_init_add_end_by_hand(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok("topics", "create", "txn-hand", "--partitions", "2", "--replication-factor", "3")
    wire = Raw(txn_coordinator(kafka_cluster, "by-hand"))
    try:
        first = init(wire, "by-hand")
        assert (first.error_code, first.producer_epoch) == (0, 0) and first.producer_id >= 0
        again = init(wire, "by-hand")
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
        too_long = wire.call(22, 4, InitProducerIdRequest(transactional_id="by-hand", transaction_timeout_ms=900_001))
        assert too_long.error_code == E.INVALID_TRANSACTION_TIMEOUT
        pid, epoch = again.producer_id, again.producer_epoch
        add = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="by-hand", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[Topic(name="txn-hand", partitions=[0, 1])],
        )  # fmt: skip
        for version in (0, 3):
            answer = wire.call(24, version, add)
            codes = [
                r.partition_error_code for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition
            ]
            assert codes == [0, 0], answer
        unknown = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="by-hand", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[Topic(name="txn-hand", partitions=[0]), Topic(name="no-such", partitions=[0])],
        )  # fmt: skip
        answer = wire.call(24, 3, unknown)
        codes = {t.name: t.results_by_partition[0].partition_error_code for t in answer.results_by_topic_v3_and_below}
        assert codes == {"txn-hand": E.OPERATION_NOT_ATTEMPTED, "no-such": E.UNKNOWN_TOPIC_OR_PARTITION}
        # the old epoch is fenced: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before
        stale = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="by-hand", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[Topic(name="txn-hand", partitions=[0])],
        )  # fmt: skip
        for version, code in ((1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)):
            answer = wire.call(24, version, stale)
            assert answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == code
        state = describe(wire, "by-hand")
        assert (state.error_code, state.transaction_state, state.producer_id) == (0, "Ongoing", pid)
        assert [(t.topic, sorted(t.partitions)) for t in state.topics] == [("txn-hand", [0, 1])]
        listed = wire.call(
            66, 1, ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[], duration_filter=-1)
        )
        assert "by-hand" in [s.transactional_id for s in listed.transaction_states]
        end = wire.call(
            26, 3, EndTxnRequest(transactional_id="by-hand", producer_id=pid, producer_epoch=epoch, committed=False)
        )
        assert end.error_code == 0
        assert describe(wire, "by-hand").transaction_state in ("PrepareAbort", "CompleteAbort")
        here = txn_coordinator(kafka_cluster, "by-hand")
        unknown_here = next(f"nobody-{i}" for i in range(1000) if txn_coordinator(kafka_cluster, f"nobody-{i}") == here)
        assert describe(wire, unknown_here).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    finally:
        wire.close()


def test_not_the_coordinator_answers_not_coordinator(kafka_cluster: LocalCluster) -> None:
    owner = txn_coordinator(kafka_cluster, "elsewhere")
    other = next(a for a in kafka_cluster.bootstrap_servers.split(",") if a != owner)
    wire = Raw(other)
    try:
        answer = wire.call(22, 4, InitProducerIdRequest(transactional_id="elsewhere", transaction_timeout_ms=1000))
        assert answer.error_code == E.NOT_COORDINATOR
    finally:
        wire.close()


def test_confluent_init_transactions_and_zombie_fencing(kafka_cluster: LocalCluster) -> None:
    kafka_cluster.ok("topics", "create", "txn-zombie", "--partitions", "1", "--replication-factor", "3")
    config = {"bootstrap.servers": kafka_cluster.bootstrap_servers, "transactional.id": "zombie-app"}
    old = Producer(config)
    new = Producer(config)
    try:
        old.init_transactions(TIMEOUT_S)
        new.init_transactions(TIMEOUT_S)  # fences `old`
        old.begin_transaction()
        old.produce("txn-zombie", value=b"from a zombie")
        with pytest.raises(KafkaException) as info:
            old.commit_transaction(TIMEOUT_S)
        assert info.value.args[0].fatal() or info.value.args[0].code() in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH)
        # librdkafka also queues the fatal error as an event, and confluent-kafka raises it from whichever
        # poll or flush serves it: usually commit_transaction's own flush, sometimes (when the fencing
        # answer comes after that flush) the next call. Serve it here, so the clean-up below cannot.
        try:
            old.poll(0)
        except KafkaException as queued:
            assert queued.args[0].fatal() and queued.args[0].code() == ClientError._FENCED
        new.begin_transaction()
        new.abort_transaction(TIMEOUT_S)  # nothing produced: nothing to abort on the partitions
    finally:
        old.purge()
        new.purge()
        old.flush(1)
        new.flush(1)


def test_confluent_commit_and_abort_read_committed(kafka_cluster: LocalCluster) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    kafka_cluster.ok("topics", "create", "txn-basic", "--partitions", "1", "--replication-factor", "3")
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "transactional.id": "basic-app"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("txn-basic", value=b"committed-1")
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("txn-basic", value=b"aborted")
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("txn-basic", value=b"committed-2")
    producer.commit_transaction(TIMEOUT_S)
    wire = Raw(txn_coordinator(kafka_cluster, "basic-app"))
    try:
        # the commit is answered once PrepareCommit is durable; CompleteCommit follows the markers
        wait_for("CompleteCommit", lambda: describe(wire, "basic-app").transaction_state == "CompleteCommit")
    finally:
        wire.close()
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": "basic-reader",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition("txn-basic", 0, OFFSET_BEGINNING)])
        values: list[bytes] = []

        def read_both():
            values.extend(m.value() for m in consumer.consume(10, timeout=0.5) if m.error() is None)
            return len(values) >= 2

        wait_for("the committed records", read_both)
        assert values == [b"committed-1", b"committed-2"]
    finally:
        consumer.close()
