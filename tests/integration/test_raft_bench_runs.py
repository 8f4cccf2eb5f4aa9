"""benchmarks/raft_bench.py still runs: a tiny run of every phase but failover, against real node processes.

The figures of issue 16 come from this script; nothing else runs it, and a change of the test cluster
(ProcCluster's ports) once broke it unnoticed. No figure is asserted, only that each was measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "raft_bench.py"


def test_a_tiny_raft_bench_run_measures_every_phase() -> None:
    tiny = ["--sequential", "20", "--entries", "100", "--clients", "2", "--per-request", "10"]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *tiny, "--round-trips", "5", "--trials", "0", "--json"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    assert results["one_at_a_time"]["entries"] == 20 and results["one_at_a_time"]["leader_p50_ms"] > 0
    # 20 commits are a few 10 ms clock ticks of CPU in all: a process may read 0, the four together do not
    cpu = results["one_at_a_time"]["cpu_us_per_commit"]
    assert len(cpu["followers"]) == 2 and min(cpu["leader"], cpu["client"], *cpu["followers"]) >= 0
    assert cpu["leader"] + cpu["client"] + sum(cpu["followers"]) > 0
    assert results["many_in_flight"]["entries"] == 100 and results["many_in_flight"]["entries_per_s"] > 0
    assert results["round_trips"]["calls"] == 5 and results["round_trips"]["stream_p50_ms"] > 0


def test_a_missing_zookeeper_anchor_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """`--zookeeper` ran kraftpy's part first and then failed on a machine without the anchor's
    package, losing the measurement: now what is missing is said before any node starts."""
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--zookeeper", "--anchors", str(tmp_path), "--trials", "0"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--zookeeper: no {tmp_path / 'zk_cluster.sh'}" in proc.stderr
    assert "starting 3 voters" not in proc.stderr


def test_the_floor_bench_measures_the_real_quorum_beside_its_floor() -> None:
    """benchmarks/raft_floor_bench.py --quorum: each floor round is followed by raft_bench's
    one-at-a-time phase on real node processes, reported beside it."""
    floor_bench = BENCH.parent / "raft_floor_bench.py"
    proc = subprocess.run(
        [sys.executable, str(floor_bench), "--commits", "20", "--rounds", "2", "--quorum", "--json"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert [r["commits"] for r in result["rounds"]] == [20, 20]
    assert [q["entries"] for q in result["quorum_rounds"]] == [20, 20]
    assert all(
        q["leader_p50_ms"] > 0 and len(q["cpu_us_per_commit"]["followers"]) == 2 for q in result["quorum_rounds"]
    )
