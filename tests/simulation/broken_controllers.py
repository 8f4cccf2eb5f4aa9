"""Deliberately broken controllers, patched in by the tests that prove a checker catches them."""

from __future__ import annotations

import pytest

from kraftpy.metadata.controller.partition_change import ChangeTarget, PartitionChangeBuilder
from kraftpy.metadata.image.metadata_image import NO_LEADER


def elects_outside_the_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every election takes the first usable replica, in the ISR or not, and adds it to the ISR."""
    target = PartitionChangeBuilder._target

    def broken(self: PartitionChangeBuilder) -> ChangeTarget:
        leader, isr, elr, known = target(self)
        if leader != self.partition.leader:  # an election happened: take anyone alive
            anyone = next((r for r in self.partition.replicas if self.is_usable(r)), NO_LEADER)
            if anyone not in (NO_LEADER, leader):
                isr = tuple(dict.fromkeys((*isr, anyone)))
                return anyone, isr, tuple(b for b in elr if b not in isr), known
        return leader, isr, elr, known

    monkeypatch.setattr(PartitionChangeBuilder, "_target", broken)
