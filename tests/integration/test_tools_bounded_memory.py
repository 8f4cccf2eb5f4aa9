"""The CLI's producers hold memory that follows the records in flight, not the length of the run,
against a real cluster: `kraftpy perf produce` folds its latencies as it sends, and `kraftpy produce`
counts each line's outcome as its future settles instead of keeping a future per line."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator

import pytest

from kraftpy.client.shell.producer import Producer
from kraftpy.tools.commands import perf
from kraftpy.tools.commands.produce import produce_lines
from tests.integration.test_cluster_support import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("tools") / "cluster") as c:
        yield c


def servers_of(cluster: LocalCluster) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, port in (s.rsplit(":", 1) for s in cluster.bootstrap_servers.split(","))]


def test_perf_produce_folds_latencies_as_it_sends(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.ok("topics", "create", "perf-fold", "--partitions", "3", "--replication-factor", "3")
    monkeypatch.setattr(perf, "FOLD_AT", 500)
    held_at_fold: list[int] = []
    fold = perf.LatencyStats.fold

    def recorded(self: perf.LatencyStats) -> None:
        held_at_fold.append(len(self.recent))
        fold(self)

    monkeypatch.setattr(perf.LatencyStats, "fold", recorded)
    records = 20_000
    # No progress line in the run (an hour apart): each fold but the last is then the send loop's. With
    # 64 KiB of buffer memory send() waits for acknowledgements, so they come in while it sends; with
    # the default 32 MiB a fast machine buffered nearly all 20,000 records before the first came back.
    config = {"acks": "all", "buffer_memory": 65_536, "batch_size": 16_384}
    result = asyncio.run(perf.produce_records(servers_of(cluster), "perf-fold", records, 100, -1, config, 3_600_000))
    assert result.errors == 0 and result.records == records
    stats = result.latencies
    assert stats.count == records and len(stats.sample) == records and not stats.recent  # stride 1 below 500,000
    assert 0 < stats.total_ms / stats.count <= stats.max_ms
    # Folded many times while sending, each time holding about FOLD_AT latencies (and what one turn of
    # the loop acknowledged), never the run's; the last fold holds what flush() waited for.
    while_sending = held_at_fold[:-1]
    assert len(while_sending) >= 5 and max(while_sending) < 500 + 5_000, held_at_fold


def test_kraftpy_produce_keeps_no_future_per_line(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A future kept per line made `kraftpy produce < big-file` grow with the file. With 64 KiB of
    buffer memory, send() waits for acknowledgements, so by line 20,000 nearly every earlier record
    is acknowledged: only those still buffered or in flight may be alive."""
    cluster.ok("topics", "create", "produce-lines", "--partitions", "3", "--replication-factor", "3")
    futures: list[weakref.ref] = []
    send = Producer.send

    async def recorded(self: Producer, *args: object, **kwargs: object) -> object:
        future = await send(self, *args, **kwargs)
        futures.append(weakref.ref(future))
        return future

    monkeypatch.setattr(Producer, "send", recorded)
    alive_at: list[int] = []
    lines_total = 30_000

    def lines() -> Iterator[bytes]:
        for i in range(lines_total):
            if i == 20_000:
                alive_at.append(sum(ref() is not None for ref in futures))
            yield b"line %d" % i

    config = {"acks": "all", "buffer_memory": 65_536, "batch_size": 16_384}
    outcome = asyncio.run(
        produce_lines(servers_of(cluster), "produce-lines", lines(), key_separator=None, partition=None, config=config)
    )
    assert outcome == (lines_total, 0, None)
    assert len(futures) == lines_total and alive_at[0] < 5_000, alive_at
