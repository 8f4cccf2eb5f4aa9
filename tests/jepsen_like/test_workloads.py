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
from pathlib import Path

import pytest

from kraftpy.tools.faults.netns import supported
from tests.jepsen_like.test_faults import assert_left_nothing, break_env, faults_run

pytestmark = pytest.mark.slow

TIME_LIMIT_S = 8
RUN_TIMEOUT_S = 300
# queue through kraftpy's client in assign mode is test_faults.py's run.
CASES = {  # (workload, client): (seed, sub_via)
    ("queue", "confluent"): (42, "subscribe"),
    ("txn", "kraftpy"): (43, "subscribe"),
    ("txn", "confluent"): (44, "assign"),
}


def workload_run(out: Path, workload: str, client: str, sub_via: str, seed: int, broken: str | None = None):
    """The run, its summary and its history."""
    args = ("--seed", str(seed), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", "pause", "--no-audit")
    proc, summary = faults_run(
        out, *args, "--workload", workload, "--client", client, "--sub-via", sub_via,
        env=break_env(broken), timeout_s=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert summary is not None, f"no summary; exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    return proc, summary, history


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
    proc, summary, history = workload_run(tmp_path / "run", workload, client, sub_via, seed)
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
    assert_left_nothing(tmp_path / "run")


def test_the_txn_run_catches_a_broker_that_hides_aborted_transactions(tmp_path: Path) -> None:
    proc, summary, _ = workload_run(tmp_path / "run", "txn", "kraftpy", "assign", 45, "read-committed-ignores-aborts")
    assert proc.returncode == 1 and summary["valid"] is False, proc.stdout[-3000:]
    assert "G1a" in summary["anomalies"], summary["anomalies"]
