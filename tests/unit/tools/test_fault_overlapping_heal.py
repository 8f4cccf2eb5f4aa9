"""An overlapping schedule's heal does not take a node another fault has down for one that died.

Seed 2104: the ring heal read the faults still on, then (in its worker thread) looked for dead nodes; a
kill that started in between left its node dead and unlisted, so the heal restarted it and failed the
run with `node-died`. Seed 2108: a kill and a client partition ended in the same instant; the kill was
unlisted before its own heal had started its node again, and the other heal found the node dead first.
The heal now reads the faults still on once it holds the nemesis's node lock, which every kill holds
too, and a fault stays listed until its heal is done. Processes are faked here (`read_pid`,
`spawn_node`, `os.kill`); the threads, the lock and the schedule's loop are real.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from kraftpy.tools.commands.cluster import new_layout
from kraftpy.tools.faults import nemesis as nemesis_module
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.schedule import Fault, TimedFault


class SlowHealNet:
    """A network whose heal waits until the test lets it go, so a kill can start meanwhile."""

    def __init__(self, auto_release_s: float | None = None) -> None:
        self.healing = threading.Event()
        self.release = threading.Event()
        self.auto_release_s = auto_release_s

    def heal(self) -> None:
        self.healing.set()
        if self.auto_release_s is not None:
            self.release.wait(self.auto_release_s)
        else:
            assert self.release.wait(10)

    def apply(self, drops: Any) -> None:
        pass


def _fake_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, set[int]]:
    layout = new_layout(tmp_path / "cluster", 3, "127.0.0.1", 19000, 19010)
    alive = {1, 2, 3}
    monkeypatch.setattr(type(layout), "read_pid", lambda _self, e: 1000 + e.node_id if e.node_id in alive else None)
    monkeypatch.setattr(nemesis_module, "spawn_node", lambda _layout, entry: alive.add(entry.node_id))
    monkeypatch.setattr(nemesis_module, "process_is_node", lambda pid, path: False)
    monkeypatch.setattr(nemesis_module.os, "kill", lambda pid, sig: alive.discard(pid - 1000))
    return layout, alive


def test_a_kill_that_starts_during_a_heal_is_not_a_death(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, alive = _fake_processes(tmp_path, monkeypatch)
    net = SlowHealNet()
    nemesis = Nemesis(layout, net, "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]
    ring = Fault("ring", None, frozenset(), hold_s=1.0, quiet_s=0.0)
    kill = Fault("kill", 3, frozenset(), hold_s=1.0, quiet_s=0.0)
    on: dict[int, Fault] = {}
    healed: dict[str, Any] = {}
    heal = threading.Thread(target=lambda: healed.update(nemesis.heal_one(ring, lambda: list(on.values()))))
    heal.start()
    assert net.healing.wait(10)  # the ring's heal is under way
    on[2] = kill  # the kill starts as the overlapping loop starts it: listed, then done in a worker thread
    killer = threading.Thread(target=nemesis.kill, args=(3,))
    killer.start()
    net.release.set()
    heal.join(10)
    killer.join(10)
    assert healed == {"restarted": []}, healed  # node 3 is the kill's, not a death
    assert nemesis.died == [] and alive == {1, 2}


def test_a_kill_whose_heal_is_pending_is_not_a_death(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client partition's heal holds the lock (its network heal is slow) while the kill's hold ends;
    when it looks for dead nodes, the kill's node is down and the kill's own heal has not run yet."""
    layout, alive = _fake_processes(tmp_path, monkeypatch)
    nemesis = Nemesis(layout, SlowHealNet(auto_release_s=0.4), "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]
    cut = Fault("client-partition", None, frozenset({(0, 1), (1, 0)}), hold_s=0.1, quiet_s=0.0)
    kill = Fault("kill", 3, frozenset(), hold_s=0.2, quiet_s=0.0)
    plan = [TimedFault(1, cut, 0.0, 0.1), TimedFault(2, kill, 0.0, 0.2)]
    history = HistoryWriter(tmp_path / "history.jsonl")
    asyncio.run(nemesis.run_overlapping(plan, (1, 2, 3), history, RunEnd(0.1, hard_limit_s=10)))
    history.close()
    assert nemesis.died == [], nemesis.died
    assert alive == {1, 2, 3}  # the kill's heal started node 3 again
