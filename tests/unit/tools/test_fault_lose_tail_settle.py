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
from kraftpy.tools.faults.history import HistoryWriter
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.netns import LoopbackNet
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
