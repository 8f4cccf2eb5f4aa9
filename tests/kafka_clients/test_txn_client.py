"""kraftpy's own client in transactions, on a real 3-node cluster (issue 17, the client half).

- Exactly-once consume-transform-produce with kraftpy's Consumer (read_committed, a group member) and
  transactional Producer: read one topic, write each input to two topics, offsets in the transaction
  (KIP-447: the member's generation), one transaction aborted on purpose, the transaction coordinator's
  node SIGKILLed midway. Read back under read_committed by kraftpy's consumer and by confluent-kafka:
  every input exactly once in each output, nothing of the aborted transaction.
- A zombie: a second producer with the same transactional id fences the first (its commit fails with
  ProducerFencedError, its open transaction is aborted), through the synchronous wrappers.
- Interop: what a librdkafka transactional producer wrote (a committed, an aborted, a committed, and an
  open transaction) read by kraftpy's read_committed consumer, and its LSO from ListOffsets.
- The CLI: `transactions list|describe` and `consume --isolation-level`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import pytest
from confluent_kafka import Producer as CkProducer

from kraftpy.client.errors import KafkaTimeoutError, ProducerFencedError
from kraftpy.client.shell.consumer import Consumer
from kraftpy.client.shell.producer import Producer
from kraftpy.client.shell.sync import SyncProducer
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.integration.test_cluster_support import LocalCluster
from tests.kafka_clients.test_txn_end_to_end import LeaderThenCoordinatorKill, make_topics_and_inputs, settled_ends
from tests.kafka_clients.test_txn_end_to_end import read_settled as ck_read_committed

log = logging.getLogger(__name__)

IN, OUT_A, OUT_B = "kp-eos-in", "kp-eos-out-a", "kp-eos-out-b"
RECORDS = 240
PER_TXN = 12
TXN_ID = "kp-eos-app"
GROUP = "kp-eos-group"
DEADLINE_S = 300
CALL_MS = 30_000


async def read_all(
    servers: str, topic: str, partitions: int, isolation_level: str, deadline: float, *, settled: bool = True
) -> list[bytes]:
    """Every record of `topic` up to its end (the LSO under read_committed), with kraftpy's consumer.

    `settled`: read_committed waits until no transaction is open on the topic (settled_ends), so a
    transaction the test just committed is read; a test that leaves one open on purpose passes False.
    """
    if isolation_level == "read_committed" and settled:
        settled_at = await asyncio.to_thread(settled_ends, servers, topic, partitions, deadline)
    consumer = Consumer(servers, isolation_level=isolation_level, auto_offset_reset="earliest")
    values: list[bytes] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = await consumer.end_offsets(tps, CALL_MS)
        if isolation_level == "read_committed" and settled:
            assert ends == {tp: settled_at[tp.partition] for tp in tps}, (ends, settled_at)
        while time.monotonic() < deadline:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            values.extend(r.value for r in await consumer.poll(500))
        else:
            raise AssertionError(f"{topic} not read to its end {ends} in time")
    finally:
        await consumer.close()
    return values


async def until_done(what: str, call, deadline: float) -> None:
    """A transactional call that timed out is called again: it waits for the same outcome (Kafka's rule)."""
    while True:
        try:
            await call()
            return
        except KafkaTimeoutError:
            assert time.monotonic() < deadline, f"{what} never completed"


async def transform_loop(
    cluster: LocalCluster, deadline: float, faults: LeaderThenCoordinatorKill
) -> tuple[Counter[bytes], int]:
    servers = cluster.bootstrap_servers
    consumer = Consumer(
        servers,
        group_id=GROUP,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        session_timeout_ms=20_000,
        heartbeat_interval_ms=1_000,
    )
    producer = Producer(servers, transactional_id=TXN_ID, transaction_timeout_ms=60_000, linger_ms=2)
    committed: Counter[bytes] = Counter()
    aborts = 0

    async def rewind() -> None:
        """Back to the group's committed offsets: what the aborted transaction consumed is read again."""
        assignment = consumer.assignment()
        found = await consumer.committed(assignment, CALL_MS)  # stable offsets only (read_committed)
        for tp in assignment:
            om = found.get(tp)
            if om is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, om.offset)

    try:
        consumer.subscribe([IN])
        await until_done("init_transactions", lambda: producer.init_transactions(CALL_MS), deadline)
        while len(committed) < RECORDS:
            assert time.monotonic() < deadline, f"only {len(committed)} of {RECORDS} inputs done in time"
            records = await consumer.poll(1_000, max_records=PER_TXN)
            if not records:
                continue
            offsets: dict[TopicPartition, int] = {}
            for r in records:
                offsets[r.topic_partition] = max(offsets.get(r.topic_partition, 0), r.offset + 1)
            producer.begin_transaction()
            sent = []
            try:
                for r in records:
                    sent.append(await producer.send(OUT_A, r.value, key=r.key))
                    sent.append(await producer.send(OUT_B, r.value, key=r.key))
                if aborts == 0:
                    # Its offsets too: an aborted transaction's offsets must not count, or these inputs
                    # would be skipped after the rewind and missing from the outputs. Flushed, so the
                    # aborted records are in the log (read_uncommitted sees them), not just dropped.
                    sent.append(await producer.send(OUT_A, b"aborted-marker"))
                    await producer.flush()
                    await producer.send_offsets_to_transaction(offsets, consumer.group_metadata(), CALL_MS)
                    raise KafkaError("the test aborts its first transaction")
                # With this transaction open (its partitions added, records written), a partition leader
                # and later the coordinator's node die; the coordinator's successor resumes the
                # transaction from __transaction_state.
                if faults.due(len(committed), RECORDS):
                    await producer.flush()
                    await asyncio.to_thread(faults.step, len(committed), RECORDS)
                await producer.send_offsets_to_transaction(offsets, consumer.group_metadata(), CALL_MS)
                await until_done("commit_transaction", lambda: producer.commit_transaction(CALL_MS), deadline)
            except ProducerFencedError:
                raise
            except KafkaError as exc:
                log.info("aborting a transaction: %s", exc)
                await until_done("abort_transaction", lambda: producer.abort_transaction(CALL_MS), deadline)
                await asyncio.gather(*sent, return_exceptions=True)  # unsent records fail with the abort
                aborts += 1
                await rewind()
                continue
            committed.update(r.value for r in records)
    finally:
        await producer.close(10_000)
        await consumer.close()
    return committed, aborts


def test_kraftpy_client_exactly_once_across_leader_and_coordinator_kills(
    kafka_cluster: LocalCluster,
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    make_topics_and_inputs(kafka_cluster, (IN, OUT_A, OUT_B), RECORDS)

    faults = LeaderThenCoordinatorKill(kafka_cluster, TXN_ID, OUT_A)
    try:
        committed, aborts = asyncio.run(transform_loop(kafka_cluster, deadline, faults))
    finally:
        faults.bring_back()
    assert len(faults.killed) == 2, f"the run ended before both faults (killed {faults.killed})"
    assert aborts >= 1
    assert max(committed.values()) == 1, "the loop itself committed an input twice"

    expected = Counter(b"in-%d" % i for i in range(RECORDS))
    for topic in (OUT_A, OUT_B):
        ours = asyncio.run(read_all(kafka_cluster.bootstrap_servers, topic, 2, "read_committed", deadline + 60))
        theirs = ck_read_committed(kafka_cluster, topic, 2, deadline + 60)
        for reader, values in (("kraftpy", ours), ("confluent-kafka", theirs)):
            assert b"aborted-marker" not in values, f"{reader} read an aborted record of {topic}"
            counts = Counter(values)
            duplicates = {v: n for v, n in counts.items() if n > 1}
            assert not duplicates, f"{reader}, {topic}: {len(duplicates)} inputs more than once"
            assert counts == expected, f"{reader}, {topic}: {len(expected - counts)} inputs missing"
        # read_uncommitted sees the aborted transaction's records: the filter above is not vacuous.
        if topic == OUT_A:
            raw = asyncio.run(read_all(kafka_cluster.bootstrap_servers, topic, 2, "read_uncommitted", deadline + 60))
            assert b"aborted-marker" in raw


def test_a_zombie_producer_is_fenced_by_a_new_one_with_its_transactional_id(kafka_cluster: LocalCluster) -> None:
    topic = "kp-zombie"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    servers = kafka_cluster.bootstrap_servers
    zombie = SyncProducer(servers, transactional_id="kp-zombie-id")
    successor = SyncProducer(servers, transactional_id="kp-zombie-id")
    try:
        zombie.init_transactions(CALL_MS)
        zombie.begin_transaction()
        zombie.send(topic, b"zombie").result(30)  # in the log, in an open transaction
        successor.init_transactions(60_000)  # bumps the epoch: the zombie's transaction is aborted
        successor.begin_transaction()
        successor.send(topic, b"successor")
        successor.commit_transaction(CALL_MS)
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction(CALL_MS)
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()  # fatal: the zombie can only be closed
    finally:
        zombie.close(5_000)
        successor.close(5_000)
    deadline = time.monotonic() + 60
    assert asyncio.run(read_all(servers, topic, 1, "read_committed", deadline)) == [b"successor"]
    assert sorted(asyncio.run(read_all(servers, topic, 1, "read_uncommitted", deadline))) == [b"successor", b"zombie"]


def test_kraftpy_read_committed_reads_a_librdkafka_transactional_producer(kafka_cluster: LocalCluster) -> None:
    topic = "kp-interop"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "3")
    servers = kafka_cluster.bootstrap_servers
    producer = CkProducer({"bootstrap.servers": servers, "transactional.id": "kp-interop-id"})
    producer.init_transactions(60)

    def transaction(values: list[bytes], commit: bool) -> None:
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % 2)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    transaction([b"c%d" % i for i in range(6)], commit=True)
    transaction([b"a%d" % i for i in range(6)], commit=False)
    transaction([b"c%d" % i for i in range(6, 10)], commit=True)
    # One left open: its records are in the log, above the LSO.
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"o%d" % i, partition=i % 2)
    producer.flush(30)
    deadline = time.monotonic() + 120
    tps = [TopicPartition(topic, p) for p in range(2)]

    async def ends(isolation_level: str) -> dict[TopicPartition, int]:
        consumer = Consumer(servers, isolation_level=isolation_level)
        try:
            return await consumer.end_offsets(tps, CALL_MS)
        finally:
            await consumer.close()

    try:
        lso, hw = asyncio.run(ends("read_committed")), asyncio.run(ends("read_uncommitted"))
        assert all(lso[tp] < hw[tp] for tp in tps), (lso, hw)  # ListOffsets LATEST under read_committed: the LSO
        with pytest.raises(AssertionError, match="still open"):
            settled_ends(servers, topic, 2, time.monotonic() + 1)  # what read_all waits for: this one to end
        committed = asyncio.run(read_all(servers, topic, 2, "read_committed", deadline, settled=False))
        assert sorted(committed) == sorted(b"c%d" % i for i in range(10))
        everything = asyncio.run(read_all(servers, topic, 2, "read_uncommitted", deadline))
        assert {b"a0", b"o0"} <= set(everything)
    finally:
        producer.abort_transaction(30)
    assert sorted(asyncio.run(read_all(servers, topic, 2, "read_committed", deadline))) == sorted(
        b"c%d" % i for i in range(10)
    )


def test_cli_lists_and_describes_transactions_and_consumes_read_committed(kafka_cluster: LocalCluster) -> None:
    topic, txn_id = "kp-cli-txn", "kp-cli-id"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    producer = SyncProducer(kafka_cluster.bootstrap_servers, transactional_id=txn_id)

    def consume(isolation_level: str) -> list[str]:
        out = kafka_cluster.ok(
            "consume", topic, "--from-beginning", "--timeout-ms", "3000", "--isolation-level", isolation_level
        )
        return out.stdout.split()

    try:
        producer.init_transactions(CALL_MS)
        producer.begin_transaction()
        producer.send(topic, b"gone").result(30)
        producer.abort_transaction(CALL_MS)
        producer.begin_transaction()
        producer.send(topic, b"kept").result(30)  # left open for now

        listed = {
            t["transactional_id"]: t for t in kafka_cluster.ok("transactions", "list", "--json").json()["transactions"]
        }
        assert listed[txn_id]["state"] == "Ongoing" and listed[txn_id]["producer_id"] >= 0
        only_ongoing = kafka_cluster.ok("transactions", "list", "--state", "Ongoing", "--json").json()
        assert txn_id in {t["transactional_id"] for t in only_ongoing["transactions"]}
        described = kafka_cluster.ok("transactions", "describe", "--transactional-id", txn_id, "--json").json()
        assert described["state"] == "Ongoing" and described["topic_partitions"] == [f"{topic}-0"]
        assert (
            described["transaction_duration_ms"] is not None
            and described["coordinator"] == listed[txn_id]["coordinator"]
        )
        table = kafka_cluster.ok("transactions", "describe", "--transactional-id", txn_id).stdout
        assert "TransactionState" in table and "Ongoing" in table and f"{topic}-0" in table

        assert consume("read_committed") == []  # open: above the LSO
        assert consume("read_uncommitted") == ["gone", "kept"]
        producer.commit_transaction(CALL_MS)
        assert consume("read_committed") == ["kept"]
    finally:
        producer.close(5_000)
    missing = kafka_cluster.cli("transactions", "describe", "--transactional-id", "kp-no-such-id")
    assert missing.code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def test_an_abort_before_anything_reached_the_coordinator_drops_the_queued_records(
    kafka_cluster: LocalCluster,
) -> None:
    """Found by `kraftpy faults run --workload txn` (G1a): a record still in the accumulator when its
    transaction aborts (the abort completes at once, nothing was added at the coordinator yet) must fail,
    not go out with the next transaction and be committed with it."""
    topic = "kp-abort-queued"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    servers = kafka_cluster.bootstrap_servers

    async def scenario() -> None:
        producer = Producer(servers, transactional_id="kp-abort-queued-id", linger_ms=1_000)
        try:
            await producer.init_transactions(CALL_MS)
            producer.begin_transaction()
            aborted = await producer.send(topic, b"aborted")  # lingers in the accumulator
            await producer.abort_transaction(CALL_MS)
            with pytest.raises(KafkaError):
                await asyncio.wait_for(aborted, 30)
            producer.begin_transaction()
            await producer.send(topic, b"committed")
            await producer.commit_transaction(CALL_MS)
        finally:
            await producer.close(5_000)

    asyncio.run(scenario())
    deadline = time.monotonic() + 60
    assert asyncio.run(read_all(servers, topic, 1, "read_committed", deadline)) == [b"committed"]
