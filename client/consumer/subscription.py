"""Which partitions the consumer reads and where it stands in each (sans-I/O), as Kafka's SubscriptionState.

Design notes: docs/client.md, section "client/consumer/subscription.py".
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kraftpy.client.errors import IllegalStateError
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.client.metadata import LeaderAndEpoch
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)


class FetchState(enum.Enum):
    INITIALIZING = "initializing"
    FETCHING = "fetching"
    AWAIT_RESET = "await_reset"
    AWAIT_VALIDATION = "await_validation"

    @property
    def has_position(self) -> bool:
        return self in (FetchState.FETCHING, FetchState.AWAIT_VALIDATION)


class OffsetResetStrategy(enum.Enum):
    LATEST = "latest"
    EARLIEST = "earliest"
    NONE = "none"

    @property
    def timestamp(self) -> int:
        """The list_offsets timestamp for this strategy: -1 latest, -2 earliest."""
        if self is OffsetResetStrategy.NONE:
            raise ValueError("no offset lookup for the NONE strategy")
        return -1 if self is OffsetResetStrategy.LATEST else -2


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "auto_topics"  # subscribe(topics) with a group
    AUTO_PATTERN = "auto_pattern"
    USER_ASSIGNED = "user_assigned"


NO_LEADER = LeaderAndEpoch(None, None)
EXCLUSIVE = "Subscription to topics, partitions and pattern are mutually exclusive"


@dataclass(frozen=True, slots=True)
class FetchPosition:
    offset: int
    offset_epoch: int | None = None  # leader epoch of the last record consumed before `offset`
    current_leader: LeaderAndEpoch = NO_LEADER

    def __str__(self) -> str:
        return f"offset {self.offset} (epoch {self.offset_epoch}, leader {self.current_leader.leader})"


@dataclass(frozen=True, slots=True)
class LogTruncation:
    """Validation found the log below our position was replaced; `divergent_offset` None = unknown."""

    tp: TopicPartition
    position: FetchPosition
    divergent_offset: int | None
    divergent_epoch: int | None = None


@dataclass
class TopicPartitionState:
    fetch_state: FetchState = FetchState.INITIALIZING
    position: FetchPosition | None = None
    high_watermark: int | None = None
    log_start_offset: int | None = None
    paused: bool = False
    reset_strategy: OffsetResetStrategy | None = None
    next_retry_ms: int | None = None
    pending_revocation: bool = False  # about to be revoked in a rebalance: no more fetches, no more records

    def is_fetchable(self) -> bool:
        return (
            not self.paused
            and not self.pending_revocation
            and self.fetch_state is FetchState.FETCHING
            and self.position is not None
        )

    def transition(self, state: FetchState, position: FetchPosition | None = None) -> None:
        self.fetch_state = state
        if position is not None or not state.has_position:
            self.position = position
        self.next_retry_ms = None
        if state is not FetchState.AWAIT_RESET:
            self.reset_strategy = None


class SubscriptionState:
    def __init__(self, default_reset: OffsetResetStrategy | str = OffsetResetStrategy.LATEST) -> None:
        self.default_reset = OffsetResetStrategy(default_reset)
        self.subscription_type = SubscriptionType.NONE
        self.rebalance_listener: object | None = None
        self._assignment: dict[TopicPartition, TopicPartitionState] = {}

    # Assignment ------------------------------------------------------------

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment; partitions kept from the previous assignment keep their position."""
        if self.subscription_type not in (SubscriptionType.NONE, SubscriptionType.USER_ASSIGNED):
            raise IllegalStateError(EXCLUSIVE)
        wanted = list(dict.fromkeys(partitions))
        self._assignment = {tp: self._assignment.get(tp) or TopicPartitionState() for tp in wanted}
        self.subscription_type = SubscriptionType.USER_ASSIGNED if wanted else SubscriptionType.NONE

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: object | None = None,
    ) -> frozenset[str] | re.Pattern[str]:
        """Subscribe to topics or to a pattern (exactly one); returns the checked topics or compiled pattern.

        Replaces an earlier subscription; IllegalStateError after assign() (Kafka's rule).
        """
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes either topics or pattern=")
        if self.subscription_type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError(EXCLUSIVE)
        if pattern is not None:
            try:
                chosen: frozenset[str] | re.Pattern[str] = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise ValueError(f"invalid subscription pattern {pattern!r}: {exc}") from None
            kind = SubscriptionType.AUTO_PATTERN
        else:
            if isinstance(topics, str):
                raise ValueError("subscribe() takes a list of topics, not one string")
            assert topics is not None
            chosen = frozenset(topics)
            if any(not isinstance(t, str) or not t.strip() for t in chosen):
                raise ValueError(f"topic names must be non-empty strings, got {sorted(map(repr, chosen))}")
            kind = SubscriptionType.AUTO_TOPICS
            if not chosen:
                raise ValueError("subscribe() needs at least one topic; call unsubscribe() to stop consuming")
        self.subscription_type = kind
        self.rebalance_listener = listener
        return chosen

    @property
    def is_subscribed(self) -> bool:
        """Group-managed (subscribe) rather than manually assigned."""
        return self.subscription_type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    def unsubscribe(self) -> None:
        self._assignment = {}
        self.subscription_type = SubscriptionType.NONE
        self.rebalance_listener = None

    # The group's AssignmentStore (client/group/membership_types.py) ----------------

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment; partitions kept keep their state, new ones start without a position."""
        if not self.is_subscribed:
            raise IllegalStateError("assign_from_subscribed() needs a subscription")
        wanted = sorted(set(partitions))
        self._assignment = {tp: self._assignment.get(tp) or TopicPartitionState() for tp in wanted}

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What a commit of everything commits: each position the application has, with its record's epoch."""
        return {
            tp: OffsetAndMetadata(s.position.offset, "", s.position.offset_epoch)
            for tp, s in self._assignment.items()
            if s.fetch_state is FetchState.FETCHING and s.position is not None
        }

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            state = self._assignment.get(tp)
            if state is not None:
                state.pending_revocation = True

    def is_fetchable(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.is_fetchable()

    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def topics(self) -> set[str]:
        return {tp.topic for tp in self._assignment}

    def _state(self, tp: TopicPartition) -> TopicPartitionState:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"no current assignment for partition {tp}")
        return state

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        return self._state(tp)

    # Positions -------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The application chose an offset: fetch from it without validation (no epoch known)."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        self.seek_unvalidated(tp, FetchPosition(offset, None, NO_LEADER))

    def seek_unvalidated(self, tp: TopicPartition, position: FetchPosition) -> None:
        """Take a position; it is validated first when it carries an epoch (Kafka's seekUnvalidated)."""
        state = self._state(tp)
        if position.offset_epoch is not None and position.current_leader.epoch is not None:
            state.transition(FetchState.AWAIT_VALIDATION, position)
        else:
            state.transition(FetchState.FETCHING, position)

    def seek_validated(self, tp: TopicPartition, position: FetchPosition) -> None:
        self._state(tp).transition(FetchState.FETCHING, position)

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        state = self._state(tp)
        return state.position if state.fetch_state.has_position else None

    def update_position(self, tp: TopicPartition, position: FetchPosition) -> None:
        """Records up to position.offset were handed to the application."""
        state = self._state(tp)
        if not state.fetch_state.has_position:
            raise IllegalStateError(f"cannot move the position of {tp} while it is {state.fetch_state.value}")
        state.position = position

    def has_valid_position(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.fetch_state is FetchState.FETCHING

    def has_all_fetch_positions(self) -> bool:
        return all(s.fetch_state is FetchState.FETCHING for s in self._assignment.values())

    def fetchable_partitions(self, accept: Callable[[TopicPartition], bool] = lambda tp: True) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if s.is_fetchable() and accept(tp)]

    def update_high_watermark(self, tp: TopicPartition, hw: int) -> None:
        if tp in self._assignment:
            self._assignment[tp].high_watermark = hw

    def update_log_start_offset(self, tp: TopicPartition, offset: int) -> None:
        if tp in self._assignment:
            self._assignment[tp].log_start_offset = offset

    # Pausing ---------------------------------------------------------------

    def pause(self, tp: TopicPartition) -> None:
        self._state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self._state(tp).paused = False

    def is_paused(self, tp: TopicPartition) -> bool:
        return self._state(tp).paused

    def paused_partitions(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    # Resets ----------------------------------------------------------------

    def request_offset_reset(self, tp: TopicPartition, strategy: OffsetResetStrategy | None = None) -> None:
        state = self._state(tp)
        state.transition(FetchState.AWAIT_RESET)
        state.reset_strategy = strategy or self.default_reset

    def has_default_reset_policy(self) -> bool:
        return self.default_reset is not OffsetResetStrategy.NONE

    def initializing_partitions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if s.fetch_state is FetchState.INITIALIZING]

    def reset_initializing_positions(self, partitions: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """Partitions without a position (all, or those of `partitions`) get the default reset; returns those
        that cannot (policy none)."""
        stuck = []
        chosen = None if partitions is None else set(partitions)
        for tp in self.initializing_partitions():
            if chosen is not None and tp not in chosen:
                continue
            if self.has_default_reset_policy():
                self.request_offset_reset(tp)
            else:
                stuck.append(tp)
        return stuck

    def partitions_needing_reset(self, now_ms: int) -> list[TopicPartition]:
        return [
            tp
            for tp, s in self._assignment.items()
            if s.fetch_state is FetchState.AWAIT_RESET and (s.next_retry_ms is None or s.next_retry_ms <= now_ms)
        ]

    def reset_strategy(self, tp: TopicPartition) -> OffsetResetStrategy | None:
        return self._state(tp).reset_strategy

    def set_next_allowed_retry(self, partitions: Iterable[TopicPartition], next_ms: int) -> None:
        for tp in partitions:
            if tp in self._assignment:
                self._assignment[tp].next_retry_ms = next_ms

    def maybe_seek_unvalidated(
        self, tp: TopicPartition, position: FetchPosition, strategy: OffsetResetStrategy
    ) -> bool:
        """Complete a reset with a list_offsets answer, unless the application seeked meanwhile."""
        state = self._assignment.get(tp)
        if state is None or state.fetch_state is not FetchState.AWAIT_RESET or state.reset_strategy is not strategy:
            log.debug("ignoring the reset answer for %s: no longer awaiting a %s reset", tp, strategy.value)
            return False
        self.seek_unvalidated(tp, position)
        return True

    # Validation (KIP-320) --------------------------------------------------

    def maybe_validate_position_for_current_leader(self, tp: TopicPartition, leader: LeaderAndEpoch) -> bool:
        """A (possibly new) leader: if it differs from the one the position was checked against, validate.

        Returns True when the partition now awaits validation.
        """
        state = self._state(tp)
        if state.fetch_state is FetchState.AWAIT_RESET or leader.leader is None or state.position is None:
            return False
        if not state.fetch_state.has_position:
            return False
        if state.position.current_leader != leader:
            moved = replace(state.position, current_leader=leader)
            if moved.offset_epoch is not None and leader.epoch is not None:
                state.transition(FetchState.AWAIT_VALIDATION, moved)
            else:
                # Nothing to compare (no epoch for the position, or the leader has none): just follow it.
                state.transition(FetchState.FETCHING, moved)
        return state.fetch_state is FetchState.AWAIT_VALIDATION

    def partitions_needing_validation(self, now_ms: int) -> list[TopicPartition]:
        return [
            tp
            for tp, s in self._assignment.items()
            if s.fetch_state is FetchState.AWAIT_VALIDATION and (s.next_retry_ms is None or s.next_retry_ms <= now_ms)
        ]

    def maybe_complete_validation(
        self, tp: TopicPartition, requested: FetchPosition, end_offset: int, end_epoch: int
    ) -> LogTruncation | None:
        """Apply an offsets_for_leader_epoch answer (or a fetch's diverging_epoch), as Kafka does.

        end_offset/end_epoch is the leader's end of the largest epoch <= our position's
        epoch; -1 means the leader has no such epoch at all. If it ends before our
        position, the records between were truncated: with a reset policy we resume at
        the divergence point; without one the truncation goes back to the application.
        """
        state = self._assignment.get(tp)
        if state is None or state.fetch_state is not FetchState.AWAIT_VALIDATION:
            return None
        current = state.position
        if current != requested:
            log.debug("ignoring validation of %s: the position moved to %s", tp, current)
            return None
        assert current is not None
        if end_offset < 0 or end_epoch < 0:
            if self.has_default_reset_policy():
                log.info("truncation detected for %s at %s; resetting with %s", tp, current, self.default_reset.value)
                self.request_offset_reset(tp)
                return None
            return LogTruncation(tp, current, None)
        if end_offset < current.offset:
            if self.has_default_reset_policy():
                diverged = FetchPosition(end_offset, end_epoch, current.current_leader)
                log.warning(
                    "truncation detected for %s at %s; resuming at the divergence point, offset %d",
                    tp,
                    current,
                    end_offset,
                )
                state.transition(FetchState.FETCHING, diverged)
                return None
            return LogTruncation(tp, current, end_offset, end_epoch)
        state.transition(FetchState.FETCHING, current)
        return None

    def handle_diverging_epoch(
        self, tp: TopicPartition, requested: FetchPosition, end_offset: int, end_epoch: int
    ) -> LogTruncation | None:
        """A fetch answer carried DivergingEpoch: validate the position against it at once."""
        state = self._assignment.get(tp)
        if state is None or state.position != requested or not state.fetch_state.has_position:
            return None
        state.transition(FetchState.AWAIT_VALIDATION, requested)
        return self.maybe_complete_validation(tp, requested, end_offset, end_epoch)

    def awaiting_validation(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.fetch_state is FetchState.AWAIT_VALIDATION
