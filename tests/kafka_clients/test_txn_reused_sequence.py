"""A committed transaction through confluent-kafka never acknowledges a record it did not write (seed 2301).

librdkafka's abort_transaction() purges the messages waiting in its queues and moves each partition's
sequence base past them, so the next transaction's first message takes the purged one's sequence.
That is right for a message never sent, and wrong for one sent once whose request failed after the
leader may have written it (a timeout, possibly persisted) and which waited for its retry: the next
transaction then repeats a sequence that is already in the log, and a broker that answers it as a
duplicate (as Kafka does) acknowledges the new record at the aborted one's offset and lets its
transaction commit without it. Fault run seed 2301 found exactly that record missing.

Here the situation is made on purpose: a follower is stopped so the leader's acks=all wait outlasts
the request timeout, the retry backoff keeps the message queued, and the abort purges it. The
partition leader refuses the repeated sequence (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for
librdkafka), so the transaction cannot commit; what a committed transaction acknowledged is read back.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from confluent_kafka import KafkaException, Producer

from tests.integration.test_cluster_support import LocalCluster
from tests.kafka_clients.raw import coordinator
from tests.kafka_clients.test_txn_end_to_end import read_settled

TOPIC = "txn-reused-seq"
DEADLINE_S = 120


def txn_id_coordinated_apart(cluster: LocalCluster, node_id: int) -> str:
    """A transactional id whose coordinator is not `node_id` (the node the test stops)."""
    for i in range(200):
        txn_id = f"reused-seq-{i}"
        if coordinator(cluster.bootstrap_servers, txn_id, 1, timeout_s=30).node_id != node_id:
            return txn_id
    raise AssertionError(f"no transactional id of 200 is coordinated apart from node {node_id}")


def test_an_abort_that_purges_a_possibly_written_message_loses_nothing_committed(
    kafka_cluster: LocalCluster,
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    kafka_cluster.ok("topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "2")
    partition = kafka_cluster.describe(TOPIC)["partitions"][0]
    follower = next(r for r in partition["replicas"] if r != partition["leader"])
    reports: list[tuple[bytes, Any, int]] = []

    def reporter(value: bytes) -> Any:
        return lambda err, msg: reports.append((value, err, msg.offset() if err is None else -1))

    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "transactional.id": txn_id_coordinated_apart(kafka_cluster, follower),
            # The leader's acks=all wait for the stopped follower outlasts this (its fencing takes
            # broker_session_timeout_ms, 1.8 s): the send fails as possibly written ...
            "request.timeout.ms": 300,
            # ... and waits for its retry in the queue, where abort_transaction() purges it.
            "retry.backoff.ms": 20_000,
            "retry.backoff.max.ms": 20_000,
            "linger.ms": 0,
        }
    )
    stopped = kafka_cluster.pid(follower)
    assert stopped is not None
    committed, failure = False, None
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"opens", on_delivery=reporter(b"opens"))
        assert producer.flush(30) == 0  # the partition is in the transaction before the follower stops
        os.kill(stopped, signal.SIGSTOP)
        producer.produce(TOPIC, b"purged", on_delivery=reporter(b"purged"))
        assert producer.flush(3) == 1, f"the send was answered before the abort: {reports}"
        producer.abort_transaction(60)
        producer.begin_transaction()
        try:
            producer.produce(TOPIC, b"next", on_delivery=reporter(b"next"))
            producer.flush(30)  # raises librdkafka's fatal error, if one was raised
            producer.commit_transaction(60)
            committed = True
        except (KafkaException, SystemError) as exc:
            # A fatal error confluent-kafka meets while it serves delivery reports in flush() is set
            # before it calls our callback, whose first C call then fails: it reaches us as a
            # SystemError caused by the KafkaException.
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            assert isinstance(cause, KafkaException), exc
            failure = cause.args[0]
    finally:
        os.kill(stopped, signal.SIGCONT)
        # The SystemError above stays referenced from confluent-kafka's C side, and its traceback holds
        # this frame and so the producer: a cycle the collector cannot see, which kept librdkafka's
        # threads retrying this cluster's ports for the rest of the process (tests/native_threads.py).
        del producer
    kafka_cluster.bring_back()

    written = read_settled(kafka_cluster, TOPIC, 1, deadline, isolation="read_uncommitted")
    assert b"purged" in written, f"the purged send was never written, so nothing was at risk: {written}"
    readable = read_settled(kafka_cluster, TOPIC, 1, deadline)
    delivered = [(value, offset) for value, err, offset in reports if value == b"next" and err is None]
    if committed:
        assert delivered and b"next" in readable, (
            f"the transaction committed with 'next' acknowledged at {delivered}, "
            f"but read_committed holds {readable}: acknowledged at another record's offset"
        )
    else:
        assert failure is not None and failure.fatal() and "sequence" in failure.str(), failure
        assert readable == [], readable
