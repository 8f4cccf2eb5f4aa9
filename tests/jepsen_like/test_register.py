"""The `register` workload: a short run is linearizable, and the stale-read broken build is caught.

`kraftpy faults run --workload register` under isolations (tools/faults/workloads/register.py): reads on
any controller node, writes and cas through the active one, judged by `--model cas-register`. With
KRAFTPY_TEST_BREAK=stale-read every controller answers reads from its own image without the read index,
so an isolated node's old value must show as a non-linearizable read: the run exits 1. The two runs go
side by side.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.netns import list_namespaces, supported
from tests.jepsen_like.test_faults import break_env, faults_run

pytestmark = pytest.mark.slow

SEED = 11
TIME_LIMIT_S = 6
ARGS = ("--workload", "register", "--seed", str(SEED), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", "isolate")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, dict[str, Any], str]]:
    """The clean run and the stale-read run, side by side."""
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")
    base = tmp_path_factory.mktemp("register")
    with ThreadPoolExecutor(2) as pool:
        started = {
            name: pool.submit(faults_run, base / name, *ARGS, "--no-audit", env=break_env(broken))
            for name, broken in (("valid", None), ("broken", "stale-read"))
        }
        done = {name: future.result() for name, future in started.items()}
    found = {}
    for name, (proc, summary) in done.items():
        output = proc.stdout + proc.stderr
        assert summary is not None, f"{name}: no summary; exit {proc.returncode}\n{output[-5000:]}"
        found[name] = (base / name, proc.returncode, summary, output)
    return found


def register_ops(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (out / "register.jsonl").read_text().splitlines():
        event = json.loads(line)
        counts[event["type"]] = counts.get(event["type"], 0) + 1
    return counts


def test_a_short_register_run_is_linearizable(runs) -> None:
    out, code, summary, output = runs["valid"]
    assert code == 0 and summary["valid"] is True, output[-5000:]
    assert summary["faults"].get("isolate"), summary["faults"]
    assert register_ops(out).get("ok", 0) > 10, register_ops(out)
    assert json.loads((out / "register-check.json").read_text())["valid"] is True
    # this run's own network only: other engineers' runs come and go on a shared machine
    (run_id,) = set(re.findall(r"network (r[0-9a-f]+):", output)) or {"?"}
    assert not [ns for ns in list_namespaces() if f"-{run_id}-" in ns], "the run left its namespaces behind"
    layout = ClusterLayout.load(out / "cluster")
    assert all(layout.read_pid(n) is None for n in layout.nodes), "the run left a node running"


def test_the_stale_read_build_is_caught(runs) -> None:
    _, code, summary, output = runs["broken"]
    assert code == 1 and "register-not-linearizable" in summary["anomalies"], output[-5000:]
