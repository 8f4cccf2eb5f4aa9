"""The Kafka log checker: one hand-made history per anomaly class, plus configuration and shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kraftpy.tools.checker.formats import parse_history
from kraftpy.tools.checker.kafka import ANOMALY_CLASSES, SUBSCRIBE_ALLOWED
from kraftpy.tools.checker.kafka_check import check_kafka


def send(p: int, key: int, value: str, offset: int | None, status: str = "ok") -> list[dict[str, Any]]:
    done: dict[str, Any] = {"process": p, "type": status, "f": "send", "key": key, "value": value}
    if offset is not None:
        done["offset"] = offset
    return [{"process": p, "type": "invoke", "f": "send", "key": key, "value": value}, done]


def poll(p: int, *records: tuple[int, int, str], rebalanced: list[int] | None = None) -> list[dict[str, Any]]:
    done: dict[str, Any] = {"process": p, "type": "ok", "f": "poll", "value": [list(r) for r in records]}
    if rebalanced is not None:
        done["rebalanced"] = rebalanced
    return [{"process": p, "type": "invoke", "f": "poll"}, done]


def assign(p: int, keys: list[int]) -> list[dict[str, Any]]:
    return [{"process": p, "type": "invoke", "f": "assign", "value": keys}, {"process": p, "type": "ok", "f": "assign"}]


def check(*ops: list[dict[str, Any]], allowed: frozenset[str] = frozenset()):
    text = "\n".join(json.dumps(e) for o in ops for e in o) + "\n"
    return check_kafka(parse_history(text), allowed)


def types(result) -> set[str]:
    return {a["type"] for a in result.anomalies}


ABC = [send(0, 0, "a", 0), send(0, 0, "b", 1), send(0, 0, "c", 2)]


def test_clean_history_is_valid() -> None:
    r = check(*ABC, poll(1, (0, 0, "a"), (0, 1, "b")), poll(1, (0, 2, "c")))
    assert r.valid is True and r.anomalies == [] and r.exit_code == 0


def test_lost_write() -> None:
    r = check(*ABC, poll(1, (0, 0, "a")), poll(2, (0, 2, "c")))
    assert types(r) == {"lost-write", "unseen"} and r.valid is False
    (lost,) = [a for a in r.anomalies if a["type"] == "lost-write"]
    assert (lost["value"], lost["offset"], lost["max_read_offset"]) == ("b", 1, 2)
    assert [o["line"] for o in lost["ops"]] == [3, 9], "the lost send and the poll that read past it"


def test_unseen_at_the_end_is_not_lost() -> None:
    r = check(send(0, 0, "a", 0), send(0, 0, "b", 1), poll(1, (0, 0, "a")))
    assert types(r) == {"unseen"}
    (unseen,) = r.anomalies
    assert unseen["values"] == ["b"] and unseen["ops"][0]["line"] == 3


def test_duplicate() -> None:
    r = check(send(0, 0, "a", 0), poll(1, (0, 0, "a")), poll(2, (0, 1, "a")))
    assert types(r) == {"duplicate"}
    assert r.anomalies[0]["offsets"] == [0, 1]


def test_inconsistent_offsets() -> None:
    r = check(send(0, 0, "a", 0), send(1, 0, "b", 0), poll(2, (0, 0, "a")), poll(3, (0, 0, "b")))
    assert types(r) == {"inconsistent-offsets"}
    (a,) = r.anomalies
    assert a["values"] == ["a", "b"] and len(a["ops"]) == 4


def test_nonmonotonic_poll() -> None:
    r = check(*ABC, poll(1, (0, 0, "a"), (0, 1, "b")), poll(1, (0, 1, "b"), (0, 2, "c")))
    assert types(r) == {"nonmonotonic-poll"}
    assert r.anomalies[0]["delta"] == 0


def test_poll_skip() -> None:
    r = check(*ABC, poll(2, (0, 1, "b")), poll(1, (0, 0, "a")), poll(1, (0, 2, "c")))
    assert types(r) == {"poll-skip"}
    assert r.anomalies[0]["skipped"] == ["b"]


def test_skip_within_one_poll() -> None:
    r = check(*ABC, poll(2, (0, 1, "b")), poll(1, (0, 0, "a"), (0, 2, "c")))
    assert types(r) == {"int-poll-skip"}


def test_backwards_within_one_poll() -> None:
    r = check(*ABC, poll(1, (0, 1, "b"), (0, 0, "a"), (0, 2, "c")))
    assert "int-nonmonotonic-poll" in types(r)


def test_nonmonotonic_send() -> None:
    r = check(send(0, 0, "a", 5), send(0, 0, "b", 3), poll(1, (0, 3, "b"), (0, 5, "a")))
    assert types(r) == {"nonmonotonic-send"}
    assert r.anomalies[0]["offsets"] == [5, 3]


def test_aborted_read() -> None:
    r = check(send(0, 0, "a", 0), send(0, 0, "x", None, status="fail"), poll(1, (0, 0, "a"), (0, 1, "x")))
    assert types(r) == {"aborted-read"}


def test_new_assignment_resets_poll_order() -> None:
    skipping = [*ABC, poll(2, (0, 1, "b")), poll(1, (0, 0, "a"))]
    assert types(check(*skipping, poll(1, (0, 2, "c")))) == {"poll-skip"}
    assert types(check(*skipping, assign(1, [1]), assign(1, [0]), poll(1, (0, 2, "c")))) == set()
    assert types(check(*skipping, assign(1, [0, 1]), poll(1, (0, 2, "c")))) == {"poll-skip"}
    assert types(check(*skipping, poll(1, (0, 2, "c"), rebalanced=[0]))) == set()


def test_allowed_classes_are_reported_but_do_not_fail() -> None:
    r = check(*ABC, poll(2, (0, 1, "b")), poll(1, (0, 0, "a")), poll(1, (0, 2, "c")), allowed=SUBSCRIBE_ALLOWED)
    assert r.valid is True
    assert [(a["type"], a["failure"]) for a in r.anomalies] == [("poll-skip", False)]
    with pytest.raises(ValueError, match="unknown anomaly"):
        check(*ABC, allowed=frozenset({"G17"}))


def test_every_class_has_a_test_above() -> None:
    covered = {
        "lost-write", "unseen", "duplicate", "inconsistent-offsets", "nonmonotonic-poll", "poll-skip",
        "int-poll-skip", "int-nonmonotonic-poll", "nonmonotonic-send", "aborted-read",
    }  # fmt: skip
    assert covered == set(ANOMALY_CLASSES)


def test_jepsen_edn_shape() -> None:
    text = "\n".join(
        [
            "{:process 0, :type :invoke, :f :send, :value [[:send 0 :a] [:send 0 :b]]}",
            "{:process 0, :type :ok, :f :send, :value [[:send 0 [0 :a]] [:send 0 [1 :b]]]}",
            "{:process 0, :type :invoke, :f :send, :value [[:send 0 :c]]}",
            "{:process 0, :type :ok, :f :send, :value [[:send 0 [2 :c]]]}",
            "{:process :nemesis, :type :info, :f :kill, :value nil}",
            "{:process 1, :type :invoke, :f :poll, :value [[:poll]]}",
            "{:process 1, :type :ok, :f :poll, :value [[:poll {0 [[0 :a] [2 :c]]}]]}",
        ]
    )
    r = check_kafka(parse_history(text))
    assert types(r) == {"lost-write", "unseen", "int-poll-skip"}
    (lost,) = [a for a in r.anomalies if a["type"] == "lost-write"]
    assert lost["value"] == ":b"
