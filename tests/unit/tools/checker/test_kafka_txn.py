"""`--model kafka` on transactional histories: reference histories with known verdicts, allowed
classes, the CLI, and the cycle search on a long history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.checker.cycles import TypedGraph, strongly_connected
from kraftpy.tools.checker.formats import parse_history, read_history
from kraftpy.tools.checker.kafka_check import check_kafka
from kraftpy.tools.checker.kafka_txn import TXN_ANOMALY_CLASSES

HERE = Path(__file__).resolve().parent / "kafka_txn"


def verdicts() -> list[tuple[str, bool, set[str]]]:
    rows = (HERE / "VERDICTS.tsv").read_text().splitlines()[1:]
    out = []
    for row in rows:
        name, verdict, anomalies = row.split("\t")
        out.append((name, verdict == "valid", set() if anomalies == "-" else set(anomalies.split(","))))
    return out


@pytest.mark.parametrize(("name", "valid", "anomalies"), verdicts(), ids=[v[0] for v in verdicts()])
def test_reference_history(name: str, valid: bool, anomalies: set[str]) -> None:
    result = check_kafka(read_history(HERE / name))
    assert result.valid is valid
    assert {a["type"] for a in result.anomalies} == anomalies


def test_every_transactional_class_has_a_reference_history() -> None:
    caught = set().union(*(a for _, _, a in verdicts()))
    assert set(TXN_ANOMALY_CLASSES) <= caught
    assert any(valid for _, valid, _ in verdicts())


def test_a_cycle_names_its_operations_and_edge_types() -> None:
    result = check_kafka(read_history(HERE / "g2-write-skew.edn"))
    (g2,) = result.anomalies
    assert [s["type"] for s in g2["steps"]] == ["rw", "rw"]
    assert [o["line"] for o in g2["cycle"]] == [3, 4]
    single = check_kafka(read_history(HERE / "g-single-read-skew.edn")).anomalies[0]
    assert sorted(s["type"] for s in single["steps"]) == ["rw", "wr"]


def test_allowed_classes_do_not_fail_and_unknown_ones_are_refused() -> None:
    history = read_history(HERE / "g1b-intermediate-read.edn")
    assert check_kafka(history, {"G1b", "G-single"}).valid is True
    assert check_kafka(history, {"G1b"}).valid is False
    with pytest.raises(ValueError, match="unknown anomaly"):
        check_kafka(history, {"G3"})


def test_without_txn_operations_the_log_classes_only() -> None:
    """A history of plain sends and polls keeps the log checker's name for an aborted read, and is not
    searched for cycles: the same G1a history written as `send`/`poll` operations."""
    text = (HERE / "g1a-aborted-read.edn").read_text().replace(":f :txn", ":f :send")
    result = check_kafka(parse_history(text, "edn"))
    assert {a["type"] for a in result.anomalies} == {"aborted-read"}
    assert check_kafka(read_history(HERE / "g1a-aborted-read.edn")).anomalies[0]["type"] == "G1a"


def test_cli_exit_codes_and_json() -> None:
    def run(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "kraftpy.tools.cli", "check", str(HERE / name), "--model", "kafka", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    ok = run("valid.edn")
    assert ok.returncode == 0 and ok.stdout.startswith("VALID: model kafka"), ok
    bad = run("g0-write-cycle.edn", "--json")
    assert bad.returncode == 1
    assert [a["type"] for a in json.loads(bad.stdout)["anomalies"]] == ["G0"]
    allowed = run("g0-write-cycle.edn", "--allow", "G0")
    assert allowed.returncode == 0 and "G0 (allowed)" in allowed.stdout


def test_a_long_chain_is_searched_without_recursion() -> None:
    graph = TypedGraph()
    n = 50_000
    for i in range(n):
        graph.add(i, i + 1, "ww")
    graph.add(n, 0, "ww")
    (component,) = strongly_connected(graph, ("ww",))
    assert len(component) == n + 1


def test_many_committed_transactions_in_one_order_are_valid() -> None:
    """A chain of 300 transactions each polling the previous one's write and sending the next: no cycle."""
    lines = []
    for i in range(300):
        sends = [["send", 0, [i, f"v{i}"]]]
        polls = [["poll", [[0, i - 1, f"v{i - 1}"]]]] if i else []
        lines.append({"process": i, "type": "invoke", "f": "txn", "value": [["send", 0, f"v{i}"], ["poll"]]})
        lines.append({"process": i, "type": "ok", "f": "txn", "value": [*polls, *sends]})
    lines.append({"process": 1000, "type": "invoke", "f": "txn", "value": [["poll"]]})
    lines.append(
        {"process": 1000, "type": "ok", "f": "txn", "value": [["poll", [[0, i, f"v{i}"] for i in range(300)]]]}
    )
    result = check_kafka(parse_history("\n".join(json.dumps(e) for e in lines) + "\n"))
    assert result.valid is True, result.anomalies[:3]
