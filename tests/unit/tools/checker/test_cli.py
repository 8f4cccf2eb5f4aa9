"""`kraftpy check`: exit codes, --json shape, --html page, readable errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner

from kraftpy.tools.commands.check import check
from tests.unit.tools.checker.generate import random_history

GOOD = [
    {"process": 0, "type": "invoke", "f": "write", "value": 1},
    {"process": 0, "type": "ok", "f": "write", "value": 1},
    {"process": 1, "type": "invoke", "f": "read"},
    {"process": 1, "type": "ok", "f": "read", "value": 1},
]
BAD = [*GOOD[:2], {"process": 1, "type": "invoke", "f": "read"}, {"process": 1, "type": "ok", "f": "read", "value": 7}]


def write(tmp_path: Path, events: list[dict], name: str = "h.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def run(*args: str, progress: str = "--no-progress"):
    return CliRunner().invoke(check, [*args, progress])


def test_exit_codes(tmp_path: Path) -> None:
    assert run(str(write(tmp_path, GOOD)), "--model", "register").exit_code == 0
    bad = run(str(write(tmp_path, BAD)), "--model", "register")
    assert bad.exit_code == 1
    assert "NOT LINEARIZABLE" in bad.output and "cannot be placed" in bad.output


def test_json_shape(tmp_path: Path) -> None:
    out = run(str(write(tmp_path, BAD)), "--model", "cas-register", "--json")
    body = json.loads(out.output)
    assert set(body) == {"valid", "model", "operations", "elapsed_s", "anomalies"}
    assert (body["valid"], body["model"], body["operations"]) == (False, "cas-register", 2)
    assert isinstance(body["elapsed_s"], float)
    (anomaly,) = body["anomalies"]
    assert anomaly["type"] == "nonlinearizable"
    assert [c["line"] for c in anomaly["unplaceable"]] == [3]


def test_init_option(tmp_path: Path) -> None:
    path = write(
        tmp_path, [{"process": 0, "type": "invoke", "f": "read"}, {"process": 0, "type": "ok", "f": "read", "value": 5}]
    )
    assert run(str(path), "--model", "register").exit_code == 1
    assert run(str(path), "--model", "register", "--init", "5").exit_code == 0


def test_unknown_is_exit_2(tmp_path: Path) -> None:
    h = random_history("kv", random.Random(5), 8, 300, 0.0)
    path = tmp_path / "kv.jsonl"
    path.write_text(
        "".join(
            json.dumps({"process": e.process, "type": e.type, "f": e.f, "key": e.key, "value": e.value}) + "\n"
            for e in h.events
        )
    )
    out = run(str(path), "--model", "kv", "--no-partition", "--timeout-s", "0", "--json")
    assert out.exit_code == 2
    assert json.loads(out.output)["valid"] == "unknown"


def test_progress_when_asked(tmp_path: Path) -> None:
    h = random_history("kv", random.Random(5), 8, 200, 0.0)
    path = tmp_path / "kv.jsonl"
    path.write_text(
        "".join(
            json.dumps({"process": e.process, "type": e.type, "f": e.f, "key": e.key, "value": e.value}) + "\n"
            for e in h.events
        )
    )
    out = run(str(path), "--model", "kv", "--no-partition", "--json", progress="--progress")
    assert "progress: " in out.stderr and "configurations" in out.stderr
    assert json.loads(out.stdout)["valid"] is True, "progress never goes to stdout"
    quiet = run(str(path), "--model", "kv", "--no-partition", "--json")
    assert quiet.stderr == ""


def test_html_report_has_lanes(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    out = run(str(write(tmp_path, BAD)), "--model", "register", "--html", str(page))
    assert out.exit_code == 1
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    data = json.loads(text.split("const D = ", 1)[1].split(";\nconst NS", 1)[0])
    assert data["processes"] == [0, 1], "one lane per process"
    assert data["parts"][0]["blocked"] == [1]
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), "self-contained: no network"


def test_kafka_model_and_allow(tmp_path: Path) -> None:
    events = [
        {"process": 0, "type": "invoke", "f": "send", "key": 0, "value": "a"},
        {"process": 0, "type": "ok", "f": "send", "key": 0, "value": "a", "offset": 0},
    ]
    path = write(tmp_path, events)
    assert run(str(path), "--model", "kafka").exit_code == 1
    allowed = run(str(path), "--model", "kafka", "--allow", "unseen", "--json")
    assert allowed.exit_code == 0
    assert json.loads(allowed.output)["anomalies"][0]["failure"] is False
    assert run(str(path), "--model", "kafka", "--allow", "nope").exit_code == 2


def test_malformed_input_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.edn"
    path.write_text("{:process 0, :type :invoke, :f :read}\n{:process 0, :type :ok, :f :read, :value 1\n")
    out = run(str(path), "--model", "register")
    assert out.exit_code == 2
    assert f"{path}:2:" in out.output


def test_model_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, [{"process": 0, "type": "invoke", "f": "incr"}, {"process": 0, "type": "ok", "f": "incr"}])
    out = run(str(path), "--model", "register")
    assert out.exit_code == 2 and "line 1" in out.output


def test_kraftpy_cli_lists_check() -> None:
    from kraftpy.tools.cli import main

    out = CliRunner().invoke(main, ["check", "--help"])
    assert out.exit_code == 0 and "--no-partition" in out.output
