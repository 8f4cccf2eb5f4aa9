"""One group's state: members, generation, protocol, committed offsets (Kafka's GroupMetadata, MemberMetadata).

Design notes: docs/groups.md, section "broker/groups/group.py".
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kraftpy.broker.groups.records import GroupMetadataValue, MemberRecord, OffsetAndMetadata
from kraftpy.protocol.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from kraftpy.protocol.consumer_protocol import subscribed_topics
from kraftpy.protocol.types import TopicPartition


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(AssertionError):
    """A transition Kafka's state machine forbids: a coordinator bug, never a client's fault."""


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    # Request ids of the JoinGroup / SyncGroup this member waits on (answered when the rebalance gets there).
    awaiting_join: Hashable | None = None
    awaiting_sync: Hashable | None = None
    # Joined but never answered: cannot heartbeat yet, so it expires on its own (shorter) join timeout.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        return tuple(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass
class GroupMetadata:
    group_id: str
    partition: int
    state: GroupState = GroupState.EMPTY
    current_state_timestamp_ms: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    pending_members: set[str] = field(default_factory=set)  # answered MEMBER_ID_REQUIRED, not back yet
    pending_sync_members: set[str] = field(default_factory=set)  # answered JoinGroup, no SyncGroup yet
    # InitialDelayedJoin: a new member arrived while the first rebalance of a new group waited.
    new_member_added: bool = False
    initial_delay_remaining_ms: int | None = None  # None: the running join timer is a plain DelayedJoin
    # The leader's SyncGroup is being written for this generation; a repeated SyncGroup must not write again.
    storing_generation: int | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    pending_offset_commits: dict[TopicPartition, int] = field(default_factory=dict)  # appends in flight per tp
    # TxnOffsetCommit offsets written but not yet committed, per producer id (Kafka's
    # pendingTransactionalOffsetCommits): the transaction's COMMIT marker materializes them.
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    subscribed_topics: frozenset[str] | None = None  # consumer groups only; None: unknown

    # --- state --------------------------------------------------------------------------------

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupTransition(f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed")
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # --- members ------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A known instance id now mapped to another member id: the caller is a stale duplicate."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Move a static member to a new member id, keeping its place, assignment and leadership."""
        member = self.members[old_member_id]
        member.member_id = new_member_id
        # Rebuild rather than pop and re-add: join order decides the next leader.
        self.members = {(new_member_id if mid == old_member_id else mid): m for mid, m in self.members.items()}
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False when nobody rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    # --- protocols ----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Can a member with these protocols join? In an empty group anything non-empty goes."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def select_protocol(self) -> str:
        """Kafka's vote: each member picks its favourite common protocol; most votes win.

        Ties go to the protocol the earliest member prefers, so the choice is deterministic.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol every member supports")
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(first.protocol_names())}
        return min(votes, key=lambda name: (-votes[name], order.get(name, len(order))))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()
        self.subscribed_topics = self.compute_subscribed_topics()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """What a consumer group reads (for offset expiry); None when it cannot be known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = subscribed_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return frozenset(topics)

    # --- offsets ------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits) or bool(self.pending_txn_offsets)

    def has_unstable_offset(self, tp: TopicPartition) -> bool:
        """Whether a commit of `tp` is in flight or in an open transaction (OffsetFetch require_stable)."""
        return tp in self.pending_offset_commits or any(tp in p for p in self.pending_txn_offsets.values())

    def complete_txn_offsets(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended: its offsets become the committed ones, or are dropped."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if pending and committed:
            self.offsets.update(pending)

    def add_pending_commits(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.pending_offset_commits[tp] = self.pending_offset_commits.get(tp, 0) + 1

    def complete_pending_commits(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            left = self.pending_offset_commits.get(tp, 0) - 1
            if left > 0:
                self.pending_offset_commits[tp] = left
            else:
                self.pending_offset_commits.pop(tp, None)

    # --- persistence --------------------------------------------------------------------------

    def metadata_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadataValue to store, with `assignments` instead of the members' current ones if given."""
        members = tuple(
            MemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name) if self.protocol_name is not None else b"",
                assignment=m.assignment if assignments is None else assignments.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.current_state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, partition: int, value: GroupMetadataValue) -> GroupMetadata:
        """A group as loaded from its last GroupMetadataValue (Kafka's GroupMetadata.loadGroup)."""
        group = cls(group_id, partition)
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.current_state_timestamp_ms = value.current_state_timestamp_ms
        for record in value.members:
            protocols = ((value.protocol, record.subscription),) if value.protocol is not None else ()
            member = MemberMetadata(
                member_id=record.member_id,
                group_instance_id=record.group_instance_id,
                client_id=record.client_id,
                client_host=record.client_host,
                rebalance_timeout_ms=record.rebalance_timeout_ms,
                session_timeout_ms=record.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=record.assignment,
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
