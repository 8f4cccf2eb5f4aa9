"""benchmarks/internal_transport_bench.py runs, with busy loops beside it, and leaves none behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "internal_transport_bench.py"


def _processes_with(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (the bench's children inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found


def test_a_tiny_run_with_busy_cores_reports_every_transport_and_stops_its_loops() -> None:
    marker = f"bench-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--calls", "40", "--rounds", "2", "--busy-cores", "1", "--json"],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
        env={**os.environ, "TRANSPORT_BENCH_TEST_MARK": marker},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["busy_cores"] == 1
    for name in ("rpc_stream", "raw_frames", "rpc_http", "kafka"):
        assert result[name]["p50_ms"] > 0, result
    assert _processes_with(marker) == []  # the busy loop and the server are gone with the bench


def test_more_busy_cores_than_the_machine_has_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--busy-cores", str((os.cpu_count() or 1) + 1)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2 and "--busy-cores must be" in proc.stderr
