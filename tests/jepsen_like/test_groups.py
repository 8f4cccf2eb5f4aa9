"""The `groups` workload: a short `kraftpy faults run --workload groups` is valid, and catches a broken coordinator.

Three consumer-group members (processes of kraftpy's client) join, leave, crash (SIGKILL) and stall
(SIGSTOP past the session timeout: a zombie of an old generation; the first member fault of every run
is one) while producers write and nodes pause; `kraftpy check --model kafka-groups` judges the history
(tools/checker/kafka_groups.py, docs/jepsen.md). The same run against brokers built with
KRAFTPY_TEST_BREAK=commit-any-generation (the coordinator stores a commit whatever its member and
generation) must exit 1 with a committed offset gone backwards: the zombie's commit lands below what
the partition's new owner committed during the stall.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.faults.netns import supported
from tests.jepsen_like.test_faults import break_env

pytestmark = pytest.mark.slow

SEED = 7
TIME_LIMIT_S = 30  # room for a stall (session timeout, a rebalance, new commits) and a member restart
RUN_TIMEOUT_S = 400


def run_groups(out: Path, broken: str | None) -> tuple[int, dict, str]:
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")
    env = break_env(broken)
    args = ("--workload", "groups", "--seed", str(SEED), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", "pause")
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "faults", "run", *args, "--no-audit", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    path = out / "summary.json"
    assert path.exists(), f"no summary; exit {proc.returncode}\n{proc.stdout[-5000:]}"
    summary = json.loads(path.read_text())
    assert summary["faults"].get("stall"), f"no member stalled: {summary['faults']}"
    return proc.returncode, summary, proc.stdout[-5000:]


def test_a_short_groups_run_is_valid(tmp_path: Path) -> None:
    code, summary, output = run_groups(tmp_path / "run", None)
    assert code == 0 and summary["valid"] is True, output
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    commits = [e for e in history if e["f"] == "commit" and e["type"] == "ok"]
    assigns = {e["generation"] for e in history if e["f"] == "assign" and e["type"] == "ok" and "generation" in e}
    assert commits and len(assigns) >= 2, "the members must have committed, across rebalances"


def test_a_coordinator_that_takes_any_generations_commit_is_caught(tmp_path: Path) -> None:
    code, summary, output = run_groups(tmp_path / "run", "commit-any-generation")
    assert code == 1 and "nonmonotonic-commit" in summary["anomalies"], output
