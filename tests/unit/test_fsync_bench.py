"""benchmarks/fsync_bench.py runs and prints a row per layout and process count (no figure asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fsync_bench.py"


def test_a_tiny_fsync_bench_prints_every_row(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--dir", str(tmp_path), "--writes", "5", "--processes", "2"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ")[:2] for line in proc.stdout.splitlines() if line.startswith("| ") and "µs" not in line]
    expected = [[f"| {layout}", n] for layout in ("append", "sparse", "zero-filled", "fallocate") for n in ("1", "2")]
    assert rows == expected, proc.stdout
    assert not list(tmp_path.iterdir())  # its files are removed


def test_a_run_that_would_write_past_the_preallocated_space_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--dir", str(tmp_path), "--writes", "100000", "--size", "4096"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2 and "--writes x --size <=" in proc.stderr
