"""PartitionChangeBuilder: from a partition and a wanted change to one PartitionChange record.

Design notes: docs/metadata.md, section "metadata/controller/partition_change.py".
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from kraftpy.metadata.image.metadata_image import NO_LEADER, PartitionRegistration
from kraftpy.metadata.records import PartitionChangeRecord

# What a change leads to: the leader, ISR, ELR and last known ELR.
ChangeTarget = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


class Election(enum.Enum):
    IF_NEEDED = "if_needed"  # only when the current leader cannot stay
    PREFERRED = "preferred"  # move to the preferred replica when it can lead


class PartitionChangeBuilder:
    """One partition's next leader, ISR and eligible leader replicas (KIP-966), from a wanted change.

    `min_isr` is the topic's effective min.insync.replicas (at most the replica count): below it the
    leader's high watermark stands still, so a replica leaving such an ISR keeps every committed
    record and stays electable as an eligible leader replica (ELR).
    """

    def __init__(
        self,
        topic_id: uuid.UUID,
        partition_id: int,
        partition: PartitionRegistration,
        is_usable: Callable[[int], bool],
        *,
        min_isr: int,
    ) -> None:
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.partition = partition
        self.is_usable = is_usable
        self.min_isr = min_isr
        self.target_isr: tuple[int, ...] | None = None
        self.election = Election.IF_NEEDED
        self.allow_unclean = False
        self.unclean_shutdown: frozenset[int] = frozenset()

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
        """Target ISR = the current ISR minus `broker_id` (it may become empty: the ELR then holds it)."""
        return self.set_target_isr([b for b in self.partition.isr if b != broker_id])

    def set_unclean_shutdown(self, broker_id: int) -> PartitionChangeBuilder:
        """`broker_id` restarted without its unsynced tail: out of the ISR and the ELR, and not electable."""
        self.unclean_shutdown = frozenset({broker_id})
        return self.without(broker_id)

    def resolve(self) -> PartitionRegistration:
        """The partition this change leads to: its record applied as every node applies it (`merged`),
        so the epochs have one rule."""
        return merged(self.partition, self.build())

    def _target(self) -> ChangeTarget:
        """The leader, ISR, ELR and last known ELR this change leads to (the simulation's
        broken-controller proofs patch this)."""
        part = self.partition
        isr = self.target_isr if self.target_isr is not None else part.isr
        elr = self._target_elr(isr)
        leader, unclean = self._elect(isr, elr)
        if unclean:
            isr, elr = (leader,), ()
        elif leader != NO_LEADER and leader in elr:
            # An eligible leader leads alone until followers catch up with it (Kafka's rule). If that
            # alone reaches min ISR, the high watermark moves again and the others' copies go stale.
            isr = (leader,)
            elr = () if len(isr) >= self.min_isr else tuple(b for b in elr if b != leader)
        known = part.last_known_elr
        if leader != NO_LEADER:
            known = ()
        elif not isr and part.isr and part.leader != NO_LEADER:
            known = (part.leader,)  # the ISR empties now: remember who led last (Kafka's balanced recovery)
        return leader, tuple(isr), elr, known

    def _target_elr(self, isr: tuple[int, ...]) -> tuple[int, ...]:
        part = self.partition
        if len(isr) >= self.min_isr:
            return ()
        # Members leaving an ISR below min ISR hold every committed record: they join the ELR. A
        # restart that lost its unsynced tail does not (KIP-966).
        candidates = dict.fromkeys((*part.elr, *part.isr))
        return tuple(b for b in candidates if b not in isr and b not in self.unclean_shutdown)

    def _elect(self, isr: tuple[int, ...], elr: tuple[int, ...]) -> tuple[int, bool]:
        """(leader, whether the election was unclean)."""
        part = self.partition
        usable = self.is_usable

        def valid(b: int) -> bool:
            return (b in isr or (not isr and b in elr)) and b not in self.unclean_shutdown and usable(b)

        if self.election is Election.PREFERRED and valid(part.replicas[0]):
            return part.replicas[0], False
        if part.leader != NO_LEADER and valid(part.leader):
            return part.leader, False
        leader = next((r for r in part.replicas if valid(r)), NO_LEADER)
        if leader != NO_LEADER:
            return leader, False
        known = part.last_known_elr
        if not isr and not elr and len(known) == 1 and usable(known[0]):
            # Every ISR and ELR member restarted uncleanly: the last leader is the copy most likely to
            # be whole (Kafka's balanced unclean recovery). Records only the others had may be lost.
            return known[0], True
        if self.allow_unclean:
            leader = next((r for r in part.replicas if r not in self.unclean_shutdown and usable(r)), NO_LEADER)
            if leader != NO_LEADER:
                return leader, True
        return NO_LEADER, False

    def build(self) -> PartitionChangeRecord | None:
        """The record of this change (its changed fields only); None when it changes nothing."""
        leader, isr, elr, known = self._target()
        part = self.partition
        change = PartitionChangeRecord(
            self.topic_id,
            self.partition_id,
            leader=None if leader == part.leader else leader,
            isr=None if isr == part.isr else isr,
            elr=None if elr == part.elr else elr,
            last_known_elr=None if known == part.last_known_elr else known,
        )
        if change.leader is None and change.isr is None and change.elr is None and change.last_known_elr is None:
            return None
        return change


def merged(part: PartitionRegistration, change: PartitionChangeRecord | None) -> PartitionRegistration:
    """The partition after `change` (the same rule the delta applies)."""
    if change is None:
        return part
    leader, leader_epoch = part.leader, part.leader_epoch
    if change.leader is not None:
        leader, leader_epoch = change.leader, leader_epoch + 1
    return PartitionRegistration(
        part.replicas,
        part.isr if change.isr is None else change.isr,
        leader,
        leader_epoch,
        part.partition_epoch + 1,
        part.elr if change.elr is None else change.elr,
        part.last_known_elr if change.last_known_elr is None else change.last_known_elr,
    )
