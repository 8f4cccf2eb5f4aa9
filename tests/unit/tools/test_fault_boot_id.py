"""lose-tail reboots the node it cuts (a new boot id in its `boot_id_path`); kill and graceful restarts do not.

The broker takes a restart with the same boot id for a process death, whose writes the page cache kept
(broker/clean_restart.py): lose-tail cuts the unsynced tails as a power loss would, so it must look like one.
Processes are faked as in test_fault_overlapping_heal.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kraftpy.tools.faults import nemesis as nemesis_module
from kraftpy.tools.faults.disk import boot_id_path, new_boot_id
from kraftpy.tools.faults.nemesis import Nemesis
from tests.unit.tools.test_fault_overlapping_heal import _fake_processes


def test_lose_tail_writes_a_new_boot_id_before_the_restart_and_kill_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, alive = _fake_processes(tmp_path, monkeypatch)
    paths = {n.node_id: boot_id_path(layout, n) for n in layout.nodes}
    first = {node: new_boot_id(path) for node, path in paths.items()}
    seen_at_start: list[str] = []

    def spawn(_layout: object, entry: object) -> None:
        seen_at_start.append(paths[2].read_text().strip())
        alive.add(entry.node_id)  # type: ignore[attr-defined]

    monkeypatch.setattr(nemesis_module, "spawn_node", spawn)
    nemesis = Nemesis(layout, object(), "faults", cli=lambda *a: None, log=lambda m: None)  # type: ignore[arg-type]

    nemesis.kill(2)
    nemesis.restart_dead()
    nemesis.restart_gracefully(2)
    assert seen_at_start == [first[2], first[2]]  # a dead process or a clean stop: the same boot

    nemesis.lose_tail(2, seed=7)
    rebooted = paths[2].read_text().strip()
    assert seen_at_start[-1] == rebooted != first[2]  # written before the node started again
    assert str(uuid.UUID(rebooted)) == rebooted
    assert {n: paths[n].read_text().strip() for n in (1, 3)} == {1: first[1], 3: first[3]}
