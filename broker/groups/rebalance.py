"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers: Kafka's classic rebalance protocol.

Design notes: docs/groups.md, section "broker/groups/rebalance.py".
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

from kraftpy.broker.groups.group import GroupMetadata, GroupState, MemberMetadata
from kraftpy.broker.groups.records import group_metadata_record
from kraftpy.broker.groups.requests import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from kraftpy.broker.groups.responses import (
    heartbeat_response,
    join_response,
    leave_response,
    storage_error,
    sync_response,
)
from kraftpy.broker.groups.runtime import CoordinatorRuntime
from kraftpy.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

E = ErrorCode
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
EMPTY = GroupState.EMPTY
DEAD = GroupState.DEAD


class Rebalancer:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime
        runtime.timer_handlers.update(
            {
                "join": self._on_join_timer,
                "sync": self._on_sync_timer,
                "hb": self._on_heartbeat_timer,
                "pending": self._on_pending_member_timer,
            }
        )

    # --- JoinGroup ----------------------------------------------------------------------------

    def join_group(self, rid: Hashable, req: JoinGroupRequest, now_ms: int) -> None:
        rt, cfg = self.rt, self.rt.config

        def fail(code: ErrorCode, message: str) -> None:
            rt.respond(rid, join_response(code, member_id=req.member_id, message=message))

        if not req.group_id:
            return fail(E.INVALID_GROUP_ID, "group_id must not be empty")
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return fail(*err)
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return fail(
                E.INVALID_SESSION_TIMEOUT,
                f"session_timeout_ms {req.session_timeout_ms} is outside [{cfg.group_min_session_timeout_ms}, "
                f"{cfg.group_max_session_timeout_ms}] (group_min/max_session_timeout_ms)",
            )
        if req.rebalance_timeout_ms < 1:
            return fail(E.INVALID_REQUEST, "rebalance_timeout_ms must be positive")
        group = rt.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return fail(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist; rejoin without a member id")
            group = rt.create_group(req.group_id)
        try:
            if not self._accept_joining_member(group, req.member_id):
                if group.has(req.member_id):
                    self._remove_member_and_update_group(group, req.member_id, now_ms, "the group is over its max size")
                return fail(E.GROUP_MAX_SIZE_REACHED, f"group {req.group_id!r} has reached group_max_size")
            if req.member_id:
                self._current_member_join(rid, group, req, now_ms)
            else:
                self._new_member_join(rid, group, req, now_ms)
            if group.state is PREPARING:
                self._maybe_complete_join(group, now_ms)
        finally:
            rt.drop_if_blank(req.group_id)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        limit = self.rt.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.state is PREPARING:
            # Awaiting members count (not the size) so the last ones to rejoin are the ones left out.
            member = group.members.get(member_id)
            if member is not None and member.awaiting_join is not None:
                return True
            # A pending member turning into a real one does not grow the group: do not count it twice.
            return group.num_awaiting_join() + len(group.pending_members - {member_id}) < limit
        return group.has(member_id) or len(group.members) < limit

    def _new_member_join(self, rid: Hashable, group: GroupMetadata, req: JoinGroupRequest, now_ms: int) -> None:
        names = {name for name, _ in req.protocols}
        if group.state is DEAD:
            return self.rt.respond(rid, join_response(E.COORDINATOR_NOT_AVAILABLE, message="the group is unloading"))
        if not group.supports_protocols(req.protocol_type, names):
            return self.rt.respond(
                rid, join_response(E.INCONSISTENT_GROUP_PROTOCOL, message=self._why_inconsistent(group))
            )
        instance = req.group_instance_id
        new_id = self.rt.new_member_id(instance if instance is not None else req.client_id)
        if instance is not None:
            old_id = group.current_static_member_id(instance)
            if old_id is not None:
                return self._update_static_member_and_rebalance(rid, group, old_id, new_id, req, now_ms)
            return self._add_member_and_rebalance(rid, group, new_id, req, now_ms)
        # Dynamic members first learn their id (Kafka >= 2.2): a client that times out and retries
        # then rejoins as the same member instead of piling up defunct ones.
        group.pending_members.add(new_id)
        self.rt.timers.schedule(("pending", group.group_id, new_id), now_ms + req.session_timeout_ms)
        self.rt.respond(rid, join_response(E.MEMBER_ID_REQUIRED, member_id=new_id))

    def _current_member_join(self, rid: Hashable, group: GroupMetadata, req: JoinGroupRequest, now_ms: int) -> None:
        mid, instance = req.member_id, req.group_instance_id

        def fail(code: ErrorCode, message: str) -> None:
            self.rt.respond(rid, join_response(code, member_id=mid, message=message))

        if group.state is DEAD:
            return fail(E.COORDINATOR_NOT_AVAILABLE, "the group is unloading")
        if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL, self._why_inconsistent(group))
        if group.is_pending_member(mid):
            if instance is not None:
                return fail(E.UNKNOWN_MEMBER_ID, "a member id handed out by MEMBER_ID_REQUIRED is for dynamic members")
            self.rt.timers.cancel(("pending", group.group_id, mid))
            return self._add_member_and_rebalance(rid, group, mid, req, now_ms)
        if group.is_static_member_fenced(mid, instance):
            return fail(E.FENCED_INSTANCE_ID, f"instance {instance!r} now belongs to another member id")
        if not group.has(mid) or (instance is not None and group.current_static_member_id(instance) is None):
            return fail(E.UNKNOWN_MEMBER_ID, f"member {mid!r} is not in group {group.group_id!r}")
        member = group.members[mid]
        if group.state is PREPARING:
            self._update_member_and_rebalance(rid, group, member, req, now_ms, "member rejoined")
        elif group.state is COMPLETING:
            if member.matches(req.protocols):
                # It missed our answer (a retry): give it the current generation again.
                self.rt.respond(rid, self._join_answer(group, member))
            else:
                self._update_member_and_rebalance(rid, group, member, req, now_ms, "member changed its metadata")
        elif group.state is STABLE:
            if group.is_leader(mid) or not member.matches(req.protocols):
                # A leader's rejoin always rebalances: that is how it reacts to metadata changes
                # (new partitions, new topics for a pattern) that no member's metadata shows.
                self._update_member_and_rebalance(rid, group, member, req, now_ms, "leader or changed member rejoined")
            else:
                self.rt.respond(rid, self._join_answer(group, member, with_members=False))
        else:
            fail(E.UNKNOWN_MEMBER_ID, f"group {group.group_id!r} is {group.state.value}")

    @staticmethod
    def _why_inconsistent(group: GroupMetadata) -> str:
        if not group.members:
            return "protocol_type and protocols must not be empty"
        return (
            f"group uses protocol_type {group.protocol_type!r} and protocols {sorted(group.candidate_protocols())}; "
            "the member shares none of them"
        )

    def _add_member_and_rebalance(
        self, rid: Hashable, group: GroupMetadata, member_id: str, req: JoinGroupRequest, now_ms: int
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            awaiting_join=rid,
            is_new=True,
        )
        if group.state is PREPARING and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delay stretch while members keep arriving
        group.add(member)
        # A new member cannot heartbeat until it is answered; a client that gave up and retried
        # would otherwise leave a defunct member behind for the whole rebalance.
        self.schedule_session(group, member, now_ms, self.rt.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, now_ms, f"new member {member_id} joined")

    def _update_member_and_rebalance(
        self, rid: Hashable, group: GroupMetadata, member: MemberMetadata, req: JoinGroupRequest, now_ms: int, why: str
    ) -> None:
        self._set_awaiting_join(member, rid)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._maybe_prepare_rebalance(group, now_ms, f"{why}: {member.member_id}")

    def _update_static_member_and_rebalance(
        self, rid: Hashable, group: GroupMetadata, old_id: str, new_id: str, req: JoinGroupRequest, now_ms: int
    ) -> None:
        rt = self.rt
        instance = req.group_instance_id
        assert instance is not None
        old = group.members[old_id]
        # The previous incarnation may still wait on an answer: it is the fenced one now.
        if old.awaiting_join is not None:
            rt.respond(old.awaiting_join, join_response(E.FENCED_INSTANCE_ID, member_id=old_id))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            rt.respond(old.awaiting_sync, sync_response(E.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        rt.timers.cancel(("hb", group.group_id, old_id))
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        current_leader = group.leader_id
        member = group.replace_static_member(instance, old_id, new_id)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = rid
        self.schedule_session(group, member, now_ms)
        if group.state is STABLE:
            if group.select_protocol() != group.protocol_name:
                return self._maybe_prepare_rebalance(group, now_ms, f"static member {instance} changed the protocol")
            # Same protocol: persist the new member id and give the member its old place without a rebalance.
            epoch = rt.load_epochs.get(group.partition, 0)

            def stored(error: ErrorCode, now_ms: int) -> None:
                if not rt.is_active(group.partition, epoch) or rt.groups.get(group.group_id) is not group:
                    return
                live = group.members.get(new_id)
                if live is None or live.awaiting_join != rid:
                    return  # a rebalance or a leave answered it meanwhile
                live.awaiting_join = None
                if error is not E.NONE:
                    # Not durable: undo, so the old member id stays the one on record.
                    if group.current_static_member_id(instance) == new_id:
                        live.protocols, live.rebalance_timeout_ms, live.session_timeout_ms = saved
                        group.replace_static_member(instance, new_id, old_id)
                        rt.timers.cancel(("hb", group.group_id, new_id))
                        self.schedule_session(group, live, now_ms)
                    rt.respond(
                        rid,
                        join_response(
                            storage_error(error),
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader,
                            message="could not store the new member id of the static member",
                        ),
                    )
                    return
                # The leader learns it leads but must not run the assignor (JoinGroup v9 skip_assignment):
                # a Stable group ignores a new assignment, and assignors are not free of side effects.
                is_leader = group.is_leader(new_id)
                rt.respond(rid, self._join_answer(group, live, with_members=is_leader, skip_assignment=is_leader))

            rt.append(
                group.partition,
                [group_metadata_record(group.group_id, group.metadata_value())],
                "group_metadata",
                stored,
            )
        elif group.state is COMPLETING:
            # The leader may already be computing an assignment for the old member id.
            self._prepare_rebalance(group, now_ms, f"static member {instance} rejoined during CompletingRebalance")
        # PreparingRebalance: it simply waits for the join to complete like everyone else.

    def _set_awaiting_join(self, member: MemberMetadata, rid: Hashable) -> None:
        if member.awaiting_join is not None and member.awaiting_join != rid:
            # The client gave up on the earlier request; answer it anyway so nothing waits forever.
            self.rt.respond(
                member.awaiting_join,
                join_response(
                    E.REBALANCE_IN_PROGRESS, member_id=member.member_id, message="superseded by a newer join"
                ),
            )
        member.awaiting_join = rid

    def _join_answer(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        *,
        with_members: bool | None = None,
        skip_assignment: bool = False,
    ) -> dict:
        leader = group.is_leader(member.member_id) if with_members is None else with_members
        protocol = group.protocol_name
        members = (
            [(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in group.members.values()]
            if leader and protocol is not None
            else []
        )
        return join_response(
            E.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=protocol,
            leader=group.leader_id,
            skip_assignment=skip_assignment,
            members=members,
        )

    # --- the rebalance ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms, reason)

    def _prepare_rebalance(self, group: GroupMetadata, now_ms: int, reason: str) -> None:
        log.info("group %s: preparing to rebalance (%s)", group.group_id, reason)
        if group.state is COMPLETING:
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS, now_ms)
        self.rt.timers.cancel(("sync", group.group_id))
        group.pending_sync_members.clear()
        was_empty = group.state is EMPTY
        group.transition_to(PREPARING, now_ms)
        timeout = group.rebalance_timeout_ms()
        if was_empty:
            delay = min(self.rt.config.group_initial_rebalance_delay_ms, timeout)
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(timeout - delay, 0)
            self.rt.timers.schedule(("join", group.group_id), now_ms + delay)
        else:
            group.initial_delay_remaining_ms = None
            self.rt.timers.schedule(("join", group.group_id), now_ms + timeout)
            self._maybe_complete_join(group, now_ms)

    def _maybe_complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        # The initial delay waits its time out even when everyone is there: more may come.
        if group.state is PREPARING and group.initial_delay_remaining_ms is None and group.has_all_members_joined():
            self._complete_join(group, now_ms)

    def _on_join_timer(self, key: tuple, now_ms: int) -> None:
        group = self.rt.groups.get(key[1])
        if group is None or group.state is not PREPARING:
            return
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay = min(self.rt.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay
            self.rt.timers.schedule(("join", group.group_id), now_ms + delay)
            return
        self._complete_join(group, now_ms)

    def _complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        rt = self.rt
        rt.timers.cancel(("join", group.group_id))
        group.initial_delay_remaining_ms = None
        for member in group.not_yet_rejoined():
            # Static members keep their place until their session expires; dynamic ones are out.
            if not member.is_static:
                self._remove_member(group, member.member_id)
        if group.state is DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait another round for them (or their expiry).
            rt.timers.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
            return
        group.init_next_generation(now_ms)
        group.storing_generation = None
        if group.state is EMPTY:
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            rt.append(
                group.partition,
                [group_metadata_record(group.group_id, group.metadata_value())],
                "group_metadata",
                lambda error, now_ms: _log_store_failure(group, error),
            )
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in group.members.values():
            if member.awaiting_join is not None:
                rt.respond(member.awaiting_join, self._join_answer(group, member))
                member.awaiting_join = None
            self.schedule_session(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        rt.timers.schedule(("sync", group.group_id), now_ms + group.rebalance_timeout_ms())

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, code: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, code, now_ms)

    def _propagate_assignment(self, group: GroupMetadata, code: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            if member.awaiting_sync is not None:
                body = sync_response(
                    code,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                )
                self.rt.respond(member.awaiting_sync, body)
                member.awaiting_sync = None
            # A session that ran out while the member waited was not acted on; it starts again now.
            self.schedule_session(group, member, now_ms)

    # --- SyncGroup ----------------------------------------------------------------------------

    def sync_group(self, rid: Hashable, req: SyncGroupRequest, now_ms: int) -> None:
        rt = self.rt

        def fail(code: ErrorCode, message: str) -> None:
            rt.respond(rid, sync_response(code, message=message))

        if not req.group_id:
            return fail(E.INVALID_GROUP_ID, "group_id must not be empty")
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return fail(*err)
        group = rt.groups.get(req.group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist")
        if (err := self._validate_member(group, req.member_id, req.group_instance_id, req.generation_id)) is not None:
            return fail(*err)
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL, f"the group's protocol_type is {group.protocol_type!r}")
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL, f"the group's protocol is {group.protocol_name!r}")
        member = group.members[req.member_id]
        if group.state is EMPTY:
            return fail(E.UNKNOWN_MEMBER_ID, "the group is empty")
        if group.state is PREPARING:
            return fail(E.REBALANCE_IN_PROGRESS, "the group is rebalancing; rejoin")
        if group.state is STABLE:
            self._remove_pending_sync(group, member.member_id)
            rt.respond(
                rid,
                sync_response(
                    E.NONE,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            self.schedule_session(group, member, now_ms)
            return
        assert group.state is COMPLETING
        if member.awaiting_sync is not None and member.awaiting_sync != rid:
            rt.respond(member.awaiting_sync, sync_response(E.REBALANCE_IN_PROGRESS, message="superseded"))
        member.awaiting_sync = rid
        self._remove_pending_sync(group, member.member_id)
        if group.is_leader(member.member_id) and group.storing_generation != group.generation_id:
            self._store_assignment(group, dict(req.assignments), now_ms)

    def _store_assignment(self, group: GroupMetadata, given: dict[str, bytes], now_ms: int) -> None:
        rt = self.rt
        # Members the leader left out get an empty assignment; assignments for strangers are ignored.
        assignment = {mid: given.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in given]
        if missing:
            log.warning("group %s: no assignment for %s; they get none", group.group_id, missing)
        generation = group.generation_id
        group.storing_generation = generation
        epoch = rt.load_epochs.get(group.partition, 0)

        def stored(error: ErrorCode, now_ms: int) -> None:
            if not rt.is_active(group.partition, epoch) or rt.groups.get(group.group_id) is not group:
                return
            # Someone may have joined while we wrote: only finish the generation we wrote for.
            if group.state is not COMPLETING or group.generation_id != generation:
                return
            group.storing_generation = None
            if error is not E.NONE:
                self._reset_and_propagate_assignment_error(group, storage_error(error), now_ms)
                self._maybe_prepare_rebalance(group, now_ms, "the assignment could not be stored")
                return
            for member in group.members.values():
                member.assignment = assignment[member.member_id]
            self._propagate_assignment(group, E.NONE, now_ms)
            group.transition_to(STABLE, now_ms)

        rt.append(
            group.partition,
            [group_metadata_record(group.group_id, group.metadata_value(assignment))],
            "group_metadata",
            stored,
        )

    def _remove_pending_sync(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.rt.timers.cancel(("sync", group.group_id))

    def _on_sync_timer(self, key: tuple, now_ms: int) -> None:
        group = self.rt.groups.get(key[1])
        if group is None or group.state not in (COMPLETING, STABLE) or not group.pending_sync_members:
            return
        late = sorted(group.pending_sync_members)
        log.info("group %s: removing members that did not sync in time: %s", group.group_id, late)
        for member_id in late:
            self._remove_member(group, member_id)
        self._prepare_rebalance(group, now_ms, "members did not sync within the rebalance timeout")

    # --- Heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, rid: Hashable, req: HeartbeatRequest, now_ms: int) -> None:
        rt = self.rt

        def answer(code: ErrorCode, message: str = "") -> None:
            rt.respond(rid, heartbeat_response(code, message))

        if not req.group_id:
            return answer(E.INVALID_GROUP_ID, "group_id must not be empty")
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return answer(*err)
        group = rt.groups.get(req.group_id)
        if group is None:
            return answer(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist")
        if (err := self._validate_member(group, req.member_id, req.group_instance_id, req.generation_id)) is not None:
            return answer(*err)
        if group.state is EMPTY:
            return answer(E.UNKNOWN_MEMBER_ID, "the group is empty")
        self.schedule_session(group, group.members[req.member_id], now_ms)
        if group.state is PREPARING:
            return answer(E.REBALANCE_IN_PROGRESS, "the group is rebalancing; rejoin")
        # CompletingRebalance counts too: members may heartbeat right after their JoinGroup answer.
        answer(E.NONE)

    def _validate_member(
        self, group: GroupMetadata, member_id: str, instance: str | None, generation: int
    ) -> tuple[ErrorCode, str] | None:
        if group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, "the group is unloading; find the coordinator again"
        if group.is_static_member_fenced(member_id, instance):
            return E.FENCED_INSTANCE_ID, f"instance {instance!r} now belongs to another member id"
        if not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}"
        if generation != group.generation_id:
            return E.ILLEGAL_GENERATION, f"generation {generation} is not the group's {group.generation_id}"
        return None

    def schedule_session(
        self, group: GroupMetadata, member: MemberMetadata, now_ms: int, timeout: int | None = None
    ) -> None:
        deadline = now_ms + (member.session_timeout_ms if timeout is None else timeout)
        self.rt.timers.schedule(("hb", group.group_id, member.member_id), deadline)

    def _on_heartbeat_timer(self, key: tuple, now_ms: int) -> None:
        group = self.rt.groups.get(key[1])
        member = group.members.get(key[2]) if group is not None else None
        if group is None or member is None:
            return
        if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
            return  # kept alive by the rebalance it waits on; its session restarts when answered
        log.info("group %s: member %s's session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member.member_id, now_ms, "session timeout")

    def _on_pending_member_timer(self, key: tuple, now_ms: int) -> None:
        group = self.rt.groups.get(key[1])
        if group is not None and key[2] in group.pending_members:
            self._remove_pending_member_and_update_group(group, key[2], now_ms)
            self.rt.drop_if_blank(group.group_id)

    # --- LeaveGroup ---------------------------------------------------------------------------

    def leave_group(self, rid: Hashable, req: LeaveGroupRequest, now_ms: int) -> None:
        rt = self.rt
        if not req.group_id:
            return rt.respond(rid, leave_response(E.INVALID_GROUP_ID, message="group_id must not be empty"))
        if (err := rt.coordinator_error(req.group_id)) is not None:
            return rt.respond(rid, leave_response(err[0], message=err[1]))
        group = rt.groups.get(req.group_id)
        if group is None:
            results = [(m.member_id, m.group_instance_id, E.UNKNOWN_MEMBER_ID) for m in req.members]
            return rt.respond(rid, leave_response(E.NONE, results))
        if group.state is DEAD:
            return rt.respond(rid, leave_response(E.COORDINATOR_NOT_AVAILABLE, message="the group is unloading"))
        results = []
        for leaving in req.members:
            mid, instance = leaving.member_id, leaving.group_instance_id
            code = E.NONE
            if not mid:
                # Administrative removal of a static member by its instance id (KIP-345).
                current = group.current_static_member_id(instance) if instance is not None else None
                if current is None:
                    code = E.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member_and_update_group(group, current, now_ms, f"{instance} removed")
            elif group.is_pending_member(mid):
                self._remove_pending_member_and_update_group(group, mid, now_ms)
            elif group.is_static_member_fenced(mid, instance):
                code = E.FENCED_INSTANCE_ID
            elif group.has(mid):
                self._remove_member_and_update_group(group, mid, now_ms, leaving.reason or "member left")
            else:
                code = E.UNKNOWN_MEMBER_ID
            results.append((mid, instance, code))
        rt.respond(rid, leave_response(E.NONE, results))
        rt.drop_if_blank(group.group_id)

    # --- removing members ---------------------------------------------------------------------

    def _remove_member(self, group: GroupMetadata, member_id: str) -> MemberMetadata | None:
        member = group.remove(member_id)
        if member is None:
            return None
        self.rt.timers.cancel(("hb", group.group_id, member_id))
        # Whatever it waits on can no longer succeed; answering keeps every request bounded.
        if member.awaiting_join is not None:
            self.rt.respond(member.awaiting_join, join_response(E.UNKNOWN_MEMBER_ID, message="removed from the group"))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            self.rt.respond(member.awaiting_sync, sync_response(E.UNKNOWN_MEMBER_ID, message="removed from the group"))
            member.awaiting_sync = None
        return member

    def _remove_member_and_update_group(self, group: GroupMetadata, member_id: str, now_ms: int, reason: str) -> None:
        if self._remove_member(group, member_id) is None:
            return
        if group.state in (STABLE, COMPLETING):
            self._maybe_prepare_rebalance(group, now_ms, f"{member_id} left ({reason})")
        elif group.state is PREPARING:
            self._maybe_complete_join(group, now_ms)

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str, now_ms: int) -> None:
        group.pending_members.discard(member_id)
        self.rt.timers.cancel(("pending", group.group_id, member_id))
        if group.state is PREPARING:
            self._maybe_complete_join(group, now_ms)

    # --- loading and unloading ----------------------------------------------------------------

    def on_group_loaded(self, group: GroupMetadata, now_ms: int) -> None:
        for member in group.members.values():
            self.schedule_session(group, member, now_ms)
        if len(group.members) > self.rt.config.group_max_size:
            self._prepare_rebalance(group, now_ms, "the group is over group_max_size")

    def on_group_unloaded(self, group: GroupMetadata, now_ms: int) -> None:
        """The partition moved away: answer whoever waits with NOT_COORDINATOR and forget the group."""
        rt = self.rt
        group.transition_to(DEAD, now_ms)
        for member in group.members.values():
            if member.awaiting_join is not None:
                rt.respond(member.awaiting_join, join_response(E.NOT_COORDINATOR, member_id=member.member_id))
                member.awaiting_join = None
            if member.awaiting_sync is not None:
                rt.respond(member.awaiting_sync, sync_response(E.NOT_COORDINATOR))
                member.awaiting_sync = None
            rt.timers.cancel(("hb", group.group_id, member.member_id))
        for member_id in group.pending_members:
            rt.timers.cancel(("pending", group.group_id, member_id))
        rt.timers.cancel(("join", group.group_id))
        rt.timers.cancel(("sync", group.group_id))
        rt.groups.pop(group.group_id, None)


def _log_store_failure(group: GroupMetadata, error: ErrorCode) -> None:
    if error is not ErrorCode.NONE:
        # Nobody waits on it: if this broker fails before the next rebalance, the previous
        # generation on record becomes active again and times out (Kafka accepts the same).
        log.warning("group %s: storing empty generation %d failed: %s", group.group_id, group.generation_id, error.name)
