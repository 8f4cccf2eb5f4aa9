"""A short `kraftpy faults run` per workload x client (tools/faults/workloads/), valid; and a broken build
the txn run must catch.

Each run (a pause nemesis, --no-audit: the replica audit is test_faults.py's) must exit 0 and its
history must hold what the workload claims: the queue workload's single sends and polls with records
read back, the txn workload's transactions of several micro-ops, committed (ok) and aborted (fail), and
every consumer's final drain. The clients are kraftpy's and librdkafka's (confluent-kafka); the consumer
modes alternate so both `assign` and `subscribe` run through both clients' workloads.

The broken build: KRAFTPY_TEST_BREAK=read-committed-ignores-aborts (broker/shell/fault_injection.py)
stops telling read_committed fetches which transactions aborted, so a consumer reads the writes of the
transactions the workload aborted: the same txn run must exit 1 naming G1a (aborted read).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.netns import list_namespaces, supported
from tests.jepsen_like.test_faults import break_env

pytestmark = pytest.mark.slow

TIME_LIMIT_S = 8
RUN_TIMEOUT_S = 300
CASES = {  # (workload, client): (seed, sub_via)
    ("queue", "kraftpy"): (41, "assign"),
    ("queue", "confluent"): (42, "subscribe"),
    ("txn", "kraftpy"): (43, "subscribe"),
    ("txn", "confluent"): (44, "assign"),
}


def faults_run(out: Path, workload: str, client: str, sub_via: str, seed: int, broken: str | None = None):
    env = break_env(broken)
    args = ("--seed", str(seed), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", "pause", "--no-audit")
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "faults", "run", *args, "--workload", workload,
         "--client", client, "--sub-via", sub_via, "--out", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    path = out / "summary.json"
    assert path.exists(), f"no summary; exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    return proc, json.loads(path.read_text()), history


def worker_ops(history: list[dict], f: str, type_: str) -> list[dict]:
    return [e for e in history if e["f"] == f and e["type"] == type_ and isinstance(e["process"], int)]


def polled(events: list[dict]) -> int:
    return sum(len(m[1]) for e in events for m in e["value"] if m[0] == "poll")


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")


@pytest.mark.parametrize(("workload", "client"), sorted(CASES))
def test_a_short_run_of_each_workload_and_client_is_valid(tmp_path: Path, workload: str, client: str) -> None:
    seed, sub_via = CASES[workload, client]
    proc, summary, history = faults_run(tmp_path / "run", workload, client, sub_via, seed)
    assert proc.returncode == 0 and summary["valid"] is True, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert summary["faults"].get("pause"), summary["faults"]
    assert worker_ops(history, sub_via, "ok"), f"no {sub_via} recorded"
    if workload == "queue":
        assert worker_ops(history, "send", "ok") and polled(worker_ops(history, "poll", "ok")) > 0
    else:
        committed = worker_ops(history, "txn", "ok")
        assert any(len(e["value"]) >= 2 for e in committed), "no transaction of several micro-ops"
        assert worker_ops(history, "txn", "fail"), "no aborted transaction"
        assert any(m[0] == "send" and isinstance(m[2], list) for e in committed for m in e["value"])
    drained = [e for e in worker_ops(history, "poll", "ok") if e["process"] >= 2_000_000]
    assert drained, "no final drain"
    assert_left_nothing(tmp_path / "run", proc.stderr)


def assert_left_nothing(out: Path, output: str) -> None:
    """This run's namespaces and nodes are gone (others' runs may be going on beside it)."""
    run_id = re.search(r"network (r[0-9a-f]+):", output)
    assert run_id, output[-2000:]
    assert not [n for n in list_namespaces() if run_id.group(1) in n], "the run left namespaces behind"
    layout = ClusterLayout.load(out / "cluster")
    assert all(layout.read_pid(n) is None for n in layout.nodes), "the run left a node running"


def test_the_txn_run_catches_a_broker_that_hides_aborted_transactions(tmp_path: Path) -> None:
    proc, summary, _ = faults_run(tmp_path / "run", "txn", "kraftpy", "assign", 45, "read-committed-ignores-aborts")
    assert proc.returncode == 1 and summary["valid"] is False, proc.stdout[-3000:]
    assert "G1a" in summary["anomalies"], summary["anomalies"]
