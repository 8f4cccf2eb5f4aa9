"""Every verdict of shared/conformance/porcupine/VERDICTS.tsv, reading the files as they are.

The c50 `kv-nopartition` rows are out of reach of the whole-map search alone
(Porcupine gives up at 120 s); the check decides them through the per-key
projections (tools/checker/projection.py) in seconds. They run with
Porcupine's 120 s as the budget, a limit to give up at, far above what
deciding takes (docs/perf-checker.md), and must give the exact verdict.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kraftpy.tools.checker.explain import explain
from kraftpy.tools.checker.formats import read_history
from kraftpy.tools.checker.linearizability import check_linearizability
from tests.conftest import SHARED_DIR

CORPUS = SHARED_DIR / "conformance" / "porcupine"
SLOW = {("kv/c50-ok.txt", "kv-nopartition"), ("kv/c50-bad.txt", "kv-nopartition")}


def _rows() -> list[dict[str, str]]:
    with open(CORPUS / "VERDICTS.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


ROWS = _rows() if (CORPUS / "VERDICTS.tsv").exists() else []


def _check(corpus: Path, row: dict[str, str], timeout_s: float | None = None):
    history = read_history(corpus / row["file"])
    model = "etcd" if row["model"] == "etcd" else "kv"
    return history, check_linearizability(
        history, model, partition=row["model"] != "kv-nopartition", timeout_s=timeout_s, memory_mb=3000
    )


def test_corpus_is_complete(shared_dir: Path) -> None:
    rows = _rows()
    assert len(rows) == 64  # 52 etcd files + 6 kv files x 2 models
    assert {r["model"] for r in rows} == {"etcd", "kv", "kv-nopartition"}


@pytest.mark.parametrize(
    "row", [r for r in ROWS if (r["file"], r["model"]) not in SLOW], ids=lambda r: f"{r['file']}:{r['model']}"
)
def test_verdict_reproduced(shared_dir: Path, row: dict[str, str]) -> None:
    history, result = _check(shared_dir / "conformance" / "porcupine", row)
    assert len(history.operations) == int(row["ops"])
    assert result.valid == (row["expected_linearizable"] == "true")


@pytest.mark.parametrize("row", [r for r in ROWS if (r["file"], r["model"]) in SLOW], ids=lambda r: r["file"])
def test_c50_no_partition_rows_are_decided(shared_dir: Path, row: dict[str, str]) -> None:
    history, result = _check(shared_dir / "conformance" / "porcupine", row, timeout_s=120.0)
    assert len(history.operations) == int(row["ops"])
    expected = row["expected_linearizable"] == "true"
    assert result.valid is expected
    assert result.exit_code == (0 if expected else 1)
    if not expected:
        # Found in one key's projection: the report names the key and the read no order explains.
        (anomaly,) = result.anomalies
        assert anomaly["type"] == "nonlinearizable" and anomaly["key"] == "3" and anomaly["projection"]
        assert [c["line"] for c in anomaly["unplaceable"]] == [442]
        assert "Key '3' (206 operations) cannot be linearized" in explain(result)
        assert "Found by searching this key alone" in explain(result)


def test_failing_etcd_history_is_explained(shared_dir: Path) -> None:
    """etcd_000 is not linearizable: the report names a prefix, a state and unplaceable ops."""
    history = read_history(shared_dir / "conformance" / "porcupine" / "jepsen" / "etcd_000.log")
    result = check_linearizability(history, "etcd")
    (anomaly,) = result.anomalies
    assert anomaly["type"] == "nonlinearizable"
    assert anomaly["unplaceable"], "a failure names the operations that cannot be placed"
    assert 0 < len(anomaly["longest_prefix"]) < anomaly["calls"]
