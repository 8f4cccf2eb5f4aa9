"""A newcomer's first hour (issue 12): the CLI on a real 3-node cluster, run as a user runs it.

One cluster for the module (`kraftpy cluster start`). Each test is one thing a
Kafka user types by habit and what they must see: the right records, a fast
failure naming the cause (`Error: CODE: message` on stderr, exit 1), no hang.
Every wait is bounded; nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_cluster_support import CliResult, LocalCluster, wait_for

pytestmark = pytest.mark.slow
NO_CLUSTER_CODE = "INVALID_CONFIG"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("firsthour") / "cluster") as c:
        yield c


def produce(cluster: LocalCluster, topic: str, lines: str, *args: str, timeout_s: float = 90) -> CliResult:
    argv = ("produce", topic, *args)
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *argv],
        input=lines, capture_output=True, text=True, timeout=timeout_s, env=cluster.env,
    )  # fmt: skip
    return CliResult(argv, proc.returncode, proc.stdout, proc.stderr)


def failed(result: CliResult, code_name: str) -> None:
    """Exit 1 with `Error: CODE_NAME: ...` on stderr, as every kraftpy command."""
    assert result.code == 1, str(result)
    assert f"Error: {code_name}: " in result.stderr, str(result)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- wrong results ------------------------------------------------------------------------------------


def test_consume_timeout_is_time_without_records_not_time_blocked_on_output(cluster: LocalCluster) -> None:
    """A reader that starts late still gets every record: a full pipe is not idle time."""
    count = 3_000
    cluster.ok("topics", "create", "slowreader", "--partitions", "1")
    body = "".join(f"{i:06d}-{'x' * 200}\n" for i in range(count))  # ~600 KB: far more than a pipe holds
    assert produce(cluster, "slowreader", body).code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "kraftpy.tools.cli", "consume", "slowreader", "--from-beginning", "--timeout-ms",
         "3000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.env, text=True,
    )  # fmt: skip
    try:
        time.sleep(10)  # the reader is late: the consumer is blocked on a full pipe meanwhile
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert len(out.splitlines()) == count, err
    assert f"Processed a total of {count} messages" in err


def test_keyless_lines_from_separate_runs_spread_over_partitions(cluster: LocalCluster) -> None:
    """KIP-480: each producer starts at a random partition, so short CLI runs do not all hit one."""
    cluster.ok("topics", "create", "spread", "--partitions", "6")
    runs = 8
    for i in range(runs):
        assert produce(cluster, "spread", f"line-{i}\n").code == 0
    result = cluster.ok(
        "consume", "spread", "--from-beginning", "--max-messages", str(runs), "--json", "--timeout-ms", "20000"
    )
    partitions = {json.loads(line)["partition"] for line in result.stdout.splitlines()}
    assert len(result.stdout.splitlines()) == runs
    assert len(partitions) > 1, partitions  # all on one: probability 6 * 6**-8 with a random start


def test_topics_create_refuses_a_partition_count_below_one(cluster: LocalCluster) -> None:
    """As kafka-topics: --partitions -1 is refused; leaving it out means the cluster's default."""
    failed(cluster.cli("topics", "create", "minus", "--partitions", "-1"), "INVALID_PARTITIONS")
    failed(cluster.cli("topics", "create", "minus", "--replication-factor", "0"), "INVALID_REPLICATION_FACTOR")
    assert "minus" not in cluster.ok("topics", "list").stdout.split()
    created = cluster.ok("topics", "create", "defaulted")
    assert "with 1 partition(s)" in created.stdout  # a local cluster's num_partitions


# --- hangs and slow failures ----------------------------------------------------------------------------


def test_consume_of_a_partition_the_topic_lacks_fails_at_once(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "five", "--partitions", "5")
    failed(cluster.cli("consume", "five", "--partition", "9", "--timeout-ms", "5000"), "UNKNOWN_TOPIC_OR_PARTITION")
    failed(cluster.cli("consume", "five", "-p", "9"), "UNKNOWN_TOPIC_OR_PARTITION")  # no hang without a timeout


def test_produce_to_a_missing_topic_says_unknown_topic(cluster: LocalCluster) -> None:
    result = produce(cluster, "no-such-topic", "x\n", "--max-block-ms", "3000")
    failed(result, "UNKNOWN_TOPIC_OR_PARTITION")
    assert "no-such-topic" in result.stderr


@contextlib.contextmanager
def under_min_isr(cluster: LocalCluster) -> Iterator[None]:
    """Topic "strict" (RF 2, min.insync.replicas 2) with its follower paused until the ISR is the leader
    alone: acks=all is refused with NOT_ENOUGH_REPLICAS. (A min ISR above the replication factor no
    longer does it: as Kafka 4.x, the effective min ISR is capped by the replica count.)"""
    cluster.ok(
        "topics", "create", "strict", "--replication-factor", "2", "--config", "min.insync.replicas=2",
        "--if-not-exists",
    )  # fmt: skip
    partition = wait_for("strict led", lambda: (p := cluster.describe("strict")["partitions"][0])["leader"] >= 0 and p)
    follower = next(r for r in partition["replicas"] if r != partition["leader"])
    pid = cluster.pid(follower)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        # A probe may first ask the paused follower (random placement): a third of the CLI's 30 s each.
        wait_for(
            "the ISR down to the leader",
            lambda: len(cluster.describe("strict")["partitions"][0]["isr"]) == 1,
            timeout_s=60,
        )
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        wait_for("the follower back in the ISR", lambda: len(cluster.describe("strict")["partitions"][0]["isr"]) == 2)


def test_not_enough_replicas_is_reported_on_the_first_failure(cluster: LocalCluster) -> None:
    """Too few in-sync replicas for acks=all: the broker's answer, not a delivery timeout."""
    with under_min_isr(cluster):
        # Said at once, then retried until the delivery timeout; the final error names the broker's answer.
        result = produce(cluster, "strict", "x\n", "--delivery-timeout-ms", "8000", timeout_s=60)
        failed(result, "REQUEST_TIMED_OUT")
        lines = result.stderr.splitlines()
        assert lines[0].startswith("Warning: NOT_ENOUGH_REPLICAS: "), result.stderr
        assert "last error: NOT_ENOUGH_REPLICAS" in lines[-1] and len(lines) == 2, result.stderr
        # With a retry budget (kafka-console-producer's 3), the broker's answer is the error itself.
        failed(produce(cluster, "strict", "x\n", "--retries", "3", timeout_s=60), "NOT_ENOUGH_REPLICAS")


def test_a_stopped_first_bootstrap_broker_leaves_admin_commands_working(cluster: LocalCluster) -> None:
    """The first server a command asks accepts connections and never answers (SIGSTOP): `topics describe`
    and `quorum status` give up on it after their request's share of --timeout-ms and ask the next.
    (They once spent the whole timeout on it and failed although two brokers were serving.)"""
    cluster.ok("topics", "create", "hung-first", "--replication-factor", "3", "--if-not-exists")
    layout = cluster.layout()
    first = next(n for n in layout.nodes if "broker" in n.roles and n.kafka_address)
    assert layout.kafka_bootstrap_servers.split(",")[0] == first.kafka_address  # the one asked first
    pid = cluster.pid(first.node_id)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        described = cluster.ok("topics", "describe", "hung-first", "--json", "--timeout-ms", "30000").json()
        assert [p["partition"] for p in described["partitions"]] == [0], described
        quorum = cluster.ok("quorum", "status", "--json", "--timeout-ms", "30000").json()
        assert quorum["leader_id"] >= 0, quorum
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(
        "the stopped broker back in the ISR",
        lambda: first.node_id in cluster.describe("hung-first")["partitions"][0]["isr"],
        timeout_s=60,
    )


def test_a_silent_first_bootstrap_server_leaves_group_lag_working(cluster: LocalCluster) -> None:
    """`groups describe` reads the lag with a consumer of its own (end offsets): named first in
    --bootstrap-server, a server that accepts connections and never answers costs that consumer's
    request a third of --timeout-ms too, and the next server answers."""
    cluster.ok("topics", "create", "silent-first", "--partitions", "1", "--if-not-exists")
    assert produce(cluster, "silent-first", "x\n").code == 0
    cluster.ok("consume", "silent-first", "--group", "silent-g", "--from-beginning", "-n", "1")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshakes; nothing ever reads or answers
        servers = f"127.0.0.1:{silent.getsockname()[1]},{cluster.bootstrap_servers}"
        result = cluster.ok(
            "groups", "describe", "silent-g", "--json", "--bootstrap-server", servers, "--timeout-ms", "30000"
        )
    rows = result.json()["partitions"]
    assert [(r["committed_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [(1, 1, 0)], rows


def test_produce_bounds_are_honoured(cluster: LocalCluster) -> None:
    """The delivery timeout bounds a record the brokers keep refusing (here NOT_ENOUGH_REPLICAS, retried)."""
    with under_min_isr(cluster):
        result = produce(
            cluster, "strict", "x\n", "--retries", "1000000", "--delivery-timeout-ms", "3000", timeout_s=60
        )
        failed(result, "REQUEST_TIMED_OUT")
        assert "NOT_ENOUGH_REPLICAS" in result.stderr  # the broker's last answer is named


# --- one voice ---------------------------------------------------------------------------------------


def test_client_commands_without_a_cluster_say_error_code_message(cluster: LocalCluster, tmp_path) -> None:
    for argv in (("produce", "t"), ("consume", "t"), ("topics", "list")):
        result = cluster.cli(*argv, "--dir", str(tmp_path / "none"))
        failed(result, NO_CLUSTER_CODE)
        assert result.stderr.startswith("Error: "), str(result)


def test_usage_errors_exit_2(cluster: LocalCluster) -> None:
    for argv in (("consume",), ("produce", "t", "--acks", "7"), ("topics", "create")):
        result = cluster.cli(*argv)
        assert result.code == 2, str(result)


def test_print_partition_and_short_flags(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "habits", "-p", "2")
    assert produce(cluster, "habits", "hello\n", "-p", "1").code == 0
    result = cluster.ok("consume", "habits", "-p", "1", "-o", "earliest", "-n", "1", "--print-partition",
                        "--print-offset")  # fmt: skip
    assert result.stdout.splitlines() == ["Partition:1\tOffset:0\thello"]


def piped(cluster: LocalCluster, *argv: str) -> CliResult:
    """The command with stdout piped and no COLUMNS: what `kraftpy ... | less` shows."""
    env = {k: v for k, v in cluster.env.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *argv],
        capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return CliResult(argv, proc.returncode, proc.stdout, proc.stderr)


def assert_fits(result: CliResult) -> None:
    assert "…" not in result.stdout, str(result)
    assert all(len(line) <= 80 for line in result.stdout.splitlines()), str(result)


def test_tables_fit_80_columns_when_piped(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "wide", "--partitions", "3", "--config", "retention.ms=86400000")
    for argv in (("cluster", "status"), ("quorum", "status"), ("topics", "describe", "wide")):
        result = piped(cluster, *argv)
        assert result.code == 0, str(result)
        assert_fits(result)
    assert "combined" in piped(cluster, "cluster", "status").stdout


# --- long work shows progress ---------------------------------------------------------------------------


def test_perf_produce_and_consume_print_progress_lines(cluster: LocalCluster) -> None:
    """kafka-*-perf-test print a line per reporting interval, also while nothing moves."""
    cluster.ok("topics", "create", "perf", "--partitions", "2")
    produced = cluster.ok(
        "perf", "produce", "--topic", "perf", "--num-records", "300", "--record-size", "10",
        "--throughput", "100", "--reporting-interval-ms", "500",
    )  # fmt: skip
    assert sum(" records sent, " in line for line in produced.stdout.splitlines()) >= 2, str(produced)
    # Asking for more than the topic holds: the consumer stalls, and says so every interval until its timeout.
    stalled = cluster.cli(
        "perf", "consume", "--topic", "perf", "--num-records", "1000", "--timeout-ms", "3000",
        "--reporting-interval-ms", "500", "--json",
    )  # fmt: skip
    assert stalled.code == 1, str(stalled)
    assert "0 records consumed, 0.0 records/sec" in stalled.stderr, str(stalled)
    assert json.loads(stalled.stdout)["records"] == 300  # --json: stdout stays one object


def test_keyless_records_on_a_compacted_topic_are_rejected(cluster: LocalCluster) -> None:
    """Kafka's LogValidator: a compacted topic takes only keyed records (INVALID_RECORD)."""
    cluster.ok("topics", "create", "compacted", "--config", "cleanup.policy=compact")
    result = produce(cluster, "compacted", "no key\n")
    failed(result, "INVALID_RECORD")
    assert "without key" in result.stderr
    assert produce(cluster, "compacted", "k:v\n", "--key-separator", ":").code == 0


def test_log_dump_decodes_metadata_records(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "dumped")
    segment = sorted(cluster.dir.glob("node-1/**/__cluster_metadata-0/*.log"))[0]
    as_json = cluster.ok("log", "dump", str(segment), "--print-records", "--json")
    decoded = [
        m
        for batch in map(json.loads, as_json.stdout.splitlines())
        for record in batch["records"] or []
        for m in record.get("metadata_records", [])
    ]
    assert any(m["type"] == "TopicRecord" and m["name"] == "dumped" for m in decoded), as_json.stdout[-2000:]
    text = cluster.ok("log", "dump", str(segment), "--print-records")
    assert "TopicRecord(" in text.stdout and "name=dumped" in text.stdout


# --- last: these kill nodes ----------------------------------------------------------------------------


def test_dead_nodes_are_shown_unreachable(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    cluster.kill(leader)

    def quorum_without_the_dead() -> dict | None:
        body = cluster.cli("quorum", "status", "--json", "--timeout-ms", "5000")
        return body.json() if body.code == 0 and body.json()["leader_id"] not in (None, leader) else None

    wait_for("a new quorum leader", quorum_without_the_dead, timeout_s=60)

    def dead_row() -> str | None:
        table = piped(cluster, "quorum", "status")
        assert_fits(table)
        lines = table.stdout.splitlines()
        row = next(line for line in lines if line.replace("│", " ").split()[:1] == [str(leader)])
        return row if "unreachable" in row and "voter" in row else None

    # Unreachable once the new leader has not heard from it for KRaft's fetch timeout (2 s).
    wait_for("the dead voter shown unreachable", dead_row, timeout_s=30)
    # Two of three down, the new leader among them: the survivor may still name it; the quorum has no leader.
    second = quorum_without_the_dead()["leader_id"]
    survivor = next(n for n in (1, 2, 3) if n not in (leader, second))
    cluster.kill(second)
    status = piped(cluster, "cluster", "status")
    assert status.code == 1
    assert f"node {second}, named quorum leader by its followers, is unreachable" in status.stderr
    assert cluster.health()["controller"]["leader_id"] is None, status.stdout
    header = next(line.split() for line in status.stdout.splitlines() if line.split()[:1] == ["node"])
    for line in status.stdout.splitlines():
        cells = line.split()
        if cells and cells[0] == str(survivor):
            assert "up" in cells and "combined" in cells, status.stdout
            # The leader column: not the dead node it last heard of.
            assert cells[header.index("leader")] == "none", status.stdout
        if cells and cells[0] in (str(leader), str(second)):
            assert "down" in cells, status.stdout
    assert_fits(status)
    # No quorum, leaders dead: produce ends within its bounds, in one line, whatever the brokers answer.
    stuck = produce(cluster, "five", "x\n", "--max-block-ms", "5000", "--delivery-timeout-ms", "10000", timeout_s=60)
    lines = stuck.stderr.splitlines()
    assert stuck.code == 1 and lines[-1].startswith("Error: "), str(stuck)
    assert len(lines) <= 2 and all(line.startswith(("Warning: ", "Error: ")) for line in lines), str(stuck)
