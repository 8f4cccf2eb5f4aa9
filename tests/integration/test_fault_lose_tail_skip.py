"""A lose-tail that never sees another clean in-sync copy is skipped, the history says so, and the run ends.

The nemesis (tools/faults/nemesis.py) asks every node for its status and metadata before a power loss
(tools/faults/tail_safety.py decides). Here no node answers (a cluster laid out, never started, its
ports held shut), so nothing is known and nothing may be lost: after the bounded wait the fault is
skipped, never silently, and the nemesis loop ends at the run's end although lose-tail never ran (a
skip counts as tried; before, a nemesis never done held the loop for good).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from kraftpy.tools.commands.cluster import new_layout
from kraftpy.tools.faults import nemesis as nemesis_module
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.netns import LoopbackNet
from kraftpy.tools.faults.schedule import Schedule
from tests.ports import reserved_ports

LOOP_BOUND_S = 30  # the loop ends within seconds; this only bounds a hang


def test_a_lose_tail_without_a_clean_copy_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nemesis_module, "LOSE_TAIL_WAIT_S", 0.5)
    with reserved_ports(6, consecutive=True) as ports:
        layout = new_layout(tmp_path / "cluster", 3, "127.0.0.1", ports[0], ports[3])
        net = LoopbackNet("rtest", (1, 2, 3))
        nemesis = Nemesis(layout, net, "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]
        history = HistoryWriter(tmp_path / "history.jsonl")
        schedule = Schedule(("lose-tail",), (1, 2, 3), random.Random(1))
        end = RunEnd(0.1, hard_limit_s=LOOP_BOUND_S)

        async def run() -> None:
            await asyncio.wait_for(nemesis.run(schedule, history, end), LOOP_BOUND_S)

        asyncio.run(run())
        history.close()
    assert nemesis.done == {} and nemesis.skipped["lose-tail"] >= 1
    events = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    names = [e["f"] for e in events]
    assert "lose-tail-start" not in names and names[:2] == ["lose-tail-wait", "lose-tail-skip"], names
    skip = events[1]["value"]
    assert skip["waited_s"] >= 0.5 and skip["blocked_by"] == {"-1": []}, skip
    wait = events[0]["value"]  # what the decision saw: nobody answered, nothing agreed, nobody tainted
    assert (wait["answered"], wait["agreed_isr"], wait["tainted"]) == ([], {}, {}), wait
