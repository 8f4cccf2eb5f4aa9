"""benchmarks/raft_floor_bench.py runs: each fsync mode commits the entries it was asked for (no figure asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "raft_floor_bench.py"


@pytest.mark.parametrize(
    ("leader_fsync", "follower_fsync"), [("thread", "inline"), ("inline", "inline"), ("none", "none")]
)
def test_a_tiny_floor_run_commits_every_entry_in_each_mode(
    tmp_path: Path, leader_fsync: str, follower_fsync: str
) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--commits", "20", "--rounds", "2", "--leader-fsync", leader_fsync,
         "--follower-fsync", follower_fsync, "--dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert (result["leader_fsync"], result["follower_fsync"]) == (leader_fsync, follower_fsync)
    assert [r["commits"] for r in result["rounds"]] == [20, 20]
    for row in result["rounds"]:
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert len(row["follower_cpu_us_per_commit"]) == 2
    assert not list(tmp_path.iterdir())  # its files are removed


@pytest.mark.parametrize("flags", [["--commits", "0"], ["--rounds", "-1"]])
def test_counts_below_one_are_refused_before_any_process_starts(flags: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *flags], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 2 and "must be at least 1" in proc.stderr, proc.stderr[-2000:]
