"""An overlapping schedule's heal does not take a node another fault just killed for one that died (seed 2104).

The ring heal read the faults still on, then (in its worker thread) looked for dead nodes; a kill that
started in between left its node dead and unlisted, so the heal restarted it and failed the run with
`node-died`. The heal now reads the faults still on once it holds the nemesis's node lock, which every
kill holds too. Processes are faked here (`read_pid`, `spawn_node`); the threads and the lock are real.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from kraftpy.tools.commands.cluster import new_layout
from kraftpy.tools.faults import nemesis as nemesis_module
from kraftpy.tools.faults.nemesis import Nemesis
from kraftpy.tools.faults.schedule import Fault


class SlowHealNet:
    """A network whose heal waits until the test lets it go, so a kill can start meanwhile."""

    def __init__(self) -> None:
        self.healing = threading.Event()
        self.release = threading.Event()

    def heal(self) -> None:
        self.healing.set()
        assert self.release.wait(10)

    def apply(self, drops: Any) -> None:
        pass


def test_a_kill_that_starts_during_a_heal_is_not_a_death(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = new_layout(tmp_path / "cluster", 3, "127.0.0.1", 19000, 19010)
    alive = {1, 2, 3}
    monkeypatch.setattr(type(layout), "read_pid", lambda _self, e: 1000 + e.node_id if e.node_id in alive else None)
    monkeypatch.setattr(nemesis_module, "spawn_node", lambda _layout, entry: alive.add(entry.node_id))
    monkeypatch.setattr(nemesis_module, "process_is_node", lambda pid, path: False)
    monkeypatch.setattr(nemesis_module.os, "kill", lambda pid, sig: alive.discard(pid - 1000))
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
