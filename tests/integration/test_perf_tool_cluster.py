"""`kraftpy perf produce` folds its latencies while it runs, against a real cluster: the memory a long
run takes is bounded by the fold threshold and the records in flight, not by the records sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kraftpy.tools.commands import perf
from tests.integration.test_cluster_support import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("perf") / "cluster") as c:
        yield c


def test_perf_produce_folds_latencies_as_it_sends(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.ok("topics", "create", "perf-fold", "--partitions", "3", "--replication-factor", "3")
    monkeypatch.setattr(perf, "FOLD_AT", 500)
    held_at_fold: list[int] = []
    fold = perf.LatencyStats.fold

    def recorded(self: perf.LatencyStats) -> None:
        held_at_fold.append(len(self.recent))
        fold(self)

    monkeypatch.setattr(perf.LatencyStats, "fold", recorded)
    servers = [tuple(s.rsplit(":", 1)) for s in cluster.bootstrap_servers.split(",")]
    servers = [(host, int(port)) for host, port in servers]
    records = 20_000
    result = asyncio.run(perf.produce_records(servers, "perf-fold", records, 100, -1, {"acks": "all"}))
    assert result.errors == 0 and result.records == records
    stats = result.latencies
    assert stats.count == records and len(stats.sample) == records and not stats.recent  # stride 1 below 500,000
    assert 0 < stats.total_ms / stats.count <= stats.max_ms
    # Folded many times while sending, each time holding about FOLD_AT latencies, never the whole run's.
    assert len(held_at_fold) >= 5 and max(held_at_fold) < records // 2, held_at_fold
