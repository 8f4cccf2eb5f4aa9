"""The ISR's last member loses power: the replica the controller kept as eligible leads (KIP-966).

Fault-run seeds 2101 and 2304 lost committed records this way, with real processes: a follower left
the ISR {leader, follower} (fenced while paused), the ISR's last member then lost its unsynced tail,
came back and was elected again with its shorter log. Here the same happens on purpose in a 3-node
cluster, with a Kafka client (confluent-kafka) writing and reading: records acknowledged with acks=all,
the follower SIGSTOPped until the controller fences it, the leader SIGKILLed, its partition's unsynced
tail cut as a power loss does and its boot id changed, then both back. The leader registers as an
unclean restart and is elected nowhere; the follower, an eligible leader replica, leads; every
acknowledged record is read back. Without eligible leader replicas the cut leader leads and the
records are gone.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kraftpy.tools.commands.cluster import spawn_node
from kraftpy.tools.faults.disk import partition_dirs, unsynced_start
from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow
TOPIC = "elr-last-member"
LEADER, FOLLOWER = 1, 2  # node 3 holds no replica: with it, the leader alone keeps the quorum
RECORDS = 200
LEADER_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster") as c:
        yield c


def partition(cluster: LocalCluster) -> dict:
    return cluster.describe(TOPIC)["partitions"][0]


def use_boot_id_file(cluster: LocalCluster, node_id: int, path: Path) -> None:
    """Point the node at a boot id file the test owns (as a fault run does) and restart it gracefully."""
    path.write_text(f"{uuid.uuid4()}\n")
    cluster.write_setting("boot_id_path", f'"{path}"', node_ids=(node_id,))
    cluster.kill(node_id, signal.SIGTERM)
    cluster.start()


def cut_unsynced_tail(cluster: LocalCluster, node_id: int) -> int:
    """What a power loss does to the stopped node's partition: everything above its recovery point goes."""
    layout = cluster.layout()
    data_dir = layout.data_dir(next(n for n in layout.nodes if n.node_id == node_id))
    ((_, directory),) = partition_dirs(data_dir, TOPIC)
    found = unsynced_start(directory)
    assert found is not None, "the partition has no active segment"
    segment, start = found
    size = segment.stat().st_size
    os.truncate(segment, start)
    return size - start


def read_all(cluster: LocalCluster, deadline: float) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"elr-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        while time.monotonic() < deadline:
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=5)
            except KafkaException as exc:  # the client's metadata may still name the old leader
                if exc.args[0].code() not in LEADER_MOVING:
                    raise
                time.sleep(0.2)
                continue
            if len(values) >= high:
                return values
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    values.append(message.value())
        return values
    finally:
        consumer.close()


def test_the_eligible_follower_leads_after_the_last_isr_member_loses_its_tail(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    deadline = time.monotonic() + 150
    use_boot_id_file(cluster, LEADER, boot_id := tmp_path / "boot_id")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[LEADER, FOLLOWER]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic])[TOPIC].result(30)
    wait_for("the partition led by its first replica", lambda: partition(cluster)["leader"] == LEADER or None)

    acknowledged: list[bytes] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        value = f"record-{i}".encode()
        producer.produce(TOPIC, value, on_delivery=lambda err, msg: err is None and acknowledged.append(msg.value()))
    assert producer.flush(30) == 0
    assert len(acknowledged) == RECORDS

    # The follower is fenced while paused: the ISR {1, 2} falls below min ISR 2, so it becomes eligible.
    follower_pid = cluster.pid(FOLLOWER)
    assert follower_pid is not None
    os.kill(follower_pid, signal.SIGSTOP)
    try:
        wait_for("the ISR down to the leader", lambda: partition(cluster)["isr"] == [LEADER] or None)
        # Power loss of the ISR's last member: SIGKILL, the unsynced tail cut, a new boot id, a restart.
        cluster.kill(LEADER)
        assert cut_unsynced_tail(cluster, LEADER) > 0, "the acknowledged records were already on disk"
        boot_id.write_text(f"{uuid.uuid4()}\n")
        layout = cluster.layout()
        spawn_node(layout, next(n for n in layout.nodes if n.node_id == LEADER))  # not `cluster start`: 2 is paused

        def restarted() -> dict | None:
            status = cluster.status(LEADER)
            broker = status["broker"] if status is not None else None
            return broker if broker is not None and broker["registered"] and not broker["fenced"] else None

        broker = wait_for("the leader back, registered and unfenced", restarted)
        assert broker["restart"]["reason"] == "boot id changed"
        # Unfenced, it was considered for leadership and refused: its log may lack what was committed.
        assert partition(cluster)["leader"] == -1
    finally:
        os.kill(follower_pid, signal.SIGCONT)

    wait_for("the eligible follower leading", lambda: partition(cluster)["leader"] == FOLLOWER or None)
    values = read_all(cluster, deadline)
    assert values == acknowledged, f"read {len(values)} of {len(acknowledged)} acknowledged records"
