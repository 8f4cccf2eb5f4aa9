"""GroupCoordinator: the sans-I/O group coordinator a broker's shell drives (Kafka's GroupCoordinator).

Design notes: docs/groups.md, section "broker/groups/coordinator.py".
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from kraftpy.broker.groups.actions import Action
from kraftpy.broker.groups.admin import GroupAdmin
from kraftpy.broker.groups.config import GroupCoordinatorConfig
from kraftpy.broker.groups.group import GroupMetadata
from kraftpy.broker.groups.loader import build_groups, replay
from kraftpy.broker.groups.offsets import OffsetManager
from kraftpy.broker.groups.rebalance import Rebalancer
from kraftpy.broker.groups.records import Record
from kraftpy.broker.groups.requests import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    GroupRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    RequestParser,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from kraftpy.broker.groups.runtime import CoordinatorRuntime, PartitionStatus
from kraftpy.protocol.errors import ErrorCode


class GroupCoordinator:
    def __init__(self, config: GroupCoordinatorConfig | None = None, *, rng: random.Random | None = None) -> None:
        self.config = config or GroupCoordinatorConfig()
        self._rt = CoordinatorRuntime(self.config, rng or random.Random())
        self._rebalancer = Rebalancer(self._rt)
        self._offsets = OffsetManager(self._rt, self._rebalancer.schedule_session)
        self._admin = GroupAdmin(self._rt)
        self._parser = RequestParser(self.config)

    # --- inspection ---------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return self._rt.partition_for(group_id)

    def group(self, group_id: str) -> GroupMetadata | None:
        return self._rt.groups.get(group_id)

    @property
    def groups(self) -> Mapping[str, GroupMetadata]:
        return self._rt.groups

    def partition_status(self, partition: int) -> PartitionStatus | None:
        return self._rt.partitions.get(partition)

    def pending_appends(self) -> int:
        return self._rt.pending_appends()

    # --- owning offsets partitions ------------------------------------------------------------

    def begin_loading(self, partition: int, leader_epoch: int = -1) -> None:
        """This broker leads `partition` now; its groups answer COORDINATOR_LOAD_IN_PROGRESS until loaded.

        `leader_epoch` (the partition's, which the shared loader passes) is not needed by groups.
        """
        self._check_partition(partition)
        if self._rt.partitions.get(partition) is PartitionStatus.ACTIVE:
            raise ValueError(f"__consumer_offsets-{partition} is already loaded; unload it first")
        self._rt.partitions[partition] = PartitionStatus.LOADING
        self._rt.load_epochs[partition] = self._rt.load_epochs.get(partition, 0) + 1

    def complete_loading(
        self,
        partition: int,
        records: Iterable[Record],
        now_ms: int,
        open_txns: Mapping[int, Iterable[Record]] | None = None,
    ) -> list[Action]:
        """Rebuild the partition's groups from its records (log order) and start serving them.

        `open_txns`: per producer id, TxnOffsetCommit records whose transaction has no marker yet;
        they wait as pending transactional offsets. A record that does not decode is logged and
        skipped (loader.py): a load never blocks on one.
        """
        if self._rt.partitions.get(partition) is not PartitionStatus.LOADING:
            self.begin_loading(partition)
        loaded = build_groups(records, partition)
        for producer_id, held in (open_txns or {}).items():
            for group_id, entry in replay(held).items():
                group = loaded.setdefault(group_id, GroupMetadata(group_id, partition))
                group.pending_txn_offsets.setdefault(producer_id, {}).update(entry.offsets)
        self._rt.run_due_timers(now_ms)
        for group_id, group in loaded.items():
            self._rt.groups[group_id] = group
        self._rt.partitions[partition] = PartitionStatus.ACTIVE
        for group in loaded.values():
            self._rebalancer.on_group_loaded(group, now_ms)
        self._offsets.ensure_expiry_scheduled(now_ms)
        return self._rt.drain()

    def unload(self, partition: int, now_ms: int) -> list[Action]:
        """This broker no longer leads `partition`: its groups are forgotten, waiting members told NOT_COORDINATOR."""
        self._check_partition(partition)
        self._rt.run_due_timers(now_ms)
        self._rt.partitions.pop(partition, None)
        self._rt.load_epochs[partition] = self._rt.load_epochs.get(partition, 0) + 1
        for group in [g for g in self._rt.groups.values() if g.partition == partition]:
            self._rebalancer.on_group_unloaded(group, now_ms)
        return self._rt.drain()

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.config.offsets_topic_num_partitions:
            raise ValueError(
                f"partition {partition} is not one of the {self.config.offsets_topic_num_partitions} offsets partitions"
            )

    # --- requests, completions, timers --------------------------------------------------------

    def parse(self, api: str, body: Mapping[str, Any]) -> GroupRequest:
        """The request `handle` would act on (KafkaError INVALID_REQUEST if malformed); changes nothing."""
        return self._parser.parse(api, body)

    def handle(self, request_id: Hashable, api: str, body: Mapping[str, Any], now_ms: int) -> list[Action]:
        """One group API request. The answer may be among the returned actions or come later."""
        request = self._parser.parse(api, body)  # raises before any state changes
        self._rt.run_due_timers(now_ms)
        match request:
            case JoinGroupRequest():
                self._rebalancer.join_group(request_id, request, now_ms)
            case SyncGroupRequest():
                self._rebalancer.sync_group(request_id, request, now_ms)
            case HeartbeatRequest():
                self._rebalancer.heartbeat(request_id, request, now_ms)
            case LeaveGroupRequest():
                self._rebalancer.leave_group(request_id, request, now_ms)
            case OffsetCommitRequest():
                self._offsets.commit(request_id, request, now_ms)
            case TxnOffsetCommitRequest():
                self._offsets.commit(request_id, request.commit, now_ms, txn=request)
            case OffsetFetchRequest():
                self._offsets.fetch(request_id, request)
            case ListGroupsRequest():
                self._admin.list_groups(request_id, request)
            case DescribeGroupsRequest():
                self._admin.describe_groups(request_id, request)
            case DeleteGroupsRequest():
                self._admin.delete_groups(request_id, request, now_ms)
            case OffsetDeleteRequest():
                self._offsets.delete(request_id, request)
        return self._rt.drain()

    def append_completed(self, append_id: int, error: ErrorCode | int, now_ms: int) -> list[Action]:
        try:
            code = ErrorCode(int(error))
        except ValueError:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        self._rt.run_due_timers(now_ms)
        self._rt.complete_append(append_id, code, now_ms)
        return self._rt.drain()

    def complete_txn_offsets(
        self, tp: tuple[str, int], producer_id: int, producer_epoch: int, committed: bool, now_ms: int | None = None
    ) -> list[Action]:
        """The partition side's hook (docs/transactions.md): a marker of `producer_id` landed on offsets
        partition `tp`; the producer's pending transactional offsets there are materialized or dropped."""
        self._offsets.complete_txn_offsets(tp[1], producer_id, committed)
        return self._rt.drain()

    def tick(self, now_ms: int) -> list[Action]:
        self._rt.run_due_timers(now_ms)
        return self._rt.drain()

    def next_deadline_ms(self) -> int | None:
        return self._rt.timers.next_deadline()

    def cleanup_group_metadata(self, now_ms: int) -> list[Action]:
        """Run offset expiry now (the timer does it every offsets_retention_check_interval_ms)."""
        self._rt.run_due_timers(now_ms)
        self._offsets.cleanup_group_metadata(now_ms)
        return self._rt.drain()
