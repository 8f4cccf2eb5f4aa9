"""`kraftpy groups ...` and `kraftpy consume --group` on a real 3-node cluster, run as a user runs them.

One cluster for the module (`kraftpy cluster start`, which sets
group_initial_rebalance_delay_ms = 0), a topic `orders` with 10 records in
each of its 3 partitions. One test works on a group that only holds offsets
(written by `reset-offsets --execute`); the other on a group with a real
member (`consume --group` in a subprocess, stopped with SIGINT by pid).
Every wait is a bounded poll; nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_cluster_support import CliResult, LocalCluster, hung_process_report, wait_for

pytestmark = pytest.mark.slow
TOPIC = "orders"
PER_PARTITION = 10
PARTITIONS = 3
DESCRIBE_KEYS = {"group", "state", "members", "partitions"}
PARTITION_KEYS = {"topic", "partition", "committed_offset", "log_end_offset", "lag"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups-cli") / "cluster") as c:
        c.ok("topics", "create", TOPIC, "--partitions", str(PARTITIONS))
        for p in range(PARTITIONS):
            lines = "".join(f"p{p}-{i}\n" for i in range(PER_PARTITION))
            proc = subprocess.run(
                [sys.executable, "-m", "kraftpy.tools.cli", "produce", TOPIC, "--partition", str(p)],
                input=lines, capture_output=True, text=True, timeout=60, env=c.env,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
        yield c


def failed(result: CliResult, code_name: str) -> None:
    """Exit 1 with `Error: CODE_NAME: ...` on stderr, as every kraftpy command."""
    assert result.code == 1, str(result)
    assert f"Error: {code_name}: " in result.stderr, str(result)


def describe(cluster: LocalCluster, group: str) -> dict[str, Any]:
    shape = cluster.ok("groups", "describe", group, "--json").json()
    assert set(shape) == DESCRIBE_KEYS
    for row in shape["partitions"]:
        assert set(row) == PARTITION_KEYS
    for m in shape["members"]:
        assert set(m) == {"member_id", "client_id", "assignment"}
        assert all(set(a) == {"topic", "partition"} for a in m["assignment"])
    return shape


def by_partition(shape: dict[str, Any], key: str) -> dict[int, Any]:
    return {row["partition"]: row[key] for row in shape["partitions"] if row["topic"] == TOPIC}


def reset(cluster: LocalCluster, group: str, *args: str) -> dict[str, Any]:
    return cluster.ok("groups", "reset-offsets", group, "--json", *args).json()


def test_offsets_only_group_reset_dry_run_execute_describe_and_delete(cluster: LocalCluster) -> None:
    failed(cluster.cli("groups", "describe", "audit"), "GROUP_ID_NOT_FOUND")
    failed(cluster.cli("groups", "delete", "nobody"), "GROUP_ID_NOT_FOUND")
    failed(
        cluster.cli("groups", "reset-offsets", "audit", "--topic", "nope", "--to-latest"), "UNKNOWN_TOPIC_OR_PARTITION"
    )
    failed(cluster.cli("groups", "reset-offsets", "audit", "--topic", f"{TOPIC}:7", "--to-latest"),
           "UNKNOWN_TOPIC_OR_PARTITION")  # fmt: skip

    # A dry run prints the plan and changes nothing.
    plan = reset(cluster, "audit", "--topic", TOPIC, "--to-latest")
    assert plan["executed"] is False
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in plan["partitions"]] == [
        (p, None, PER_PARTITION) for p in range(PARTITIONS)
    ]
    table = cluster.ok("groups", "reset-offsets", "audit", "--topic", TOPIC, "--to-earliest")
    assert "Dry run" in table.stderr and "audit" in table.stdout
    failed(cluster.cli("groups", "describe", "audit"), "GROUP_ID_NOT_FOUND")

    # --execute commits the plan as a member-less commit: the group exists, Empty, with offsets.
    assert reset(cluster, "audit", "--topic", TOPIC, "--to-latest", "--execute")["executed"] is True
    shape = describe(cluster, "audit")
    assert (shape["group"], shape["state"], shape["members"]) == ("audit", "Empty", [])
    assert by_partition(shape, "committed_offset") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert by_partition(shape, "lag") == dict.fromkeys(range(PARTITIONS), 0)

    shifted = reset(cluster, "audit", "--topic", f"{TOPIC}:0", "--shift-by", "-3", "--execute")
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in shifted["partitions"]] == [
        (0, PER_PARTITION, PER_PARTITION - 3)
    ]
    reset(cluster, "audit", "--topic", f"{TOPIC}:1,2", "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    reset(cluster, "audit", "--topic", f"{TOPIC}:2", "--to-offset", "999", "--execute")  # clamped to the log end
    shape = describe(cluster, "audit")
    assert by_partition(shape, "committed_offset") == {0: PER_PARTITION - 3, 1: 0, 2: PER_PARTITION}
    assert by_partition(shape, "lag") == {0: 3, 1: PER_PARTITION, 2: 0}
    assert by_partition(shape, "log_end_offset") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    human = cluster.ok("groups", "describe", "audit")
    assert "Group audit: Empty" in human.stdout and "no active members" in human.stdout

    listed = cluster.ok("groups", "list", "--json").json()
    assert {"group": "audit", "state": "Empty"} in listed["groups"]
    assert "audit" not in cluster.ok("groups", "list", "--state", "stable").stdout.split()

    deleted = cluster.ok("groups", "delete", "audit")
    assert "Deleted consumer group audit." in deleted.stdout
    assert "audit" not in cluster.ok("groups", "list").stdout.split()


def start_member(cluster: LocalCluster, group: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kraftpy.tools.cli", "consume", TOPIC, "--group", group, "--timeout-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=cluster.env,
    )  # fmt: skip


def stop_member(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGINT (Ctrl-C: the consumer commits and leaves the group), bounded; SIGKILL by pid if it hangs."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        report = hung_process_report(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(
            f"consume --group did not stop on SIGINT\nstdout: {out}\nstderr: {err}\nthen: {report}"
        ) from None


def test_consume_group_commits_and_an_active_group_is_protected(cluster: LocalCluster) -> None:
    first = cluster.ok(
        "consume", TOPIC, "--group", "billing", "--from-beginning", "--max-messages", "12", "--timeout-ms", "30000"
    )
    seen = first.stdout.split()
    assert len(seen) == 12 and "Processed a total of 12 messages" in first.stderr
    shape = describe(cluster, "billing")
    assert shape["state"] == "Empty" and shape["members"] == []
    assert sum(by_partition(shape, "committed_offset").values()) == 12  # exactly what was printed
    assert sum(by_partition(shape, "lag").values()) == PARTITIONS * PER_PARTITION - 12

    member = start_member(cluster, "billing")
    try:

        def stable() -> dict[str, Any] | None:
            s = describe(cluster, "billing")
            return s if s["state"] == "Stable" and s["members"] and s["members"][0]["assignment"] else None

        shape = wait_for("billing to be Stable with a member", stable, timeout_s=30)
        (m,) = shape["members"]
        assert m["client_id"] == "kraftpy-console-consumer"
        assert sorted(a["partition"] for a in m["assignment"]) == list(range(PARTITIONS))
        human = cluster.ok("groups", "describe", "billing").stdout
        assert "Group billing: Stable, assignor range, 1 member(s)" in human and m["member_id"] in human
        # Piped into an 80-column reader: every line fits and the member id is still whole on one line.
        narrow = subprocess.run(
            [sys.executable, "-m", "kraftpy.tools.cli", "groups", "describe", "billing"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={k: v for k, v in cluster.env.items() if k != "COLUMNS"},
        )  # fmt: skip
        assert all(len(line) <= 80 for line in narrow.stdout.splitlines()), narrow.stdout
        assert m["member_id"] in narrow.stdout, narrow.stdout

        refused = cluster.cli("groups", "reset-offsets", "billing", "--topic", TOPIC, "--to-earliest")
        failed(refused, "NON_EMPTY_GROUP")
        assert "current state is Stable" in refused.stderr
        failed(cluster.cli("groups", "delete", "billing"), "NON_EMPTY_GROUP")
        wait_for("the member to catch up", lambda: sum(by_partition(describe(cluster, "billing"), "lag").values()) == 0)
    finally:
        out, err = stop_member(member)
    rest = out.split()
    assert "Processed a total of 18 messages" in err, err
    assert sorted(seen + rest) == sorted(f"p{p}-{i}" for p in range(PARTITIONS) for i in range(PER_PARTITION))

    shape = wait_for("billing to be Empty", lambda: (s := describe(cluster, "billing"))["state"] == "Empty" and s)
    assert by_partition(shape, "committed_offset") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    both = cluster.cli("groups", "delete", "billing", "nobody")
    assert both.code == 1 and "Deleted consumer group billing." in both.stdout
    assert "GROUP_ID_NOT_FOUND: cannot delete group 'nobody'" in both.stderr
