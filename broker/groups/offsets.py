"""OffsetCommit, OffsetFetch and offset expiry (Kafka's GroupCoordinator.handleCommitOffsets, GroupMetadataManager).

Design notes: docs/groups.md, section "broker/groups/offsets.py".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from kraftpy.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from kraftpy.broker.groups.records import (
    GroupMetadataKey,
    OffsetAndMetadata,
    OffsetCommitKey,
    Record,
    offset_commit_record,
    tombstone,
)
from kraftpy.broker.groups.requests import (
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)
from kraftpy.broker.groups.responses import (
    commit_storage_error,
    offset_commit_response,
    offset_delete_response,
    offset_fetch_response,
    storage_error,
)
from kraftpy.broker.groups.runtime import CoordinatorRuntime
from kraftpy.protocol.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

E = ErrorCode
EXPIRE_TIMER = ("expire",)


class OffsetManager:
    def __init__(
        self, runtime: CoordinatorRuntime, reschedule_session: Callable[[GroupMetadata, MemberMetadata, int], None]
    ) -> None:
        self.rt = runtime
        # Rebalancer._schedule_heartbeat: a member's commit counts as a sign of life, as in Kafka.
        self._reschedule_session = reschedule_session
        runtime.timer_handlers["expire"] = self._on_expire_timer

    # --- OffsetCommit -------------------------------------------------------------------------

    def commit(
        self, rid: Hashable, req: OffsetCommitRequest, now_ms: int, txn: TxnOffsetCommitRequest | None = None
    ) -> None:
        """OffsetCommit, or with `txn` TxnOffsetCommit: the same checks, the offsets held until the transaction ends."""
        rt = self.rt
        keys = [(p.topic, p.partition) for p in req.partitions]

        def answer_all(code: ErrorCode, message: str = "") -> None:
            rt.respond(rid, offset_commit_response(dict.fromkeys(keys, code), dict.fromkeys(keys, message)))

        if (err := rt.coordinator_error(req.group_id)) is not None:
            return answer_all(*err)
        group = rt.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0 and txn is None:  # Kafka creates the group for a transactional commit
                return answer_all(E.ILLEGAL_GENERATION, f"group {req.group_id!r} does not exist")
            group = rt.create_group(req.group_id)
        try:
            if (err := self._validate(group, req)) is not None and not rt.config.test_break_commit_any_generation:
                return answer_all(*err)
            if group.state is GroupState.COMPLETING_REBALANCE and txn is None:
                return answer_all(E.REBALANCE_IN_PROGRESS, "the group is completing a rebalance; commit after it")
            if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and req.member_id in group.members:
                self._reschedule_session(group, group.members[req.member_id], now_ms)
            self._store(rid, group, req, now_ms, txn)
        finally:
            rt.drop_if_blank(req.group_id)

    @staticmethod
    def _validate(group: GroupMetadata, req: OffsetCommitRequest) -> tuple[ErrorCode, str] | None:
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, "the group is unloading; find the coordinator again"
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            if group.is_static_member_fenced(req.member_id, req.group_instance_id):
                return E.FENCED_INSTANCE_ID, f"instance {req.group_instance_id!r} now belongs to another member id"
            if not group.has(req.member_id):
                return E.UNKNOWN_MEMBER_ID, f"member {req.member_id!r} is not in group {group.group_id!r}"
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the group's {group.generation_id}"
            return None
        if group.state is not GroupState.EMPTY:
            return E.UNKNOWN_MEMBER_ID, "the group has active members; only they may commit"
        return None

    def _store(
        self,
        rid: Hashable,
        group: GroupMetadata,
        req: OffsetCommitRequest,
        now_ms: int,
        txn: TxnOffsetCommitRequest | None = None,
    ) -> None:
        rt = self.rt
        limit = rt.config.offset_metadata_max_bytes
        results: dict[tuple[str, int], ErrorCode] = {}
        messages: dict[tuple[str, int], str] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for p in req.partitions:
            if len(p.metadata) > limit:
                results[(p.topic, p.partition)] = E.OFFSET_METADATA_TOO_LARGE
                messages[(p.topic, p.partition)] = f"metadata is {len(p.metadata)} characters; at most {limit}"
                continue
            accepted[TopicPartition(p.topic, p.partition)] = OffsetAndMetadata(
                p.offset, p.leader_epoch, p.metadata, now_ms
            )
        if not accepted:
            return rt.respond(rid, offset_commit_response(results, messages))
        records = [offset_commit_record(group.group_id, tp.topic, tp.partition, om) for tp, om in accepted.items()]
        group.add_pending_commits(accepted)
        partition, group_id = group.partition, group.group_id
        epoch = rt.load_epochs.get(partition, 0)

        def stored(error: ErrorCode, now_ms: int) -> None:
            group.complete_pending_commits(accepted)
            # A group deleted while this was in flight stays deleted: its tombstones (which cover
            # pending commits too) were asked for after this append, so they follow it in the log.
            if error is E.NONE and rt.is_active(partition, epoch) and rt.groups.get(group_id) is group:
                if txn is None:
                    group.offsets.update(accepted)
                else:
                    group.pending_txn_offsets.setdefault(txn.producer_id, {}).update(accepted)
            code = E.NONE if error is E.NONE else commit_storage_error(error)
            for tp in accepted:
                results[(tp.topic, tp.partition)] = code
            rt.respond(rid, offset_commit_response(results, messages))

        if txn is None:
            rt.append(partition, records, "offset_commit", stored)
        else:
            producer = (txn.producer_id, txn.producer_epoch)
            rt.append(partition, records, "txn_offset_commit", stored, producer)

    def complete_txn_offsets(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` landed on offsets partition `partition`."""
        for group in self.rt.groups.values():
            if group.partition == partition and producer_id in group.pending_txn_offsets:
                group.complete_txn_offsets(producer_id, committed)

    # --- OffsetFetch --------------------------------------------------------------------------

    def fetch(self, rid: Hashable, req: OffsetFetchRequest) -> None:
        rt = self.rt
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return rt.respond(rid, offset_fetch_response(err[0], message=err[1]))
        group = rt.groups.get(req.group_id)
        offsets = group.offsets if group is not None else {}
        wanted = sorted(offsets) if req.partitions is None else [TopicPartition(t, p) for t, p in req.partitions]
        rows = []
        for tp in wanted:
            if req.require_stable and group is not None and group.has_unstable_offset(tp):
                rows.append((tp.topic, tp.partition, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT))
                continue
            om = offsets.get(tp)
            if om is None:
                rows.append((tp.topic, tp.partition, -1, -1, "", E.NONE))
            else:
                epoch = -1 if om.leader_epoch is None else om.leader_epoch
                rows.append((tp.topic, tp.partition, om.offset, epoch, om.metadata, E.NONE))
        rt.respond(rid, offset_fetch_response(E.NONE, rows))

    # --- OffsetDelete -------------------------------------------------------------------------

    def delete(self, rid: Hashable, req: OffsetDeleteRequest) -> None:
        """Kafka's OffsetDelete: offsets of an Empty group, or of topics no member of a consumer group reads.

        Answered once the tombstones are written; the offsets leave memory then too, so a commit
        appended before them (and completing before them, appends complete in order) stays deleted.
        """
        rt = self.rt
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return rt.respond(rid, offset_delete_response(err[0], message=err[1]))
        group = rt.groups.get(req.group_id)
        if group is None or group.state is GroupState.DEAD:
            return rt.respond(rid, offset_delete_response(E.GROUP_ID_NOT_FOUND, message=f"no group {req.group_id!r}"))
        results: dict[tuple[str, int], ErrorCode] = {}
        if group.state is GroupState.EMPTY:
            doomed = [TopicPartition(t, p) for t, p in req.partitions]
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            # Unknown subscriptions count as subscribed to everything, as Kafka's isSubscribedToTopic.
            subscribed = group.subscribed_topics
            doomed = []
            for topic, partition in req.partitions:
                if subscribed is None or topic in subscribed:
                    results[(topic, partition)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    doomed.append(TopicPartition(topic, partition))
        else:
            return rt.respond(rid, offset_delete_response(E.NON_EMPTY_GROUP, message="the group has active members"))
        present = [tp for tp in doomed if tp in group.offsets or tp in group.pending_offset_commits]
        for tp in doomed:
            results[(tp.topic, tp.partition)] = E.NONE
        if not present:
            return rt.respond(rid, offset_delete_response(E.NONE, results))
        records = [tombstone(OffsetCommitKey(group.group_id, tp.topic, tp.partition)) for tp in present]
        partition, group_id = group.partition, group.group_id
        epoch = rt.load_epochs.get(partition, 0)

        def written(error: ErrorCode, now_ms: int) -> None:
            if error is E.NONE and rt.is_active(partition, epoch) and rt.groups.get(group_id) is group:
                for tp in present:
                    group.offsets.pop(tp, None)
            code = E.NONE if error is E.NONE else storage_error(error)
            for tp in present:
                results[(tp.topic, tp.partition)] = code
            rt.respond(rid, offset_delete_response(E.NONE, results))

        rt.append(partition, records, "cleanup", written)

    # --- expiry -------------------------------------------------------------------------------

    def ensure_expiry_scheduled(self, now_ms: int) -> None:
        if EXPIRE_TIMER not in self.rt.timers:
            self.rt.timers.schedule(EXPIRE_TIMER, now_ms + self.rt.config.offsets_retention_check_interval_ms)

    def _on_expire_timer(self, key: tuple, now_ms: int) -> None:
        if self.rt.partitions:
            self.rt.timers.schedule(EXPIRE_TIMER, now_ms + self.rt.config.offsets_retention_check_interval_ms)
        self.cleanup_group_metadata(now_ms)

    def expired_offsets(self, group: GroupMetadata, now_ms: int) -> list[TopicPartition]:
        retention = self.rt.config.offsets_retention_ms

        def due(base: int, tp: TopicPartition) -> bool:
            return not group.has_unstable_offset(tp) and now_ms - base >= retention

        if group.protocol_type is not None and group.state is GroupState.EMPTY:
            return [
                tp
                for tp, om in group.offsets.items()
                if due(
                    om.commit_timestamp_ms
                    if group.current_state_timestamp_ms is None
                    else group.current_state_timestamp_ms,
                    tp,
                )
            ]
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):
            return [
                tp
                for tp, om in group.offsets.items()
                if tp.topic not in group.subscribed_topics and due(om.commit_timestamp_ms, tp)
            ]
        if group.protocol_type is None:
            return [tp for tp, om in group.offsets.items() if due(om.commit_timestamp_ms, tp)]
        return []

    def cleanup_group_metadata(self, now_ms: int) -> None:
        """Expire offsets and delete groups left empty; one append of tombstones per offsets partition."""
        rt = self.rt
        by_partition: dict[int, list[Record]] = {}
        for group in list(rt.groups.values()):
            if not rt.is_active(group.partition):
                continue
            records = by_partition.setdefault(group.partition, [])
            for tp in self.expired_offsets(group, now_ms):
                del group.offsets[tp]
                records.append(tombstone(OffsetCommitKey(group.group_id, tp.topic, tp.partition)))
            if group.state is GroupState.EMPTY and not group.has_offsets() and not group.pending_members:
                log.info("group %s: empty and without offsets; deleting it", group.group_id)
                group.transition_to(GroupState.DEAD, now_ms)
                del rt.groups[group.group_id]
                records.append(tombstone(GroupMetadataKey(group.group_id)))
        for partition, records in by_partition.items():
            if records:
                rt.append(partition, records, "cleanup", _log_cleanup_failure(partition))


def _log_cleanup_failure(partition: int) -> Callable[[ErrorCode, int], None]:
    def done(error: ErrorCode, now_ms: int) -> None:
        if error is not ErrorCode.NONE:
            log.warning("tombstones for __consumer_offsets-%d were not written: %s", partition, error.name)

    return done
