"""Stop and restart a whole real cluster: every topic comes back as it was, through snapshots and log replay.

The nodes run with a tiny `metadata_snapshot_max_new_record_bytes`, so each
node snapshots its image into Raft several times and trims its log; a
restart then loads the latest snapshot and replays the log after it. Topic
names, ids, partition counts, replica lists and config overrides must be
identical after `cluster stop` + `cluster start`, and after a second round.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("restart") / "cluster") as c:
        yield c


def durable_view(cluster: LocalCluster) -> dict[str, Any]:
    """What must survive a restart (leaders and ISRs may legitimately differ)."""
    topics = cluster.ok("topics", "describe", "--json").json()["topics"]
    return {t["name"]: (t["topic_id"], [p["replicas"] for p in t["partitions"]], t["configs"]) for t in topics}


def restart(cluster: LocalCluster) -> None:
    cluster.ok("cluster", "stop", "--timeout-s", "10")
    assert all(cluster.pid(n) is None for n in (1, 2, 3))
    cluster.start()


def test_every_topic_survives_full_restarts_with_snapshots(cluster: LocalCluster) -> None:
    cluster.write_setting("metadata_snapshot_max_new_record_bytes", 1500)  # read at the next start
    restart(cluster)

    for i in range(8):
        args = ["topics", "create", f"keep-{i}", "--partitions", str(1 + i % 4), "--replication-factor", str(1 + i % 3)]
        if i % 2:
            args += ["--config", f"retention_ms={1000 * (i + 1)}"]
        cluster.ok(*args)
    cluster.ok("topics", "alter", "keep-0", "--partitions", "3")
    cluster.ok("topics", "delete", "keep-7")
    cluster.ok("configs", "set", "--topic", "keep-2", "cleanup_policy=compact")
    before = durable_view(cluster)
    assert len(before) == 7 and len(before["keep-0"][1]) == 3

    def snapshotted() -> bool:
        statuses = [cluster.status(n) for n in (1, 2, 3)]
        return all(s is not None and s["metadata"]["last_snapshot_offset"] > 0 for s in statuses)

    wait_for("every node to snapshot its metadata", snapshotted)

    for round_no in (1, 2):
        restart(cluster)
        after = durable_view(cluster)
        assert after == before, f"round {round_no}"
        for n in (1, 2, 3):
            status = cluster.status(n)
            assert status["metadata"]["replay_errors"] == 0
            assert "loaded metadata snapshot" in cluster.log_text(n)
        assert cluster.health()["healthy"] is True
        if round_no == 1:
            # The restarted cluster still takes writes, and they survive the next round too.
            cluster.ok("topics", "create", "post-restart", "--partitions", "2")
            before = durable_view(cluster)
            assert "post-restart" in before
