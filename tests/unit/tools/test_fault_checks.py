"""A fault run's checks (tools/faults/checks.py) and the register workload's definite failures.

`run_check` runs the real `kraftpy check`: a decided history is valid or not, a search that gives up
or a process that does not answer in time is undecided (None), never valid; output that is not a
verdict is CheckFailed. `never_took_effect` decides which failed register writes the history may
record as `fail` rather than `info`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.faults.checks import CheckFailed, run_check, run_verdict
from kraftpy.tools.faults.report import verdict_text
from kraftpy.tools.faults.run import kraftpy_cli as cli
from kraftpy.tools.faults.workloads.register import never_took_effect
from tests.unit.tools.checker.generate import random_history


def write_history(path: Path, seed: int, *, stale_read: bool = False) -> Path:
    history = random_history("cas-register", random.Random(seed), 4, 200, 0.1)
    events = [{"process": e.process, "type": e.type, "f": e.f, "value": e.value} for e in history.events]
    if stale_read:  # a read after every write completed, of a value never written
        last = max(e["process"] for e in events) + 1
        events += [{"process": last, "type": "invoke", "f": "read", "value": None},
                   {"process": last, "type": "ok", "f": "read", "value": 999}]  # fmt: skip
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_a_decided_check_is_valid_or_not(tmp_path: Path) -> None:
    good = run_check(cli, write_history(tmp_path / "good.jsonl", 1), ["--model", "cas-register"], 60)
    assert good.valid is True and good.failures == [] and good.undecided == []
    bad = run_check(cli, write_history(tmp_path / "bad.jsonl", 1, stale_read=True), ["--model", "cas-register"], 60)
    assert bad.valid is False and bad.failures and bad.undecided == []


def test_a_search_that_gives_up_is_undecided_never_valid(tmp_path: Path) -> None:
    verdict = run_check(cli, write_history(tmp_path / "h.jsonl", 2), ["--model", "cas-register"], 60, search_s=0)
    assert verdict.valid is None and verdict.undecided and verdict.failures == []


def test_a_check_that_does_not_answer_in_time_is_undecided(tmp_path: Path) -> None:
    verdict = run_check(cli, write_history(tmp_path / "h.jsonl", 3), ["--model", "cas-register"], 0.01)
    assert verdict.valid is None
    assert "did not answer within 0.01 s" in verdict.undecided[0]["reason"]


def test_output_that_is_no_verdict_is_a_failed_check(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed, match="kraftpy check failed"):
        run_check(cli, tmp_path / "missing.jsonl", ["--model", "cas-register"], 60)


@pytest.mark.parametrize(
    ("error", "definite"),
    [
        (KafkaError("cas compared with 3", ErrorCode.INVALID_UPDATE_VERSION), True),
        (KafkaError("not the controller", ErrorCode.NOT_CONTROLLER, leader_id=2, appended=False), True),
        (KafkaError("leadership moved while pending", ErrorCode.NOT_CONTROLLER, leader_id=2), False),
        (KafkaError("connecting failed", ErrorCode.NETWORK_EXCEPTION, sent=False), True),
        (KafkaError("connection lost", ErrorCode.NETWORK_EXCEPTION), False),
        (KafkaError("timed out", ErrorCode.REQUEST_TIMED_OUT), False),
    ],
)
def test_only_writes_that_certainly_did_not_happen_are_definite(error: KafkaError, definite: bool) -> None:
    assert never_took_effect(error) is definite


def test_an_undecided_check_makes_the_run_unknown_and_an_anomaly_still_fails_it() -> None:
    undecided = {"register-check": [{"type": "undecided", "reason": "timeout"}]}
    assert run_verdict({}, {}) is True
    assert run_verdict({}, undecided) is None
    assert run_verdict({"lost-write": [{}]}, undecided) is False
    assert verdict_text({"valid": None, "undecided": undecided}, {}) == "UNKNOWN: undecided register-check"
    assert verdict_text({"valid": True}, {}) == "valid"
    assert verdict_text({"valid": False}, {"lost-write": []}) == "ANOMALIES: lost-write"
