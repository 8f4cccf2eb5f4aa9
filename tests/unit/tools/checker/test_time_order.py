"""`kraftpy check` on real Jepsen histories whose :time is not monotonic (issue 12).

Jepsen's checkers take the history's order as real-time order and treat :time
as informational; so does kraftpy, with a warning, and it gives the verdict.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[4] / "docs" / "examples" / "cas-register.edn"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "check", str(path), "--model", "cas-register"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_shipped_sample_runs_as_the_readme_says() -> None:
    result = check(SAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("LINEARIZABLE"), result.stdout
    assert "Warning: line 3: time 1100 goes backwards" in result.stderr


def test_line_order_decides_when_time_goes_backwards(tmp_path: Path) -> None:
    """By :time the read overlaps the write; by line order it follows it and must see 1."""
    path = tmp_path / "h.edn"
    path.write_text(
        "{:process 0, :type :invoke, :f :write, :value 1, :time 500}\n"
        "{:process 0, :type :ok, :f :write, :value 1, :time 900}\n"
        "{:process 1, :type :invoke, :f :read, :value nil, :time 600}\n"
        "{:process 1, :type :ok, :f :read, :value 0, :time 700}\n"
    )
    result = check(path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "goes backwards" in result.stderr


def test_an_unreadable_history_is_error_code_message_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.edn"
    path.write_text("{:process 0, :type :ok, :f :read}\n")
    result = check(path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"Error: INVALID_REQUEST: {path}:1: "), result.stderr
