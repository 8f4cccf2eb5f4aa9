"""`--model kafka-groups`: the reference histories' verdicts, and the details of each anomaly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.checker.formats import parse_history
from kraftpy.tools.checker.kafka_groups import check_kafka_groups

HERE = Path(__file__).parent / "kafka_groups"
VERDICTS = [line.split("\t") for line in (HERE / "VERDICTS.tsv").read_text().splitlines()[1:]]


def check(name: str, allowed: frozenset[str] = frozenset()):
    return check_kafka_groups(parse_history((HERE / name).read_text()), allowed)


@pytest.mark.parametrize(("name", "valid", "classes"), VERDICTS, ids=[v[0] for v in VERDICTS])
def test_reference_history_verdict(name: str, valid: str, classes: str) -> None:
    result = check(name)
    assert result.valid is (valid == "true")
    assert {a["type"] for a in result.anomalies} == set(filter(None, classes.split(",")))


def test_double_owner_names_the_generation_partition_and_members() -> None:
    (a,) = check("double-owner.jsonl").anomalies
    assert (a["generation"], a["partition"], a["members"]) == (2, 0, ["m1", "m2"])


def test_nonmonotonic_commit_names_both_commits() -> None:
    found = check("nonmonotonic-commit.jsonl").anomalies
    assert len(found) == 2, "the zombie's commit, and the final read that saw its offset"
    assert {(a["offset"], a["prior_offset"]) for a in found} == {(1, 3)}
    assert [o["line"] for o in found[0]["ops"]] == [9, 11]


def test_commit_skip_lists_the_offsets_never_polled() -> None:
    (a,) = check("commit-skip.jsonl").anomalies
    assert (a["partition"], a["committed"], a["offsets"]) == (0, 3, [1])


def test_concurrent_commits_do_not_order_each_other() -> None:
    events = [
        {"process": 1, "type": "invoke", "f": "commit", "value": [[0, 5]], "generation": 1},
        {"process": 2, "type": "invoke", "f": "commit", "value": [[0, 2]], "generation": 1},
        {"process": 1, "type": "ok", "f": "commit", "value": [[0, 5]], "generation": 1},
        {"process": 2, "type": "ok", "f": "commit", "value": [[0, 2]], "generation": 1},
    ]
    result = check_kafka_groups(parse_history("\n".join(json.dumps(e) for e in events) + "\n"))
    assert not [a for a in result.anomalies if a["type"] == "nonmonotonic-commit"]


def test_allowed_classes_do_not_fail_and_unknown_ones_are_refused() -> None:
    assert check("commit-skip.jsonl", frozenset({"commit-skip"})).valid is True
    with pytest.raises(ValueError, match="unknown anomaly"):
        check("commit-skip.jsonl", frozenset({"lost-write"}))


def test_cli_exit_codes() -> None:
    def run(name: str) -> int:
        args = [sys.executable, "-m", "kraftpy.tools.cli", "check", str(HERE / name), "--model", "kafka-groups"]
        return subprocess.run(args, capture_output=True, text=True, timeout=60).returncode

    assert (run("valid-rebalance.jsonl"), run("nonmonotonic-commit.jsonl")) == (0, 1)


def test_a_reader_outside_the_group_does_not_cover_a_skip() -> None:
    text = (HERE / "commit-skip.jsonl").read_text()
    outsider = [  # the fault run's final read-back: an assign without a generation, then a poll
        {"process": 7, "type": "invoke", "f": "assign", "value": [0]},
        {"process": 7, "type": "ok", "f": "assign", "value": [0]},
        {"process": 7, "type": "invoke", "f": "poll"},
        {"process": 7, "type": "ok", "f": "poll", "value": [[0, 1, "b"]]},
    ]
    result = check_kafka_groups(parse_history(text + "".join(json.dumps(e) + "\n" for e in outsider)))
    assert [a["type"] for a in result.anomalies] == ["commit-skip"]
