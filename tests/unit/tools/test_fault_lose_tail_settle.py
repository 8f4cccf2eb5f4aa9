"""A lose-tail waits until the views have allowed it for SETTLE_S in a row (tools/faults/nemesis.py).

One clear look was not enough in seed 2101 (docs/jepsen.md): a node paused past its broker session is
fenced out of the ISR a moment after it answers from its stale image. The views here are scripted: the
decision's timing is the nemesis's own, the answers are what the nodes could have said.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraftpy.tools.commands.cluster import new_layout
from kraftpy.tools.faults import nemesis as nemesis_module
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.netns import LoopbackNet
from kraftpy.tools.faults.schedule import Fault, TimedFault
from kraftpy.tools.faults.tail_safety import NodeView

ALL = (1, 2, 3)
CLEAR = {n: NodeView(n, True, {0: ALL}, {0: ALL}, 0) for n in ALL}
FENCED = {n: NodeView(n, True, {0: ALL}, {0: (2,)}, 0) for n in ALL}  # node 2 is the last member


def _decide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Callable[[int, float], dict]) -> tuple:
    """The nemesis's decision on node 2's tails, with `answer(look, seconds since the first)` as the views."""
    monkeypatch.setattr(nemesis_module, "SETTLE_S", 0.3)
    monkeypatch.setattr(nemesis_module, "VIEW_POLL_S", 0.05)
    monkeypatch.setattr(nemesis_module, "LOSE_TAIL_WAIT_S", 1.0)
    layout = new_layout(tmp_path / "cluster", 3, "127.0.0.1", 19000, 19010)
    nemesis = Nemesis(layout, LoopbackNet("rtest", ALL), "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]
    looks: list[float] = []

    async def views() -> dict[int, NodeView]:
        looks.append(time.monotonic())
        return answer(len(looks) - 1, looks[-1] - looks[0])

    nemesis.views = views  # type: ignore[method-assign]
    history = HistoryWriter(tmp_path / "history.jsonl")
    allowed = asyncio.run(nemesis.tail_may_be_lost(2, history, {"fault": 1}))
    history.close()
    events = [json.loads(line)["value"] for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    return allowed, looks, events


def test_one_clear_look_is_not_enough(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed, looks, events = _decide(tmp_path, monkeypatch, lambda look, _s: FENCED if look == 1 else CLEAR)
    assert allowed
    # the clear streak began at the third look and lasted SETTLE_S before the loss was allowed
    assert len(looks) >= 4 and looks[-1] - looks[2] >= 0.3
    assert events[0]["blocked_by"] == {} and events[0]["agreed_isr"] == {"0": [1, 2, 3]}
    assert events[0]["answered"] == [1, 2, 3]


def test_a_streak_too_short_when_the_wait_ends_is_a_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed, _looks, events = _decide(tmp_path, monkeypatch, lambda _look, s: FENCED if s < 0.85 else CLEAR)
    assert not allowed
    assert [e["blocked_by"] for e in events] == [{str(nemesis_module.SETTLING): []}] * 2  # the wait, the skip


BEHIND = {n: NodeView(n, True, {0: ALL}, {0: (1, 3)}, 0) for n in ALL}  # node 2 restarted, not back in sync
BACK_IN_SYNC_AFTER_S = 0.6


def _catching_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Nemesis, float, dict[str, float]]:
    """A nemesis whose faults only note when each first started; a lose-tail taints node 2, whose own view
    lists it in the ISR again BACK_IN_SYNC_AFTER_S from now. Returns it, that moment and the start times."""
    monkeypatch.setattr(nemesis_module, "VIEW_POLL_S", 0.05)
    layout = new_layout(tmp_path / "cluster", 3, "127.0.0.1", 19000, 19010)
    nemesis = Nemesis(layout, LoopbackNet("rtest", ALL), "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]
    back_in_sync_at = time.monotonic() + BACK_IN_SYNC_AFTER_S
    started: dict[str, float] = {}

    async def views() -> dict[int, NodeView]:
        return CLEAR if time.monotonic() >= back_in_sync_at else BEHIND

    async def allowed(*_a: object) -> bool:
        return True

    async def inject(fault: Fault) -> dict:
        started.setdefault(fault.nemesis, time.monotonic())
        if fault.nemesis == "lose-tail":
            nemesis.tails.lost_tail(2, [0])
        return {}

    nemesis.views = views  # type: ignore[method-assign]
    nemesis.tail_may_be_lost = allowed  # type: ignore[method-assign]
    nemesis.inject = inject  # type: ignore[method-assign]
    nemesis.heal = lambda fault: {"restarted": []}  # type: ignore[method-assign]
    nemesis.heal_one = lambda fault, still_on: {"restarted": []}  # type: ignore[method-assign]
    return nemesis, back_in_sync_at, started


def test_the_next_node_fault_waits_until_the_cut_node_is_back_in_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 2304 (docs/jepsen.md): a fault on a remaining ISR member before the cut node is back in sync can
    fence that member first and leave the cut log the ISR's last member. The pause of node 1, planned right
    after node 2's lose-tail, starts only once node 2's own answers list it in the ISR again."""
    nemesis, back_in_sync_at, started = _catching_up(tmp_path, monkeypatch)
    plan = [
        TimedFault(1, Fault("lose-tail", 2, (), 0.05, 0.0), 0.0, 0.05),
        TimedFault(2, Fault("pause", 1, (), 0.05, 0.0), 0.1, 0.15),
    ]
    history = HistoryWriter(tmp_path / "history.jsonl")
    asyncio.run(nemesis.run_overlapping(plan, ALL, history, RunEnd(0.1, hard_limit_s=10)))
    history.close()
    assert started["pause"] >= back_in_sync_at, "the pause did not wait for the cut node to catch up"
    events = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    caught = [e["value"] for e in events if e["f"] == "lose-tail-caught-up"]
    assert caught == [{"fault": 1, "node": 2, "caught_up": True, "waited_s": caught[0]["waited_s"]}]
    assert caught[0]["waited_s"] >= 0.5


class _Scripted:
    """A schedule that hands out `faults` in turn (then the last one again)."""

    def __init__(self, *faults: Fault) -> None:
        self.nodes, self.faults = ALL, list(faults)

    def next(self) -> Fault:
        return self.faults.pop(0) if len(self.faults) > 1 else self.faults[0]


def test_one_at_a_time_the_next_node_fault_also_waits_for_the_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nemesis, back_in_sync_at, started = _catching_up(tmp_path, monkeypatch)
    schedule = _Scripted(Fault("lose-tail", 2, (), 0.05, 0.0), Fault("pause", 1, (), 0.05, 0.0))
    history = HistoryWriter(tmp_path / "history.jsonl")
    asyncio.run(nemesis.run(schedule, history, RunEnd(0.0, hard_limit_s=1.5)))  # type: ignore[arg-type]
    history.close()
    assert started["pause"] >= back_in_sync_at, "the pause did not wait for the cut node to catch up"
