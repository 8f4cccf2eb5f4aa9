"""`kraftpy audit` for a newcomer (issue 12): a loopback-bound driver for a local master, internal
topics out of the summary unless asked (the install hint: test_spark_cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_local_master_binds_the_driver_to_loopback() -> None:
    pytest.importorskip("pyspark")
    from kraftpy.spark_jobs.session import bind_conf

    assert bind_conf("local[2]", None) == {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    assert bind_conf("spark://m:7077", None) == {}
    assert bind_conf("spark://m:7077", "10.0.0.5")["spark.driver.bindAddress"] == "10.0.0.5"


def test_internal_topics_are_left_out_unless_they_have_findings() -> None:
    from kraftpy.tools.commands.audit import visible_rows

    rows = [
        {"topic": "orders", "partition": 0},
        {"topic": "__consumer_offsets", "partition": 0},
        {"topic": "__consumer_offsets", "partition": 7},
    ]
    findings = [{"topic": "__consumer_offsets", "partition": 7, "kind": "divergence"}]
    assert visible_rows(rows, findings) == [rows[0], rows[2]]


@pytest.mark.slow
def test_a_real_audit_says_its_stages_and_hides_internal_topics(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from tests.unit.spark_jobs.test_spark_cli import small_cluster

    root = small_cluster(tmp_path / "c", topics=("orders", "__consumer_offsets"))
    result = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "audit", "--cluster-dir", str(root), "--json"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for stage in ("audit: 1/4 planning", "audit: 2/4 starting Spark", "audit: 3/4 checking", "audit: 4/4 report"):
        assert stage in result.stderr, result.stderr
    topics = {row["topic"] for row in json.loads(result.stdout)["replicas"]}
    assert "__consumer_offsets" not in topics, topics
