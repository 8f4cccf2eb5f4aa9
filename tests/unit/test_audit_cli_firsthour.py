"""`kraftpy audit` for a newcomer (issue 12): an install hint that works from a source checkout,
a loopback-bound driver for a local master, internal topics out of the summary unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.audit_cmd import visible_rows


def test_missing_pyspark_hint_works_from_a_source_checkout(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named pyspark (test stand-in)')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    result = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "audit", "--cluster-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "pip install -e '.[spark]'" in result.stderr and "pip install 'pyspark" in result.stderr


def test_a_local_master_binds_the_driver_to_loopback() -> None:
    pytest.importorskip("pyspark")
    from kraftpy.spark_jobs.session import bind_conf

    assert bind_conf("local[2]", None) == {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    assert bind_conf("spark://m:7077", None) == {}
    assert bind_conf("spark://m:7077", "10.0.0.5")["spark.driver.bindAddress"] == "10.0.0.5"


def test_internal_topics_are_left_out_unless_they_have_findings() -> None:
    rows = [
        {"topic": "orders", "partition": 0},
        {"topic": "__consumer_offsets", "partition": 0},
        {"topic": "__consumer_offsets", "partition": 7},
    ]
    findings = [{"topic": "__consumer_offsets", "partition": 7, "kind": "divergence"}]
    assert visible_rows(rows, findings) == [rows[0], rows[2]]
