"""The `groups` workload: a short `kraftpy faults run --workload groups` is valid, and catches a broken coordinator.

Three consumer-group members (processes of kraftpy's client) join, leave, crash (SIGKILL) and stall
(the first two member faults of every run: the member stops itself between a poll and its commit and
wakes once the others committed its partitions in a newer generation, a zombie) while producers write and
nodes pause; `kraftpy check --model kafka-groups` judges the history (tools/checker/kafka_groups.py,
docs/jepsen.md). The same run against brokers built with KRAFTPY_TEST_BREAK=commit-any-generation (the
coordinator stores a commit whatever its member and generation) must exit 1 with a committed offset gone
backwards: the zombie's commit lands below what the partition's new owner committed during the stall.

The two runs go side by side (a run lasts until its two stalls are done, whatever the time limit).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kraftpy.tools.faults.netns import supported
from kraftpy.tools.faults.workloads.groups import MAX_STALLS
from tests.jepsen_like.test_faults import break_env, faults_run

pytestmark = pytest.mark.slow

SEED = 54  # its first member lifetime is the shortest of seeds 1-60
TIME_LIMIT_S = 5  # the two stalls, which every run waits for, take longer
ARGS = ("--workload", "groups", "--seed", str(SEED), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", "pause")
BROKEN = "commit-any-generation"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, dict[str, Any] | None, str]]:
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")
    base = tmp_path_factory.mktemp("groups")
    with ThreadPoolExecutor(2) as pool:
        started = {
            name: pool.submit(faults_run, base / name, *ARGS, "--no-audit", env=break_env(broken))
            for name, broken in (("valid", None), ("broken", BROKEN))
        }
        done = {name: future.result() for name, future in started.items()}
    return {
        name: (base / name, proc.returncode, summary, proc.stdout + proc.stderr[-5000:])
        for name, (proc, summary) in done.items()
    }


def stalled(summary: dict[str, Any] | None, output: str) -> dict[str, Any]:
    assert summary is not None, f"no summary\n{output[-5000:]}"
    assert summary["faults"].get("stall"), f"no member stalled: {summary['faults']}"
    return summary


def test_a_short_groups_run_is_valid(runs) -> None:
    out, code, summary, output = runs["valid"]
    summary = stalled(summary, output)
    assert code == 0 and summary["valid"] is True, output[-5000:]
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    commits = [e for e in history if e["f"] == "commit" and e["type"] == "ok"]
    assigns = {e["generation"] for e in history if e["f"] == "assign" and e["type"] == "ok" and "generation" in e}
    assert commits and len(assigns) >= 2, "the members must have committed, across rebalances"
    # Each zombie's first commit after its stall (in its old generation, once the group moved on) was refused:
    # `info`, never `ok` (by the coordinator, "...already rebalanced...", or by the client itself, `local`).
    zombies = fenced_by_coordinator = 0
    details: list[dict[str, Any]] = []
    for at, event in enumerate(history):
        if event["f"] == "member-stall-detail":  # where the member stopped itself, before a commit
            zombie = event["value"]["process"]
            # A member stalled twice stops at a new commit, not at the one its first stall's line named.
            assert event["value"] not in details, event
            details.append(event["value"])
            wake = next(e for e in history[at:] if e["f"] == "member-stall-wake" and e["value"]["process"] == zombie)
            if not wake["value"]["moved_on"]:
                continue  # still a member of its generation (coordinator moves restarted its session)
            first = next(
                e for e in history[at:] if e["process"] == zombie and e["f"] == "commit" and e["type"] != "invoke"
            )
            assert first["type"] == "info", first
            zombies += 1
            fenced_by_coordinator += not first["local"]
    # The run stalls members until two zombies' commits reached a coordinator (not refused by their own client).
    assert fenced_by_coordinator >= 2 or summary["faults"]["stall"] == MAX_STALLS, summary["faults"]
    assert zombies, "no member woke as a zombie at a commit"


def test_a_coordinator_that_takes_any_generations_commit_is_caught(runs) -> None:
    _, code, summary, output = runs["broken"]
    summary = stalled(summary, output)
    assert code == 1 and "nonmonotonic-commit" in summary["anomalies"], output[-5000:]
