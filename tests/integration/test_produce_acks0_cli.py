"""acks=0 on a healthy real cluster writes every record (issue 11 §3), through the CLI as a user runs it.

`kraftpy produce --acks 0` of 100 lines exited 0 and wrote none: each batch
counted as done when it was drained, so close() found nothing pending and the
process exited before the request was written; and the server cancelled the
calls of a stream that ended, even ones it had read. Now a batch is done once
its request is written, close() waits for that, the stream's close handshake
lets the broker read it, and the broker handles every call it read.
The records arrive asynchronously (nobody waits for the high watermark with
acks=0), so the count is polled with a bound.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kraftpy.client import Consumer, TopicPartition
from tests.integration.test_cluster_support import CLI_TIMEOUT_S, LocalCluster, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("acks0") / "cluster") as c:
        yield c


def records_in(cluster: LocalCluster, topic: str) -> int:
    async def count() -> int:
        async with Consumer(cluster.layout().kafka_bootstrap_servers) as consumer:
            tps = [TopicPartition(topic, p) for p in await consumer.partitions_for(topic)]
            ends, begins = await consumer.end_offsets(tps), await consumer.beginning_offsets(tps)
            return sum(ends.values()) - sum(begins.values())

    return asyncio.run(count())


def wait_for_count(cluster: LocalCluster, topic: str, expected: int) -> None:
    seen: list[int] = []

    def probe() -> bool:
        seen.append(records_in(cluster, topic))
        return seen[-1] >= expected

    wait_for(f"{expected} records in {topic}", probe, timeout_s=30)
    assert seen[-1] == expected, f"{seen[-1]} records in {topic}, expected {expected}"


@pytest.mark.parametrize("run", range(3))
def test_cli_produce_acks_0_writes_every_line(cluster: LocalCluster, run: int) -> None:
    topic = f"a0-{run}"
    cluster.ok("topics", "create", topic, "--partitions", "6", "--replication-factor", "3")
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "produce", topic, "--acks", "0"],
        input="".join(f"{i}\n" for i in range(1, 101)),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=cluster.env,
    )
    assert proc.returncode == 0, proc.stderr
    wait_for_count(cluster, topic, 100)


def test_perf_produce_acks_0_writes_every_record(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "pa0", "--partitions", "6", "--replication-factor", "3")
    cluster.ok("perf", "produce", "--topic", "pa0", "--num-records", "5000", "--record-size", "100", "--acks", "0")
    wait_for_count(cluster, "pa0", 5000)
