"""SIGKILL the active controller, then a broker, of a real 3-node cluster; metadata and leaderships recover.

Each kill is followed by checks through the CLI only: a new quorum leader and
active controller that still accepts writes, the dead node fenced (in the
active controller's view), every partition it led has a new leader at a
higher leader epoch and it left every ISR; after `cluster start` brings it
back it is unfenced and rejoins the ISRs. Last, a CreateTopics sent to a
surviving broker the moment the active controller dies is answered once the
next one is elected, as a Kafka broker's forwarding does, not failed with the
dead controller's refused connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest

from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw

pytestmark = pytest.mark.slow
TOPIC = "failover"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("failover") / "cluster") as c:
        c.ok("topics", "create", TOPIC, "--partitions", "6", "--replication-factor", "3")
        yield c


def node_view(cluster: LocalCluster, node_id: int) -> dict[str, Any]:
    return next(n for n in cluster.health()["nodes"] if n["node_id"] == node_id)


def recovered_from(cluster: LocalCluster, victim: int, before: dict[str, Any]) -> dict[str, Any] | None:
    """The topic once no partition is led by `victim` and it is in no ISR, else None."""
    now = cluster.describe(TOPIC)
    for old, new in zip(before["partitions"], now["partitions"], strict=True):
        if new["leader"] in (victim, -1) or victim in new["isr"]:
            return None
        if old["leader"] == victim and new["leader_epoch"] <= old["leader_epoch"]:
            return None
    return now


def kill_and_recover(cluster: LocalCluster, victim: int, label: str) -> None:
    before = cluster.describe(TOPIC)
    led = [p["partition"] for p in before["partitions"] if p["leader"] == victim]
    assert led, f"node {victim} leads nothing of {before}"
    cluster.kill(victim)

    after = wait_for(f"partitions led by {victim} to move", lambda: recovered_from(cluster, victim, before))
    for p in led:
        assert after["partitions"][p]["leader"] in (set(before["partitions"][p]["isr"]) - {victim})
    assert after["topic_id"] == before["topic_id"]
    view = wait_for(f"node {victim} fenced", lambda: (v := node_view(cluster, victim))["fenced"] is True and v)
    assert view["alive"] is False

    # Metadata still takes writes: the active controller (maybe a new one) commits a new topic.
    name = f"after-kill-{label}-{victim}"  # one per test: both tests may kill the same node
    cluster.ok("topics", "create", name, "--partitions", "2", "--replication-factor", "2")
    assert all(victim not in p["replicas"] for p in cluster.describe(name)["partitions"])

    # Back with a new incarnation: registered, caught up, unfenced, and back in every ISR.
    cluster.start()
    wait_for(f"node {victim} unfenced", lambda: node_view(cluster, victim)["fenced"] is False)
    wait_for(
        f"node {victim} back in every ISR",
        lambda: all(victim in p["isr"] for p in cluster.describe(TOPIC)["partitions"]),
    )


def test_sigkill_the_active_controller(cluster: LocalCluster) -> None:
    old = cluster.controller_id()
    old_epoch = cluster.health()["controller"]["epoch"]
    kill_and_recover(cluster, old, "controller")
    health = cluster.health()
    assert health["healthy"] is True and health["controller"]["epoch"] > old_epoch
    quorum = cluster.ok("quorum", "status", "--json").json()
    assert quorum["leader_id"] == health["controller"]["leader_id"]
    status = cluster.status(quorum["leader_id"])
    assert status["controller"]["active"] is True


def test_sigkill_a_broker_that_is_not_the_controller(cluster: LocalCluster) -> None:
    controller = cluster.controller_id()
    leaders = {p["leader"] for p in cluster.describe(TOPIC)["partitions"]}
    victim = next(n for n in (1, 2, 3) if n != controller and n in leaders)
    kill_and_recover(cluster, victim, "broker")
    assert cluster.controller_id() == controller  # a broker's death does not move the quorum
    assert cluster.health()["healthy"] is True


def test_a_topic_created_as_the_controller_dies_waits_for_the_next(cluster: LocalCluster) -> None:
    controller = cluster.controller_id()
    survivor = next(n for n in cluster.layout().nodes if n.node_id != controller)
    # One connection to a survivor, open before the kill, so the CreateTopics reaches that broker
    # within milliseconds of it: long before the survivors' fetch timeout lets them elect the next
    # controller, while the broker still forwards to the dead one. (A client library picks its own
    # broker: librdkafka's AdminClient sends CreateTopics to the controller_id of the last Metadata
    # answer it read, and each broker names itself, so it may pick the broker being killed.)
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        version=5,
        topics=[topic(name="during-failover", num_partitions=2, replication_factor=2, assignments=[], configs=[])],
        timeout_ms=30_000,
        validate_only=False,
    )
    with Raw(survivor.kafka_address, timeout_s=90) as raw:
        cluster.kill(controller)
        answer = raw.call(CreateTopicsRequest.API_KEY, 5, request)
    # Before the broker retried forwarding, this was NETWORK_EXCEPTION (13): the dead controller's refused connection.
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [("during-failover", 0, None)]
    assert cluster.health()["controller"]["leader_id"] not in (controller, None)  # the next one answered
    assert len(cluster.describe("during-failover")["partitions"]) == 2
    cluster.start()
    wait_for(f"node {controller} unfenced", lambda: node_view(cluster, controller)["fenced"] is False)
