"""The nemesis schedule (tools/faults/schedule.py): seeded, within the nemeses asked for, valid partitions."""

from __future__ import annotations

import random

import pytest

from kraftpy.tools.faults.schedule import NEMESES, next_fault, plan_drops


def test_the_same_seed_gives_the_same_schedule() -> None:
    def schedule(seed: int) -> list[object]:
        rng = random.Random(seed)
        return [next_fault(NEMESES, (1, 2, 3, 4, 5), rng) for _ in range(50)]

    assert schedule(4) == schedule(4)
    assert schedule(4) != schedule(5)


def test_only_the_nemeses_asked_for_and_partitions_over_the_nodes() -> None:
    rng = random.Random(1)
    faults = [next_fault(("kill", "majority"), (1, 2, 3), rng) for _ in range(100)]
    assert {f.nemesis for f in faults} == {"kill", "majority"}
    for f in faults:
        if f.nemesis == "kill":
            assert f.node in (1, 2, 3) and not f.drops
        else:
            assert f.node is None and f.drops and all(a in (1, 2, 3) and b in (1, 2, 3) for a, b in f.drops)


def test_an_unknown_nemesis_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown nemesis"):
        plan_drops("flood", (1, 2, 3), random.Random(0))
