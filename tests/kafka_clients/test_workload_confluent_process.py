"""A fault run's librdkafka client lives in a child process: a call that hangs is bounded, and stops nothing else.

In the run's own process, confluent-kafka's Consumer.close() once held the GIL for minutes (librdkafka
issue 4884), and every worker, the nemesis and the history with it. Here the child is stopped
(SIGSTOP: it answers nothing, as a process stuck holding its GIL): the call ends at its bound with
TimeoutError, the child is killed, and the caller's event loop kept running meanwhile. The child's
errors reach the runner as the exceptions it judges, and the child dies with its parent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import confluent_kafka as ck
import pytest

from kraftpy.tools.faults.workloads.clients import ClientSpec, ConfluentClient
from tests.integration.test_cluster_support import LocalCluster, wait_for

BOUND_S = 3.0


def spec_for(cluster: LocalCluster, topic: str) -> ClientSpec:
    return ClientSpec(cluster.bootstrap_servers, topic, 2, "assign", transactional=False, group_id=f"cp-{uuid.uuid4()}")


def test_a_child_that_stops_answering_is_killed_at_the_bound_and_the_loop_runs_on(kafka_cluster: LocalCluster) -> None:
    topic = "confluent-process-hang"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "3")

    async def scenario() -> tuple[float, int, BaseException]:
        client = ConfluentClient(spec_for(kafka_cluster, topic), 0, 0, call_timeout_s=BOUND_S)
        try:
            await client.open()
            assert await client.send(1, "before") >= 0
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.05)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            os.kill(client.child.pid, signal.SIGSTOP)
            started = time.monotonic()
            with pytest.raises(TimeoutError) as caught:
                await client.poll()
            took = time.monotonic() - started
            assert client.child.returncode == -signal.SIGKILL, "the hung child was not killed at the bound"
            with pytest.raises(TimeoutError, match="killed when poll hung"):  # as unknown as the call that hung
                await client.abort()
            ticker.cancel()
            return took, ticks, caught.value
        finally:
            await client.close()
            assert client.child.returncode is not None, "close left librdkafka's child running"

    took, ticks, error = asyncio.run(scenario())
    assert BOUND_S <= took < BOUND_S + 5, took
    assert ticks >= (BOUND_S / 0.05) / 2, f"the event loop stood still while the child hung: {ticks} ticks"
    assert "was killed" in str(error)


def test_errors_reach_the_runner_typed_and_a_cancelled_call_retires_the_child(kafka_cluster: LocalCluster) -> None:
    topic = "confluent-process-errors"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "3")

    async def scenario() -> BaseException:
        client = ConfluentClient(spec_for(kafka_cluster, topic), 0, 0)
        try:
            await client.open()
            assert await client.send(0, "a") >= 0
            with pytest.raises(ck.KafkaException) as caught:
                await client.send(7, "no such partition")
            assert not client.fatal(caught.value)  # a Kafka error, not a crash of the adapter
            assert await client.end_offsets() == {0: 1, 1: 0}
            while await client.poll():  # read 'a': the next poll waits its whole 0.3 s
                pass
            with pytest.raises(TimeoutError):  # cancelled: its answer would have come to the next call
                await asyncio.wait_for(client.poll(), 0.05)
            with pytest.raises(TimeoutError, match="killed when poll hung"):
                await client.assigned()
            return caught.value
        finally:
            await client.close()

    error = asyncio.run(scenario())
    assert error.args[0].code() == ck.KafkaError._UNKNOWN_PARTITION, error


PARENT = """
import asyncio, sys, time
from kraftpy.tools.faults.workloads.clients import ClientSpec, ConfluentClient
client = ConfluentClient(ClientSpec(sys.argv[1], "unused", 1, "assign", False, "cp-orphan"), 0, 0)
print(client.child.pid, flush=True)
time.sleep(600)
"""


def test_the_child_dies_with_its_parent_even_when_hung(kafka_cluster: LocalCluster) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, kafka_cluster.bootstrap_servers], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        wait_for("the child to start librdkafka", lambda: _started(child), timeout_s=30)
        os.kill(child, signal.SIGSTOP)  # hung (as in a call holding its GIL): it would never see the socket close
    finally:
        parent.kill()
        parent.wait()
    try:
        wait_for(f"the child {child} to die with its parent", lambda: not _alive(child), timeout_s=10)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def _started(pid: int) -> bool | None:
    """The child runs librdkafka (its threads exist), so it armed its death signal before (its first step)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except FileNotFoundError:
        return None
    return threads > 1 or None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
