"""`kraftpy audit` input errors, answered before any JVM starts: bad directory, history, topic, missing pyspark.

Each runs the real CLI in a subprocess (exit code and message as a user sees them); none reaches Spark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry

CLI_TIMEOUT_S = 60


def kraftpy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def small_cluster(root: Path, topics: tuple[str, ...] = ("orders",)) -> Path:
    ClusterLayout(root.resolve(), "cli-test", (NodeEntry(1, "127.0.0.1", 19_001, ("broker",)),)).save()
    for topic in topics:
        (root / "node-1" / "data" / "partitions" / f"{topic}-0").mkdir(parents=True)
    return root


def test_audit_is_listed_and_documented() -> None:
    result = kraftpy("--help")
    assert result.returncode == 0 and "audit" in result.stdout
    result = kraftpy("audit", "--help")
    assert result.returncode == 0 and "--cluster-dir" in result.stdout and "--master" in result.stdout


def test_bad_directory_is_a_clear_error(tmp_path: Path) -> None:
    result = kraftpy("audit", "--cluster-dir", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "is not a directory" in result.stderr
    result = kraftpy("audit", "--cluster-dir", str(tmp_path))
    assert result.returncode == 2 and "no cluster in" in result.stderr
    (tmp_path / "cluster.json").write_text("{not json")
    result = kraftpy("audit", "--cluster-dir", str(tmp_path))
    assert result.returncode == 2 and "is not a valid cluster file" in result.stderr


def test_history_and_topic_errors(tmp_path: Path) -> None:
    root = small_cluster(tmp_path / "c", ("a", "b"))
    result = kraftpy("audit", "--cluster-dir", str(root), "--history", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "missing.jsonl does not exist" in result.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"process": 0, "type": "ok", "f": "send", "key": 0, "value": "x"}) + "\n")
    result = kraftpy("audit", "--cluster-dir", str(root), "--history", str(bad), "--topic", "a")
    assert result.returncode == 2 and "bad.jsonl:1" in result.stderr
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"process": 0, "type": "invoke", "f": "send", "key": 0, "value": "x"}) + "\n")
    result = kraftpy("audit", "--cluster-dir", str(root), "--history", str(good))
    assert result.returncode == 2 and "--topic is needed" in result.stderr
    result = kraftpy("audit", "--cluster-dir", str(root), "--conf", "spark.executor.memory")
    assert result.returncode == 2 and "is not KEY=VALUE" in result.stderr
    result = kraftpy("audit", "--cluster-dir", str(root), "--topic", "zzz")
    assert result.returncode == 2 and "topic 'zzz' has no replica" in result.stderr


def test_missing_pyspark_names_an_install_that_works_from_a_source_checkout(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named pyspark (hidden for this test)')\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    result = kraftpy("audit", "--cluster-dir", str(small_cluster(tmp_path / "c")), env=env)
    assert result.returncode == 2 and "pip install 'pyspark>=4.0' 'pyarrow>=15'" in result.stderr
    assert "pip install -e '.[spark]'" in result.stderr  # kraftpy is not on PyPI: `kraftpy[spark]` fails
