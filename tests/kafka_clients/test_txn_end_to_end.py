"""Exactly-once consume-transform-produce through confluent-kafka, with the transaction coordinator's node killed.

Input records are read with isolation.level=read_committed, each is written to two output topics
and the input offsets are committed in the same transaction (send_offsets_to_transaction,
KIP-447); one transaction is aborted on purpose; midway the node that coordinates the
transactional id is SIGKILLed (the coordinator moves; its successor resumes from
__transaction_state). Read back with read_committed, every input appears exactly once in each
output topic and nothing of the aborted transaction does.
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from tests.integration.test_cluster_support import LocalCluster
from tests.kafka_clients.raw import coordinator

IN, OUT_A, OUT_B = "eos-in", "eos-out-a", "eos-out-b"
RECORDS = 300
PER_TXN = 15
TXN_ID = "eos-app"
GROUP = "eos-group"
DEADLINE_S = 300


def coordinator_node(cluster: LocalCluster, key: str, key_type: int = 1) -> int:
    """The node coordinating `key`: a transactional id (key_type 1) or a group (0)."""
    return coordinator(cluster.bootstrap_servers, key, key_type, timeout_s=60).node_id


def group_coordinated_apart(cluster: LocalCluster, txn_id: str, prefix: str) -> str:
    """A group id whose coordinator is not on the node of `txn_id`'s coordinator, which the faults kill.

    librdkafka hangs send_offsets_to_transaction, past its timeout, when its cached group coordinator
    is a broker that left the metadata (its issues 5511 and 5456, open at 2.16). A fenced broker
    leaves it, here as in KRaft, so killing a node that coordinates both the transaction and the
    group held the test for minutes (2026-11-27: 620 s, then fenced by the transaction timeout).
    The test means to move the transaction coordinator, so the group lives elsewhere. The
    leaders are the preferred ones at the start and again at the kill (LeaderThenCoordinatorKill
    brings every node back and elects the preferred leaders first)."""
    txn_node = coordinator_node(cluster, txn_id)
    for i in range(200):
        group = f"{prefix}-{i}"
        if coordinator_node(cluster, group, key_type=0) != txn_node:
            return group
    raise AssertionError(f"no group of 200 is coordinated apart from node {txn_node}")


class LeaderThenCoordinatorKill:
    """The faults of an exactly-once run: a partition leader dies, comes back, then the coordinator's node dies.

    A third of the way in, the leader of `topic`'s partition 0 is SIGKILLed (its partitions move, the
    transaction's writes and markers follow them); halfway, it is restarted, the ISRs refill, and the
    node of the transaction coordinator is SIGKILLed (the coordinator moves and resumes from
    __transaction_state). Two nodes down at once would leave min.insync.replicas unmet, so one at a time.
    """

    def __init__(self, cluster: LocalCluster, txn_id: str, topic: str) -> None:
        self.cluster, self.txn_id, self.topic = cluster, txn_id, topic
        self.killed: list[int] = []
        self.down: int | None = None

    def due(self, done: int, total: int) -> bool:
        """Whether `step` with these counts would do a fault (a caller may flush its writes first)."""
        return (not self.killed and done >= total // 3) or (len(self.killed) == 1 and done >= total // 2)

    def step(self, done: int, total: int) -> None:
        """Call between transactions (or with one open) with the inputs committed so far."""
        if not self.due(done, total):
            return
        if not self.killed:
            self._kill(self.cluster.describe(self.topic)["partitions"][0]["leader"])
        else:
            # every node back, full ISRs everywhere and the preferred leaders: the coordinators are where
            # they were at the start, when a caller chose its group (group_coordinated_apart)
            self.bring_back()
            self._kill(coordinator_node(self.cluster, self.txn_id))

    def bring_back(self) -> None:
        """Every node up, full ISRs, and leadership where it was before the first kill (before the
        coordinator kill, and at the end of a run)."""
        self.cluster.bring_back()
        self.down = None

    def _kill(self, node_id: int) -> None:
        self.cluster.kill(node_id)
        self.killed.append(node_id)
        self.down = node_id


def server_evidence(cluster: LocalCluster, txn_id: str, limit: int = 60) -> str:
    """The nodes' log lines that explain a fenced producer: the epochs its coordinators handed out or
    fenced, and refused writes to the internal topics (their messages name both epochs)."""
    lines = []
    for entry in cluster.layout().nodes:
        try:
            text = cluster.log_text(entry.node_id)
        except OSError:
            continue
        lines += [line for line in text.splitlines() if txn_id in line or "failed: INVALID_PRODUCER_EPOCH" in line]
    return "\n".join(sorted(lines)[-limit:])


def make_topics_and_inputs(cluster: LocalCluster, topics: tuple[str, str, str], records: int) -> None:
    """The input topic (3 partitions) filled with `records` values in-0.., and two empty output topics."""
    source, out_a, out_b = topics
    for topic, partitions in ((source, 3), (out_a, 2), (out_b, 2)):
        cluster.ok("topics", "create", topic, "--partitions", str(partitions), "--replication-factor", "3")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for i in range(records):
        producer.produce(source, key=b"k%d" % i, value=b"in-%d" % i, partition=i % 3)
    assert producer.flush(60) == 0


def settled_ends(bootstrap_servers: str, topic: str, partitions: int, deadline: float) -> dict[int, int]:
    """Each partition's last stable offset, once it has reached the high watermark: no transaction open.

    commit_transaction and abort_transaction return when the coordinator has logged the outcome; the
    markers reach the partitions after that (Kafka's EndTxn), and until they do the LSO stays below
    the ended transaction's records. A read_committed read to the LSO taken right after a commit
    can miss the transaction just committed (a kraftpy test once read nothing that way).
    """
    readers = {
        level: Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "eos-ends", "isolation.level": level})
        for level in ("read_committed", "read_uncommitted")
    }
    try:
        while True:
            # A read_committed consumer's high watermark is the LSO.
            lso, hw = (
                {
                    p: readers[level].get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(partitions)
                }
                for level in ("read_committed", "read_uncommitted")
            )
            if lso == hw:
                return lso
            assert time.monotonic() < deadline, f"{topic}: a transaction is still open (LSO {lso}, high watermark {hw})"
            time.sleep(0.1)
    finally:
        for reader in readers.values():
            reader.close()


def read_settled(
    cluster: LocalCluster, topic: str, partitions: int, deadline: float, isolation: str = "read_committed"
) -> list[bytes]:
    """Every record of `topic` (read_committed: every committed one), read once every transaction on it has ended."""
    ends = settled_ends(cluster.bootstrap_servers, topic, partitions, deadline)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "eos-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    values: list[bytes] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        positions = dict.fromkeys(ends, 0)
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            values.extend(m.value() for m in consumer.consume(num_messages=500, timeout=0.5) if m.error() is None)
            # the position, not the last record: it also steps over control records (markers)
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
        assert all(positions[p] >= ends[p] for p in ends), (positions, ends)
    finally:
        consumer.close()
    return values


def test_exactly_once_across_leader_and_coordinator_kills(
    kafka_cluster: LocalCluster,
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    make_topics_and_inputs(kafka_cluster, (IN, OUT_A, OUT_B), RECORDS)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": group_coordinated_apart(kafka_cluster, TXN_ID, GROUP),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "transactional.id": TXN_ID,
            "transaction.timeout.ms": 60_000,
            # librdkafka #5456 / #5511 (open in 2.16): send_offsets_to_transaction() can wait past its
            # timeout when a killed broker left Metadata and came back (its cached coordinator entry
            # points at a decommissioned broker); only another broker's state change wakes it. Once
            # that was our broker's idle close, 600 s later: the transaction had timed out and the
            # producer was fenced. Closing idle connections here makes such changes come in seconds.
            "connections.max.idle.ms": 5_000,
        }
    )
    assignment = [TopicPartition(IN, p) for p in range(3)]
    faults = LeaderThenCoordinatorKill(kafka_cluster, TXN_ID, OUT_A)
    committed_txns = aborted_on_purpose = 0

    def rewind() -> None:
        """Back to the group's committed offsets (what the aborted transaction consumed is read again)."""
        committed = consumer.committed(assignment, timeout=30)
        for tp in committed:
            consumer.seek(TopicPartition(IN, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    def commit_with_retries() -> bool:
        while True:
            try:
                producer.commit_transaction(30)
                return True
            except KafkaException as exc:
                error = exc.args[0]
                assert not error.fatal(), f"{error}\n{server_evidence(kafka_cluster, TXN_ID)}"
                if error.txn_requires_abort():
                    producer.abort_transaction(30)
                    rewind()
                    return False
                assert error.retriable(), error
                assert time.monotonic() < deadline, "the commit never went through"

    try:
        producer.init_transactions(60)
        consumer.assign([TopicPartition(IN, p, OFFSET_BEGINNING) for p in range(3)])
        done_inputs = 0
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(num_messages=PER_TXN, timeout=1.0) if m.error() is None]
            if not batch:
                positions = consumer.position(assignment)
                ends = [consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in assignment]
                if all(p.offset >= e for p, e in zip(positions, ends, strict=True)):
                    break
                continue
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(OUT_A, key=m.key(), value=m.value())
                    producer.produce(OUT_B, key=m.key(), value=m.value())
                if aborted_on_purpose == 0:
                    # its offsets too: an aborted transaction's offsets must not count (else these inputs
                    # would be skipped after the rewind and missing from the outputs)
                    producer.produce(OUT_A, value=b"aborted-marker")
                    producer.send_offsets_to_transaction(
                        consumer.position(assignment), consumer.consumer_group_metadata(), 30
                    )
                    producer.abort_transaction(30)
                    aborted_on_purpose += 1
                    rewind()
                    continue
                producer.send_offsets_to_transaction(
                    consumer.position(assignment), consumer.consumer_group_metadata(), 30
                )
            except KafkaException as exc:
                error = exc.args[0]
                assert not error.fatal(), f"{error}\n{server_evidence(kafka_cluster, TXN_ID)}"
                producer.abort_transaction(30)
                rewind()
                continue
            if commit_with_retries():
                committed_txns += 1
                done_inputs += len(batch)
            faults.step(done_inputs, RECORDS)
        assert time.monotonic() < deadline, "the loop did not finish in time"
    finally:
        producer.flush(5)
        consumer.close()
        faults.bring_back()
    assert len(faults.killed) == 2, f"the run ended before both faults (killed {faults.killed})"
    assert committed_txns >= RECORDS // PER_TXN and aborted_on_purpose == 1

    expected = Counter(b"in-%d" % i for i in range(RECORDS))
    for topic in (OUT_A, OUT_B):
        values = read_settled(kafka_cluster, topic, 2, deadline + 60)
        assert b"aborted-marker" not in values
        counts = Counter(values)
        duplicates = {v: n for v, n in counts.items() if n > 1}
        assert not duplicates, f"{topic}: {len(duplicates)} inputs written more than once"
        assert counts == expected, f"{topic}: {len(expected - counts)} inputs missing"
