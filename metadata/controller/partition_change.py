"""PartitionChangeBuilder: from a partition and a wanted change to one PartitionChange record.

Design notes: docs/metadata.md, section "metadata/controller/partition_change.py".
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from kraftpy.metadata.image.metadata_image import NO_LEADER, PartitionRegistration
from kraftpy.metadata.records import PartitionChangeRecord


class Election(enum.Enum):
    IF_NEEDED = "if_needed"  # only when the current leader cannot stay
    PREFERRED = "preferred"  # move to the preferred replica when it can lead


class PartitionChangeBuilder:
    def __init__(
        self,
        topic_id: uuid.UUID,
        partition_id: int,
        partition: PartitionRegistration,
        is_usable: Callable[[int], bool],
    ) -> None:
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.partition = partition
        self.is_usable = is_usable
        self.target_isr: tuple[int, ...] | None = None
        self.election = Election.IF_NEEDED
        self.allow_unclean = False

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_unclean(self, allowed: bool) -> PartitionChangeBuilder:
        self.allow_unclean = allowed
        return self

    def without(self, broker_id: int) -> PartitionChangeBuilder:
        """Target ISR = the current ISR minus `broker_id` (kept if it is the last member)."""
        return self.set_target_isr([b for b in self.partition.isr if b != broker_id])

    def resolve(self) -> tuple[int, tuple[int, ...]]:
        """The (leader, isr) this change leads to."""
        part = self.partition
        isr = self.target_isr if self.target_isr is not None else part.isr
        if not isr:
            isr = part.isr
        usable = self.is_usable
        leader = part.leader
        if self.election is Election.PREFERRED:
            preferred = part.replicas[0]
            if preferred in isr and usable(preferred):
                leader = preferred
        if leader == NO_LEADER or leader not in isr or not usable(leader):
            leader = next((r for r in part.replicas if r in isr and usable(r)), NO_LEADER)
            if leader == NO_LEADER and self.allow_unclean:
                leader = next((r for r in part.replicas if usable(r)), NO_LEADER)
                if leader != NO_LEADER:
                    isr = (leader,)
        return leader, tuple(isr)

    def build(self) -> PartitionChangeRecord | None:
        leader, isr = self.resolve()
        part = self.partition
        new_leader = None if leader == part.leader else leader
        new_isr = None if isr == part.isr else isr
        if new_leader is None and new_isr is None:
            return None
        return PartitionChangeRecord(self.topic_id, self.partition_id, leader=new_leader, isr=new_isr)


def merged(part: PartitionRegistration, change: PartitionChangeRecord | None) -> PartitionRegistration:
    """The partition after `change` (the same rule the delta applies)."""
    if change is None:
        return part
    leader, leader_epoch = part.leader, part.leader_epoch
    if change.leader is not None:
        leader, leader_epoch = change.leader, leader_epoch + 1
    isr = part.isr if change.isr is None else change.isr
    return PartitionRegistration(part.replicas, isr, leader, leader_epoch, part.partition_epoch + 1)
