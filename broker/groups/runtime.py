"""The coordinator's shared state and plumbing: groups, owned partitions, timers, answers and appends.

The rebalance, offset and admin logic all work on one CoordinatorRuntime;
this module owns the parts they share so that each of them stays about its
protocol: where a group lives and whether this coordinator serves it, the
outbox of actions the current call produces, appends whose completion runs a
continuation, and timers dispatched by kind.
"""

from __future__ import annotations

import enum
import logging
import random
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kraftpy.broker.groups.actions import Action, Append, Respond
from kraftpy.broker.groups.config import GroupCoordinatorConfig
from kraftpy.broker.groups.group import GroupMetadata, GroupState
from kraftpy.broker.groups.records import Record, partition_for
from kraftpy.broker.groups.timers import TimerQueue
from kraftpy.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

AppendCallback = Callable[[ErrorCode, int], None]
TimerHandler = Callable[[tuple[Hashable, ...], int], None]


class PartitionStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class _PendingAppend:
    partition: int
    callback: AppendCallback


class CoordinatorRuntime:
    def __init__(self, config: GroupCoordinatorConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.groups: dict[str, GroupMetadata] = {}
        self.partitions: dict[int, PartitionStatus] = {}
        # Bumped whenever a partition is loaded or unloaded, so a continuation from an
        # earlier term of ownership never touches the state of a later one.
        self.load_epochs: dict[int, int] = {}
        self.timers = TimerQueue()
        self.timer_handlers: dict[str, TimerHandler] = {}
        self._outbox: list[Action] = []
        self._appends: dict[int, _PendingAppend] = {}
        self._next_append_id = 1

    # --- where groups live --------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def coordinator_error(self, group_id: str) -> tuple[ErrorCode, str] | None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this coordinator cannot serve the group now."""
        partition = self.partition_for(group_id)
        status = self.partitions.get(partition)
        if status is None:
            return ErrorCode.NOT_COORDINATOR, f"this broker does not coordinate __consumer_offsets-{partition}"
        if status is PartitionStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"__consumer_offsets-{partition} is still loading"
        return None

    def is_active(self, partition: int, load_epoch: int | None = None) -> bool:
        if self.partitions.get(partition) is not PartitionStatus.ACTIVE:
            return False
        return load_epoch is None or self.load_epochs.get(partition) == load_epoch

    def create_group(self, group_id: str) -> GroupMetadata:
        group = GroupMetadata(group_id, self.partition_for(group_id))
        self.groups[group_id] = group
        return group

    def drop_if_blank(self, group_id: str) -> None:
        """Forget a group that never got anywhere (no generation, members, offsets): nothing was written for it."""
        group = self.groups.get(group_id)
        if (
            group is not None
            and group.state is GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.has_offsets()
        ):
            del self.groups[group_id]

    def new_member_id(self, prefix: str) -> str:
        # Kafka's clientId + "-" + UUID; the UUID comes from the injected random source (sans-I/O, reproducible).
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    # --- outputs ------------------------------------------------------------------------------

    def respond(self, request_id: Hashable, body: dict) -> None:
        self._outbox.append(Respond(request_id, body))

    def append(
        self,
        partition: int,
        records: list[Record],
        kind: str,
        callback: AppendCallback,
        producer: tuple[int, int] | None = None,
    ) -> None:
        """Ask the shell to write `records`; `producer` (id, epoch) makes it a transactional batch."""
        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = _PendingAppend(partition, callback)
        pid, epoch = producer if producer is not None else (-1, -1)
        self._outbox.append(Append(append_id, partition, tuple(records), kind, pid, epoch))

    def complete_append(self, append_id: int, error: ErrorCode, now_ms: int) -> None:
        pending = self._appends.pop(append_id, None)
        if pending is None:
            log.warning("completion of unknown append %d ignored", append_id)
            return
        pending.callback(error, now_ms)

    def pending_appends(self) -> int:
        return len(self._appends)

    def drain(self) -> list[Action]:
        out, self._outbox = self._outbox, []
        return out

    # --- timers -------------------------------------------------------------------------------

    def run_due_timers(self, now_ms: int) -> None:
        while (key := self.timers.pop_due(now_ms)) is not None:
            assert isinstance(key, tuple)
            self.timer_handlers[key[0]](key, now_ms)
