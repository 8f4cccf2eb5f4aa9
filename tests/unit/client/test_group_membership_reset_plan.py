"""Planning `groups reset-offsets`: Kafka's ConsumerGroupCommand rules, clamped into the log."""

from __future__ import annotations

import pytest

from kraftpy.client.group.offsets_reset import ResetSpec, plan_reset
from kraftpy.protocol.types import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
FACTS = {"committed": {A: 50, B: None}, "log_start": {A: 10, B: 0}, "log_end": {A: 100, B: 7}}


def test_each_kind_of_reset() -> None:
    assert plan_reset(ResetSpec("to-earliest"), [A, B], **FACTS) == {A: 10, B: 0}
    assert plan_reset(ResetSpec("to-latest"), [A, B], **FACTS) == {A: 100, B: 7}
    assert plan_reset(ResetSpec("to-offset", 5), [A, B], **FACTS) == {A: 10, B: 5}  # clamped to the log start
    assert plan_reset(ResetSpec("to-offset", 500), [A], **FACTS) == {A: 100}
    assert plan_reset(ResetSpec("shift-by", -45), [A], **FACTS) == {A: 10}
    assert plan_reset(ResetSpec("shift-by", 20), [A], **FACTS) == {A: 70}
    times = {A: 42, B: None}  # B has no record at or after the time: its end
    assert plan_reset(ResetSpec("to-datetime", 1_700_000_000_000), [A, B], offsets_for_times=times, **FACTS) == {
        A: 42,
        B: 7,
    }


def test_shift_needs_a_committed_offset_and_specs_are_checked() -> None:
    with pytest.raises(ValueError, match="no committed offset"):
        plan_reset(ResetSpec("shift-by", 1), [B], **FACTS)
    with pytest.raises(ValueError, match="unknown reset"):
        ResetSpec("to-somewhere")
    with pytest.raises(ValueError, match="needs a value"):
        ResetSpec("to-offset")
    with pytest.raises(ValueError, match="negative"):
        ResetSpec("to-offset", -1)
