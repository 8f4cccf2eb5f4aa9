"""Leadership after a full restart (issue 12): `kraftpy topics elect-leaders` and the controller's
own move back to preferred leaders within `preferred_leader_election_delay_ms`, on a real cluster.

One 3-node cluster, restarted twice with different settings (`cluster stop`, a node setting,
`cluster start`). Every wait is bounded; nothing asserts on elapsed time.
"""

from __future__ import annotations

import pytest

from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow
TOPIC = "lead"
PARTITIONS = 6


def not_preferred(cluster: LocalCluster) -> list[int]:
    parts = cluster.describe(TOPIC)["partitions"]
    return [p["partition"] for p in parts if p["leader"] != p["replicas"][0]]


def restart(cluster: LocalCluster, delay_ms: int) -> None:
    """Stop and start the cluster, then wait for every replica back in its ISR: a broker shut down
    leaves the ISRs and rejoins once caught up, and until then a preferred leader outside its ISR
    cannot be elected (PREFERRED_LEADER_NOT_AVAILABLE, as Kafka answers)."""
    cluster.ok("cluster", "stop", "--timeout-ms", "20000")
    cluster.write_setting("preferred_leader_election_delay_ms", delay_ms)
    cluster.start()
    cluster.controller_id()
    wait_for(
        "every replica back in its ISR",
        lambda: all(set(p["isr"]) == set(p["replicas"]) for p in cluster.describe(TOPIC)["partitions"]),
        timeout_s=60,
    )


def test_elect_leaders_and_the_controllers_own_return_to_preferred_leaders(tmp_path) -> None:
    with LocalCluster(tmp_path / "cluster") as cluster:
        cluster.ok("topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3")
        # Usage and unknown partitions first, as kafka-leader-election.
        bad = cluster.cli("topics", "elect-leaders", "--partition", "1")
        assert bad.code == 2, str(bad)
        for argv in (("nope",), (TOPIC, "--partition", "9")):
            result = cluster.cli("topics", "elect-leaders", *argv)
            assert result.code == 1 and "Error: UNKNOWN_TOPIC_OR_PARTITION: " in result.stderr, str(result)

        # The controller will not move leaders on its own for 10 minutes: the command does it.
        restart(cluster, 600_000)
        before = not_preferred(cluster)
        result = cluster.ok("topics", "elect-leaders", TOPIC)
        if before:
            assert "Successfully completed leader election (PREFERRED) for partitions" in result.stdout, str(result)
        wait_for("preferred leaders after elect-leaders", lambda: not not_preferred(cluster) or None, timeout_s=30)
        again = cluster.ok("topics", "elect-leaders", TOPIC, "--partition", "0")
        assert "Valid replica already elected for partitions lead-0" in again.stdout, str(again)
        unclean = cluster.ok("topics", "elect-leaders", "--type", "unclean", TOPIC, "-p", "0")
        assert "Valid replica already elected" in unclean.stdout, str(unclean)  # it has a leader

        # A full restart with a short delay: the controller spreads leadership back by itself.
        restart(cluster, 2_000)
        wait_for("preferred leaders after a full restart", lambda: not not_preferred(cluster) or None, timeout_s=60)
