"""Where each assigned partition's position comes from, and what stops the consumer (sans-I/O).

Kafka's updateFetchPositions, run at every poll() and position(): report a
log truncation until the application seeks past it, then an error a lookup
left; ask for validation of positions whose leader changed (KIP-320); give
partitions without a position the group's committed offset (with a group)
or auto_offset_reset (earliest/latest; NoOffsetForPartitionError for none);
then the list_offsets resets that are due. The consumer sends what `update`
returns and raises its error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kraftpy.client.consumer.offset_fetcher import ListOffsetsRequest, OffsetFetcher
from kraftpy.client.consumer.position_validator import PositionValidator, ValidationRequest
from kraftpy.client.consumer.subscription import FetchPosition, FetchState, LogTruncation, SubscriptionState
from kraftpy.client.errors import LogTruncationError, NoOffsetForPartitionError, is_retriable
from kraftpy.client.group.commits import GroupOperation
from kraftpy.client.metadata import Metadata
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class PositionWork:
    """What the consumer does after `update`, in this order: send `validations`, start a committed-offsets
    lookup for `lookup` (then `lookup_started`), raise `error`, send `resets`."""

    validations: list[ValidationRequest] = field(default_factory=list)
    lookup: list[TopicPartition] = field(default_factory=list)
    error: Exception | None = None
    resets: list[ListOffsetsRequest] = field(default_factory=list)


class FetchPositions:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: Metadata,
        offsets: OffsetFetcher,
        validator: PositionValidator,
        *,
        use_committed: bool,
    ) -> None:
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.offsets = offsets
        self.validator = validator
        self.use_committed = use_committed  # a group: start from its committed offsets
        self.lookup: GroupOperation | None = None  # the committed-offsets lookup in progress
        self._truncations: dict[TopicPartition, LogTruncation] = {}

    def update(self, now_ms: int) -> PositionWork:
        work = PositionWork()
        work.error = self._truncation_error(self.validator.take_truncations())
        if work.error is None:
            work.error = self.offsets.take_error() or self.validator.error
            self.validator.error = None
        if work.error is not None:
            return work
        work.validations = self.validator.prepare_requests(now_ms)
        if not self.use_committed:
            stuck = self.subscriptions.reset_initializing_positions()
        else:
            stuck, work.error = self._start_from_committed()
            if work.error is not None:
                return work
            waiting = self.subscriptions.initializing_partitions()
            if waiting and self.lookup is None:
                work.lookup = waiting
        if stuck:
            work.error = NoOffsetForPartitionError(stuck)
            return work
        work.resets = self.offsets.prepare_requests(now_ms)
        return work

    def lookup_started(self, lookup: GroupOperation) -> None:
        self.lookup = lookup

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """The application seeked, or the partitions left the assignment: their truncations are settled."""
        for tp in partitions:
            self._truncations.pop(tp, None)

    def _truncation_error(self, found: list[LogTruncation]) -> LogTruncationError | None:
        for truncation in found:
            self._truncations[truncation.tp] = truncation
        # A truncation stays raised until the application seeks (or the position moves on).
        for tp, truncation in list(self._truncations.items()):
            state = self.subscriptions.state(tp) if self.subscriptions.is_assigned(tp) else None
            if state is None or state.position != truncation.position or self.subscriptions.has_valid_position(tp):
                del self._truncations[tp]
        if not self._truncations:
            return None
        return LogTruncationError({tp: (t.position.offset, t.divergent_offset) for tp, t in self._truncations.items()})

    def _start_from_committed(self) -> tuple[list[TopicPartition], Exception | None]:
        """A finished lookup: partitions still without a position start at their committed offset (validated
        like any position with an epoch); only those without one get auto_offset_reset. Returns the partitions
        that cannot start (policy none) and an error the application must see (retriable ones retry)."""
        lookup = self.lookup
        if lookup is None or not lookup.done:
            return [], None
        self.lookup = None
        if lookup.error is not None:
            if not is_retriable(lookup.error.code):
                return [], lookup.error
            log.info("looking up committed offsets failed (%s); trying again", lookup.error)
            return [], None
        without = []
        for tp, committed in lookup.result.items():
            if not self.subscriptions.is_assigned(tp):
                continue
            if self.subscriptions.state(tp).fetch_state is not FetchState.INITIALIZING:
                continue  # the application seeked meanwhile
            if committed is None:
                without.append(tp)
            else:
                position = FetchPosition(committed.offset, committed.leader_epoch, self.metadata.current_leader(tp))
                log.info("%s starts at its committed offset %d", tp, committed.offset)
                self.subscriptions.seek_unvalidated(tp, position)
        return self.subscriptions.reset_initializing_positions(without), None
