"""`kraftpy topics describe` shows a paused follower as an eligible leader replica (KIP-966), with real processes.

A topic with min.insync.replicas=2 on replicas {1, 2}: follower 2 is SIGSTOPped until the controller
takes it out of the ISR, which falls below min ISR, so 2 joins the partition's ELR. The CLI reads it
through its admin client's DescribeTopicPartitions (the brokers advertise key 75) and shows it in
`--json` (`elr`) and in the table's "elr" column; once 2 is back in the ISR the ELR is empty again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow
TOPIC = "elr-shown"
LEADER, FOLLOWER = 1, 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster") as c:
        yield c


def partition(cluster: LocalCluster) -> dict:
    return cluster.describe(TOPIC)["partitions"][0]


def table_row(cluster: LocalCluster) -> list[str]:
    lines = cluster.ok("topics", "describe", TOPIC).stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["partition"])
    assert lines[header].split()[-4:] == ["elr", "last", "known", "elr"], lines[header]
    return next(line.split() for line in lines[header + 1 :] if line.split()[:1] == ["0"])


def test_describe_shows_the_paused_follower_in_the_elr(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(
        TOPIC, num_partitions=1, replica_assignment=[[LEADER, FOLLOWER]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic])[TOPIC].result(30)
    wait_for("the partition led by 1 with both replicas in sync", lambda: partition(cluster)["isr"] == [1, 2] or None)
    healthy = partition(cluster)
    assert (healthy["leader"], healthy["elr"], healthy["last_known_elr"]) == (LEADER, [], [])

    follower_pid = cluster.pid(FOLLOWER)
    assert follower_pid is not None
    os.kill(follower_pid, signal.SIGSTOP)
    try:
        shrunk = wait_for("the ISR down to the leader", lambda: (p := partition(cluster))["isr"] == [LEADER] and p)
        # Below min ISR 2 the leaving follower holds every committed record: it is eligible.
        assert (shrunk["leader"], shrunk["elr"], shrunk["last_known_elr"]) == (LEADER, [FOLLOWER], [])
        row = table_row(cluster)
        assert (row[0], row[1], row[3], row[4]) == ("0", "1", "1,2", "1") and row[5:] == ["2", "-"], row
    finally:
        os.kill(follower_pid, signal.SIGCONT)

    back = wait_for("the follower back in the ISR", lambda: (p := partition(cluster))["isr"] == [1, 2] and p)
    assert back["elr"] == []  # an ISR at min ISR empties the ELR
