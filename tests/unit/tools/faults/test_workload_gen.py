"""The workloads' pure core (tools/faults/workloads/gen.py): seeded op generation and Jepsen's recording."""

from __future__ import annotations

import json
import random
from pathlib import Path

from kraftpy.tools.checker.formats import read_history
from kraftpy.tools.checker.kafka_history import kafka_ops
from kraftpy.tools.faults.workloads.gen import (
    MAX_TXN_MICRO_OPS,
    OpGenerator,
    caught_up,
    completed_poll,
    completed_send,
    rewind_to,
)


def ops(transactional: bool, seed: int = 7, n: int = 200) -> list[tuple[str, list, bool]]:
    gen = OpGenerator(random.Random(seed), keys=3, transactional=transactional, process=0)
    return [gen.next_op() for _ in range(n)]


def test_the_same_seed_gives_the_same_operations() -> None:
    assert ops(True) == ops(True)
    assert ops(False) == ops(False)
    assert ops(True, seed=8) != ops(True)


def test_queue_ops_are_single_sends_and_polls_over_every_key() -> None:
    found = ops(False)
    assert {f for f, _, _ in found} == {"send", "poll"}
    assert all(len(micro) == 1 and micro[0][0] == f and not abort for f, micro, abort in found)
    assert {micro[0][1] for f, micro, _ in found if f == "send"} == {0, 1, 2}


def test_txn_ops_have_several_micro_ops_and_some_abort_on_purpose() -> None:
    found = ops(True)
    assert all(f == "txn" and 2 <= len(micro) <= MAX_TXN_MICRO_OPS for f, micro, _ in found)
    aborts = [i for i, (_, _, abort) in enumerate(found) if abort]
    assert aborts[:3] == [1, 6, 11]  # from a process's second transaction on: a short run has aborts
    assert all(any(m[0] == "send" for m in found[i][1]) for i in aborts)


def test_values_are_unique_and_a_fresh_process_gets_its_own() -> None:
    gen = OpGenerator(random.Random(1), keys=3, transactional=True, process=0)
    values = [m[2] for _ in range(50) for m in gen.next_op()[1] if m[0] == "send"]
    gen.renumber(9)
    later = [m[2] for _ in range(50) for m in gen.next_op()[1] if m[0] == "send"]
    assert len(set(values + later)) == len(values + later)
    assert all(v.startswith("9-") for v in later)


def test_recorded_micro_ops_read_back_as_the_checker_sees_them(tmp_path: Path) -> None:
    done = [completed_poll([(1, 4, "x")]), completed_send(2, "0-0", 7)]
    events = [
        {"process": 0, "type": "invoke", "f": "txn", "value": [["poll"], ["send", 2, "0-0"]]},
        {"process": 0, "type": "ok", "f": "txn", "value": done},
    ]
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    (op,) = kafka_ops(read_history(path))
    assert op.sends == [(2, "0-0", 7)]
    assert op.polls == [(1, 4, "x")]


def test_a_send_without_an_offset_is_recorded_without_one() -> None:
    assert completed_send(1, "v", None) == ["send", 1, "v"]
    assert completed_send(1, "v", -1) == ["send", 1, "v"]


def test_an_abort_rewinds_each_key_to_the_first_offset_it_polled() -> None:
    polled = [completed_poll([(0, 5, "a"), (1, 2, "b")]), completed_poll([(0, 6, "c")])]
    assert rewind_to(polled) == {0: 5, 1: 2}
    assert rewind_to([]) == {}


def test_the_drain_ends_when_every_key_reached_its_end() -> None:
    assert caught_up({0: 5, 1: 3}, {0: 5, 1: 3})
    assert not caught_up({0: 5}, {0: 5, 1: 1})
    assert caught_up({}, {0: 0})
