"""GroupMembership: the consumer's side of a group, sans-I/O (Kafka's ConsumerCoordinator + AbstractCoordinator).

Design notes: docs/client.md, section "client/group/membership.py".
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kraftpy.client.errors import IllegalStateError, KafkaTimeoutError, error_from
from kraftpy.client.group.assignors import PartitionAssignor, RebalanceProtocol, common_protocol
from kraftpy.client.group.commits import (
    CommitCallback,
    GroupOperation,
    OffsetAndMetadata,
    commit_body,
    fetch_body,
    parse_commit,
    parse_fetch,
)
from kraftpy.client.group.errors import (
    COMMIT_REFUSED_NOT_IN_GROUP,
    COMMIT_REFUSED_REBALANCING,
    CommitFailedError,
    FencedInstanceIdError,
    GroupProtocolError,
    RebalanceInProgressError,
    RetriableCommitFailedError,
)
from kraftpy.client.group.heartbeat import Heartbeat
from kraftpy.client.group.membership_types import (
    AssignmentStore,
    GroupAction,
    GroupMembershipConfig,
    InvokeListener,
    RunCommitCallback,
    SendRequest,
)
from kraftpy.client.group.protocol import (
    JOIN_GROUP_TIMEOUT_LAPSE_MS,
    PATHS,
    JoinAnswer,
    Node,
    find_coordinator_body,
    parse_find_coordinator,
    parse_join,
    parse_simple,
    parse_sync,
)
from kraftpy.client.group.subscription import GroupSubscription
from kraftpy.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)
E = ErrorCode
COORDINATOR_ERRORS = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})
# Answers to JoinGroup/SyncGroup the application must hear about (Kafka throws them from poll()).
FATAL_JOIN_ERRORS = frozenset(
    {
        E.INCONSISTENT_GROUP_PROTOCOL,
        E.INVALID_SESSION_TIMEOUT,
        E.INVALID_GROUP_ID,
        E.GROUP_AUTHORIZATION_FAILED,
        E.GROUP_MAX_SIZE_REACHED,
        E.UNSUPPORTED_VERSION,
        E.INVALID_REQUEST,
    }
)
RETRIABLE_FETCH_ERRORS = frozenset(
    {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.UNSTABLE_OFFSET_COMMIT}
)


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"  # JoinGroup sent
    COMPLETING_REBALANCE = "completing_rebalance"  # SyncGroup sent
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol_name: str | None = None

    @property
    def is_valid(self) -> bool:
        return self.generation_id >= 0 and bool(self.member_id)


NO_GENERATION = Generation()


class GroupMembership:
    def __init__(
        self, config: GroupMembershipConfig, assignors: Sequence[PartitionAssignor], store: AssignmentStore
    ) -> None:
        self.config = config
        self.assignors = list(assignors)
        self.protocol = common_protocol(self.assignors)
        self.store = store
        self.subscription = GroupSubscription(exclude_internal_topics=config.exclude_internal_topics)
        self.heartbeat = Heartbeat(
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms,
        )
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.coordinator: Node | None = None
        self.is_leader = False
        self._listener = False
        self._rejoin_needed = False
        self._needs_join_prepare = True
        self._out: list[GroupAction] = []
        self._next_rid = 1
        self._inflight: dict[int, tuple[str, Any]] = {}
        self._find_rid: int | None = None
        self._find_retry_at = 0
        self._join_rid: int | None = None
        self._sync_rid: int | None = None
        self._join_retry_at = 0
        self._ops: list[GroupOperation] = []
        self._callbacks: list[RunCommitCallback] = []
        self._errors: list[KafkaError] = []
        self._fatal: KafkaError | None = None
        self._waiting_listener: Callable[[], None] | None = None
        self._prepare_step: str | None = None
        self._prepare_commit: GroupOperation | None = None
        self._pending_assignment: tuple[Assignment, Generation] | None = None
        self._complete_step: str | None = None
        self._next_auto_commit_ms: int | None = None  # set at the first poll
        self._awaiting_pattern_metadata = False
        self._leaving: GroupOperation | None = None  # close() or unsubscribe() in progress
        self._leave_step: str | None = None
        self._leave_rid: int | None = None
        self.closed = False

    # --- the application's calls --------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], *, listener: bool = False) -> None:
        """Subscribe to topics (replacing the previous subscription); a change makes the member rejoin."""
        self._check_open()
        self.subscription.subscribe(topics)
        self._subscribed(listener)

    def subscribe_pattern(self, pattern: str | re.Pattern[str], *, listener: bool = False) -> None:
        """Subscribe to every topic whose name matches `pattern` in full, now and as topics come and go."""
        self._check_open()
        self.subscription.subscribe_pattern(pattern)
        # Match the pattern against fresh metadata before joining (Kafka's ensureFreshMetadata).
        self._awaiting_pattern_metadata = True
        self._subscribed(listener)

    def _subscribed(self, listener: bool) -> None:
        self._listener = listener
        if self.subscription.active and self.state is MemberState.UNJOINED:
            self._rejoin_needed = True

    def unsubscribe(self, now_ms: int) -> GroupOperation:
        """Give the partitions up (listener), leave the group, forget the subscription."""
        return self._begin_leaving("unsubscribe", now_ms, None)

    def close(self, now_ms: int, timeout_ms: int) -> GroupOperation:
        """Commit (if auto-committing), give the partitions up, leave (dynamic members); drive with poll()."""
        return self._begin_leaving("close", now_ms, now_ms + timeout_ms)

    def abandon(self, reason: str) -> None:
        """Stop at once, without commits or listener calls (the application is being torn down, e.g. its
        close() was cancelled): LeaveGroup if the coordinator counts this dynamic member, so the group does
        not wait a whole session for it. The shell sends it without waiting for poll()."""
        if self.closed:
            return
        self._maybe_leave_group(reason)
        self.closed = True
        for op in [*self._ops, self._leaving]:
            if op is not None and not op.done:
                op.finish(IllegalStateError(f"the consumer was abandoned: {reason}"))

    def commit_sync(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, now_ms: int, timeout_ms: int
    ) -> GroupOperation:
        """Commit and retry retriable failures until the timeout; offsets None: every consumed position."""
        return self._commit(offsets, now_ms, deadline=now_ms + timeout_ms, callback=None, internal=False)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        now_ms: int,
        callback: CommitCallback | None = None,
    ) -> GroupOperation:
        """Commit once; `callback(offsets, error)` runs from a later poll()."""
        return self._commit(offsets, now_ms, deadline=None, callback=callback, internal=False)

    def committed(self, partitions: Iterable[TopicPartition], now_ms: int, timeout_ms: int) -> GroupOperation:
        """Look up the group's committed offsets (result: partition -> OffsetAndMetadata or None)."""
        self._check_open()
        op = GroupOperation("fetch", partitions=tuple(sorted(set(partitions))), deadline_ms=now_ms + timeout_ms)
        if not op.partitions:
            op.finish()
        else:
            self._ops.append(op)
            self._advance_background(now_ms)
        return op

    def on_metadata(self, partitions_per_topic: Mapping[str, int], now_ms: int) -> None:
        """New metadata: partition counts of (at least) metadata_topics()."""
        self.subscription.update_metadata(partitions_per_topic)
        self._awaiting_pattern_metadata = False

    def metadata_topics(self) -> frozenset[str] | None:
        return self.subscription.metadata_topics()

    def poll(self, now_ms: int) -> None:
        """The application polled: run the rebalance as far as it goes, auto-commit, and queue callbacks."""
        self.heartbeat.poll(now_ms)
        self._advance_app(now_ms)

    def tick(self, now_ms: int) -> None:
        """Background work, due at next_deadline_ms(): heartbeats, session and poll-interval checks, retries."""
        self._advance_background(now_ms)

    def listener_done(self, now_ms: int, error: BaseException | None = None) -> None:
        """The listener call asked for last has returned (or raised `error`, reported by the next take_error)."""
        then, self._waiting_listener = self._waiting_listener, None
        if then is None:
            raise IllegalStateError("listener_done() without a listener call pending")
        if error is not None:
            wrapped = error if isinstance(error, KafkaError) else KafkaError(f"the rebalance listener raised {error!r}")
            self._errors.append(wrapped)
        then()
        self._advance_app(now_ms)

    def drain(self) -> list[GroupAction]:
        out, self._out = self._out, []
        return out

    def take_error(self) -> KafkaError | None:
        """An error for the application's poll(): a fatal one stays; others are reported once."""
        if self._fatal is not None:
            return self._fatal
        return self._errors.pop(0) if self._errors else None

    def next_deadline_ms(self) -> int | None:
        """When tick() has something to do next (None: nothing is scheduled). Each deadline names work that
        tick() then does, so calling it at the deadline always moves the deadline forward."""
        if self.closed or self._fatal is not None:
            return None
        deadlines = [op.deadline_ms for op in self._ops if op.deadline_ms is not None]
        if self.coordinator is not None:
            deadlines += [op.retry_at_ms for op in self._ops if op.in_flight is None]
            if (
                self.subscription.active
                and self._leaving is None
                and self.state
                in (
                    MemberState.COMPLETING_REBALANCE,
                    MemberState.STABLE,
                )
            ):
                deadlines.append(self.heartbeat.next_deadline())
        elif self._find_rid is None and (self.subscription.active or self._ops):
            deadlines.append(self._find_retry_at)
        return min(deadlines, default=None)

    def poll_deadline_ms(self) -> int | None:
        """When poll() next has work of its own (a join retry, an auto-commit): a consumer blocked in poll()
        should wake up then. Past values mean "now"."""
        if self.closed or self._fatal is not None:
            return None
        # Only work poll() can do right then counts, or a shell would spin on a deadline in the past.
        idle = self._waiting_listener is None and self._leaving is None and self._pending_assignment is None
        deadlines = []
        if (
            idle
            and self.subscription.active
            and self.coordinator is not None
            and self.state is MemberState.UNJOINED
            and self._prepare_step is None
            and not self._awaiting_pattern_metadata
        ):
            deadlines.append(self._join_retry_at)
        in_generation = self.state is MemberState.STABLE or not self.subscription.active
        if idle and self.config.enable_auto_commit and self._next_auto_commit_ms is not None and in_generation:
            deadlines.append(self._next_auto_commit_ms)
        return min(deadlines, default=None)

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error that stopped this member for good (fenced, inconsistent protocol, ...), if any."""
        return self._fatal

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    def assignment(self) -> set[TopicPartition]:
        return self.store.assigned_partitions()

    def _check_open(self) -> None:
        # While closing, the revoke listener may still commit: only a closed member refuses.
        if self.closed:
            raise IllegalStateError("the consumer is closed")

    # --- driving ------------------------------------------------------------------------------

    def _advance_app(self, now_ms: int) -> None:
        self._emit_callbacks()
        if self._fatal is not None or self._waiting_listener is not None or self.closed:
            return
        self._advance_background(now_ms)
        if self._leaving is not None:
            self._advance_leaving(now_ms)
            return
        if self._next_auto_commit_ms is None:
            self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
        if self.subscription.active:
            # The assignment of a finished rebalance is handed over even if the coordinator just went away.
            if self._pending_assignment is not None and not self._complete_join(now_ms):
                return
            if self.coordinator is None:
                return
            if self._should_join(now_ms):
                if self._needs_join_prepare and not self._on_join_prepare(now_ms):
                    return
                self._send_join(now_ms)
        self._maybe_auto_commit(now_ms)
        self._emit_callbacks()

    def _advance_background(self, now_ms: int) -> None:
        if self._fatal is not None or self.closed:
            return
        self._expire_ops(now_ms)
        if self.coordinator is not None and self.subscription.active and self._leaving is None:
            self._heartbeat_checks(now_ms)  # first: it may find the coordinator gone
        needs_coordinator = self.subscription.active or any(not op.done for op in self._ops)
        if needs_coordinator and self.coordinator is None:
            self._find_coordinator(now_ms)
        self._send_ops(now_ms)

    def _should_join(self, now_ms: int) -> bool:
        if self.state not in (MemberState.UNJOINED, MemberState.STABLE):
            return False
        if self._join_rid is not None or self._sync_rid is not None:
            return False
        if self._awaiting_pattern_metadata:
            return False
        if now_ms < self._join_retry_at and self._prepare_step is None:
            return False
        reason = self.subscription.rejoin_reason()
        if reason is not None and not self._rejoin_needed:
            self._request_rejoin(reason)
        return self._rejoin_needed or self.state is MemberState.UNJOINED

    def _request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed:
            log.info("group %s: rejoining: %s", self.config.group_id, reason)
        self._rejoin_needed = True

    def _reset_state_and_rejoin(self, reason: str, *, reset_member_id: bool = True) -> None:
        """The member lost its generation: whatever it holds is lost; join again from scratch."""
        log.info("group %s: resetting the generation: %s", self.config.group_id, reason)
        member_id = "" if reset_member_id else self.generation.member_id
        self.generation = Generation(-1, member_id, None)
        self.state = MemberState.UNJOINED
        self._join_rid = self._sync_rid = None
        self._rejoin_needed = True
        self._needs_join_prepare = True
        self.is_leader = False
        self.subscription.reset_group()

    def _set_fatal(self, error: KafkaError) -> None:
        log.error("group %s: %s", self.config.group_id, error)
        self._fatal = error

    # --- the listener -------------------------------------------------------------------------

    def _invoke(self, method: str, partitions: Iterable[TopicPartition], then: Callable[[], None]) -> bool:
        """Ask the shell to run a listener method, then `then`; False when `then` ran at once (no listener)."""
        if not self._listener:
            then()
            return False
        self._out.append(InvokeListener(method, tuple(sorted(partitions))))
        self._waiting_listener = then
        return True

    # --- coordinator discovery ----------------------------------------------------------------

    def _send(self, api: str, body: dict[str, Any], ctx: Any = None, *, timeout_ms: int | None = None) -> int:
        rid = self._next_rid
        self._next_rid += 1
        node = None if api == "find_coordinator" else self.coordinator
        timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        self._out.append(SendRequest(rid, api, PATHS[api], body, node, timeout))
        self._inflight[rid] = (api, ctx)
        return rid

    def _find_coordinator(self, now_ms: int) -> None:
        if self._find_rid is None and now_ms >= self._find_retry_at:
            self._find_rid = self._send("find_coordinator", find_coordinator_body(self.config.group_id))

    def _mark_coordinator_unknown(self, reason: str, now_ms: int) -> None:
        if self.coordinator is None:
            return
        log.info(
            "group %s: coordinator %s is unavailable (%s); looking for it again",
            self.config.group_id,
            self.coordinator,
            reason,
        )
        self.coordinator = None
        self._find_retry_at = now_ms
        self.heartbeat.in_flight = False
        # Join and sync went to the old coordinator: their answers no longer count (Kafka fails them).
        if self._join_rid is not None or self._sync_rid is not None:
            self._join_rid = self._sync_rid = None
            self.state = MemberState.UNJOINED
            self._request_rejoin("the coordinator changed during the rebalance")
            self._join_retry_at = now_ms + self.config.retry_backoff_ms

    def _on_find_coordinator(self, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int) -> None:
        self._find_rid = None
        if error is None and body is not None:
            code, message, node = parse_find_coordinator(body)
            if code is E.NONE and node is not None:
                self.coordinator = node
                # The session restarts with the new coordinator (Kafka's resetSessionTimeout).
                self.heartbeat.received(now_ms)
                return
            error = error_from(code, message)
        log.debug("group %s: FindCoordinator failed: %s", self.config.group_id, error)
        self._find_retry_at = now_ms + self.config.retry_backoff_ms

    # --- join ---------------------------------------------------------------------------------

    def _on_join_prepare(self, now_ms: int) -> bool:
        """Commit, then give partitions up, before joining (Kafka's onJoinPrepare); True when done."""
        if self._prepare_step is None:
            self._prepare_step = "revoke"
            if self.config.enable_auto_commit and self.generation.is_valid and self.state is MemberState.STABLE:
                if self.protocol is RebalanceProtocol.EAGER:
                    # Everything goes: stop handing out records so the commit covers all that was returned.
                    self.store.mark_pending_revocation(self.store.assigned_partitions())
                offsets = self.store.all_consumed()
                if offsets:
                    deadline = now_ms + self.config.max_poll_interval_ms
                    self._prepare_commit = self._commit(
                        offsets, now_ms, deadline=deadline, callback=None, internal=True
                    )
                    self._prepare_step = "commit"
        if self._prepare_step == "commit":
            op = self._prepare_commit
            assert op is not None
            if not op.done:
                return False
            if op.error is not None:
                log.warning("group %s: commit before rebalancing failed: %s", self.config.group_id, op.error)
            self._prepare_commit = None
            self._prepare_step = "revoke"
        if self._prepare_step == "revoke":
            self._prepare_step = "revoking"
            owned = self.store.assigned_partitions()
            if not self.generation.is_valid:
                keep: set[TopicPartition] = set()
                method, given_up = "on_partitions_lost", owned
                call = bool(owned)
            elif self.protocol is RebalanceProtocol.EAGER:
                keep, method, given_up, call = set(), "on_partitions_revoked", owned, True
            else:
                given_up = {tp for tp in owned if tp.topic not in self.subscription.topics}
                keep, method, call = owned - given_up, "on_partitions_revoked", bool(given_up)

            def done() -> None:
                if given_up:
                    self.store.assign_from_subscribed(keep)
                self._prepare_step = "ready"

            if call:
                if self._invoke(method, given_up, done):
                    return False
            else:
                done()
        if self._prepare_step == "revoking":
            return False
        self._prepare_step = None
        self._needs_join_prepare = False
        self.is_leader = False
        self.subscription.reset_group()
        return True

    def _send_join(self, now_ms: int) -> None:
        topics = self.subscription.topics
        owned = tuple(sorted(self.store.assigned_partitions()))
        protocols = []
        for assignor in self.assignors:
            subscription = Subscription(
                topics=tuple(sorted(topics)),
                user_data=assignor.subscription_user_data(topics),
                owned_partitions=owned,
                generation_id=self.generation.generation_id,
            )
            protocols.append({"name": assignor.name, "metadata": encode_subscription(subscription)})
        body = {
            "group_id": self.config.group_id,
            "session_timeout_ms": self.config.session_timeout_ms,
            "rebalance_timeout_ms": self.config.max_poll_interval_ms,
            "member_id": self.generation.member_id,
            "group_instance_id": self.config.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": protocols,
            "client_id": self.config.client_id,
        }
        self.subscription.joined = topics
        self.state = MemberState.PREPARING_REBALANCE
        timeout = max(self.config.request_timeout_ms, self.config.max_poll_interval_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS)
        self._join_rid = self._send("join_group", body, timeout_ms=timeout)

    def _on_join(self, rid: int, answer: JoinAnswer | None, error: KafkaError | None, now_ms: int) -> None:
        if rid != self._join_rid:
            return  # an answer to a join we already gave up on
        self._join_rid = None
        backoff = now_ms + self.config.retry_backoff_ms
        if answer is None:
            assert error is not None
            self.state = MemberState.UNJOINED
            self._join_retry_at = backoff
            self._mark_coordinator_unknown(f"JoinGroup failed: {error}", now_ms)
            return
        code = answer.code
        if code is E.NONE:
            if answer.protocol_type not in (None, PROTOCOL_TYPE):
                return self._set_fatal(
                    GroupProtocolError(
                        f"the group's protocol type is {answer.protocol_type!r}", E.INCONSISTENT_GROUP_PROTOCOL
                    )
                )
            self.generation = Generation(answer.generation_id, answer.member_id, answer.protocol_name)
            self.state = MemberState.COMPLETING_REBALANCE
            self.heartbeat.reset_timeouts(now_ms)
            if answer.leader == answer.member_id:
                self._on_join_leader(answer, now_ms)
            else:
                self._send_sync({}, now_ms)
            return
        self.state = MemberState.UNJOINED
        if code is E.MEMBER_ID_REQUIRED:
            # Not an error: join again at once with the id the coordinator handed out.
            self.generation = Generation(-1, answer.member_id, None)
            self._request_rejoin("the coordinator assigned a member id")
        elif code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self._reset_state_and_rejoin(f"JoinGroup answered {code.name}")
        elif code is E.FENCED_INSTANCE_ID:
            self._set_fatal(FencedInstanceIdError(answer.message))
        elif code in COORDINATOR_ERRORS:
            self._mark_coordinator_unknown(f"JoinGroup answered {code.name}", now_ms)
            self._join_retry_at = backoff
        elif code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.REBALANCE_IN_PROGRESS):
            self._join_retry_at = backoff
        else:
            # Kafka throws these from poll() and tries again on the next one.
            self._errors.append(GroupProtocolError(answer.message or code.name, code))
            self._join_retry_at = backoff

    def _on_join_leader(self, answer: JoinAnswer, now_ms: int) -> None:
        self.is_leader = True
        subscriptions: dict[str, Subscription] = {}
        for member in answer.members:
            try:
                subscriptions[member.member_id] = decode_subscription(member.metadata, member.group_instance_id)
            except ConsumerProtocolError as err:
                log.warning(
                    "group %s: member %s sent a bad subscription (%s); it gets nothing",
                    self.config.group_id,
                    member.member_id,
                    err,
                )
                subscriptions[member.member_id] = Subscription((), group_instance_id=member.group_instance_id)
        partitions_per_topic = self.subscription.became_leader(t for s in subscriptions.values() for t in s.topics)
        if answer.skip_assignment:
            # A restarted static leader of a Stable group: the group keeps its assignment (KIP-814).
            self._send_sync({}, now_ms)
            return
        assignor = next((a for a in self.assignors if a.name == answer.protocol_name), None)
        if assignor is None:
            return self._set_fatal(
                GroupProtocolError(
                    f"the coordinator chose protocol {answer.protocol_name!r}, which this member did not offer",
                    E.INCONSISTENT_GROUP_PROTOCOL,
                )
            )
        try:
            assignments = assignor.assign(partitions_per_topic, subscriptions)
            if self.protocol is RebalanceProtocol.COOPERATIVE:
                self._check_cooperative(subscriptions, assignments)
            encoded = {m: encode_assignment(a) for m, a in assignments.items()}
        except Exception as exc:  # a custom assignor's bug: it would fail the same way on every rebalance
            error = exc if isinstance(exc, KafkaError) else KafkaError(f"assignor {assignor.name!r} failed: {exc!r}")
            return self._set_fatal(error)
        self._send_sync(encoded, now_ms)

    @staticmethod
    def _check_cooperative(subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment]) -> None:
        """No partition may go to a new owner while its owner still holds it (Kafka's validateCooperativeAssignment)."""
        holders = {tp: m for m, s in subscriptions.items() for tp in s.owned_partitions}
        for member, assignment in assignments.items():
            for tp in assignment.partitions:
                if holders.get(tp, member) != member:
                    raise IllegalStateError(
                        f"the assignor gave {tp} to {member} while {holders[tp]} still owns it; a cooperative "
                        "assignor must leave moving partitions unassigned for one rebalance"
                    )

    # --- sync ---------------------------------------------------------------------------------

    def _send_sync(self, assignments: Mapping[str, bytes], now_ms: int) -> None:
        body = {
            "group_id": self.config.group_id,
            "generation_id": self.generation.generation_id,
            "member_id": self.generation.member_id,
            "group_instance_id": self.config.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": self.generation.protocol_name,
            "assignments": [{"member_id": m, "assignment": a} for m, a in sorted(assignments.items())],
        }
        self._sync_rid = self._send("sync_group", body)

    def _on_sync(self, rid: int, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int) -> None:
        if rid != self._sync_rid:
            return
        self._sync_rid = None
        if body is None:
            assert error is not None
            self.state = MemberState.UNJOINED
            self._request_rejoin(f"SyncGroup failed: {error}")
            self._join_retry_at = now_ms + self.config.retry_backoff_ms
            self._mark_coordinator_unknown(f"SyncGroup failed: {error}", now_ms)
            return
        answer = parse_sync(body)
        code = answer.code
        if code is E.NONE:
            if answer.protocol_type not in (None, PROTOCOL_TYPE) or answer.protocol_name not in (
                None,
                self.generation.protocol_name,
            ):
                return self._set_fatal(
                    GroupProtocolError(
                        "SyncGroup answered another protocol than JoinGroup", E.INCONSISTENT_GROUP_PROTOCOL
                    )
                )
            try:
                assignment = decode_assignment(answer.assignment)
            except ConsumerProtocolError as err:
                self.state = MemberState.UNJOINED
                self._request_rejoin(f"the assignment could not be read: {err}")
                return
            self.state = MemberState.STABLE
            self._rejoin_needed = False
            self.heartbeat.reset_timeouts(now_ms)
            self._pending_assignment = (assignment, self.generation)
            return
        self.state = MemberState.UNJOINED
        if code is E.REBALANCE_IN_PROGRESS:
            self._request_rejoin("the group started another rebalance")
        elif code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self._reset_state_and_rejoin(f"SyncGroup answered {code.name}")
        elif code is E.FENCED_INSTANCE_ID:
            self._set_fatal(FencedInstanceIdError(answer.message))
        elif code in COORDINATOR_ERRORS:
            self._request_rejoin(f"SyncGroup answered {code.name}")
            self._mark_coordinator_unknown(f"SyncGroup answered {code.name}", now_ms)
            self._join_retry_at = now_ms + self.config.retry_backoff_ms
        else:
            self._request_rejoin(f"SyncGroup answered {code.name}")
            self._errors.append(GroupProtocolError(answer.message or code.name, code))
            self._join_retry_at = now_ms + self.config.retry_backoff_ms

    def _complete_join(self, now_ms: int) -> bool:
        """Hand the new assignment to the application (Kafka's onJoinComplete); True when done."""
        assert self._pending_assignment is not None
        assignment, generation = self._pending_assignment
        assigned = set(assignment.partitions)
        if self._complete_step is None:
            self._complete_step = "revoke"
            for assignor in self.assignors:
                if assignor.name == generation.protocol_name:
                    assignor.on_assignment(assignment, generation.generation_id)
            if not self.subscription.matches(assigned):
                # The subscription changed while we rebalanced: this assignment is for the old one.
                self._pending_assignment = self._complete_step = None
                self._request_rejoin("the assignment does not match the subscription")
                self._needs_join_prepare = True
                return True
        if self._complete_step == "revoke":
            self._complete_step = "assign"
            owned = self.store.assigned_partitions()
            revoked = owned - assigned
            if self.protocol is RebalanceProtocol.COOPERATIVE and revoked:
                # Give up only what moves; rejoining at once lets its new owner have it.
                self._request_rejoin(f"{len(revoked)} partition(s) were revoked and must be handed on")
                self._complete_step = "revoking"

                def revoked_done() -> None:
                    self.store.assign_from_subscribed(owned - revoked)
                    self._complete_step = "assign"

                if self._invoke("on_partitions_revoked", revoked, revoked_done):
                    return False
        if self._complete_step == "revoking":
            return False
        if self._complete_step == "assign":
            added = assigned - self.store.assigned_partitions()
            self.store.assign_from_subscribed(assigned)
            self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
            self._complete_step = "assigning"

            def assigned_done() -> None:
                self._complete_step = "done"

            if self._invoke("on_partitions_assigned", added, assigned_done):
                return False
        if self._complete_step == "assigning":
            return False
        self._pending_assignment = self._complete_step = None
        self._needs_join_prepare = True
        log.info(
            "group %s: generation %d, assigned %s",
            self.config.group_id,
            generation.generation_id,
            sorted(str(tp) for tp in assigned),
        )
        return True

    # --- heartbeats and leaving ---------------------------------------------------------------

    def _heartbeat_checks(self, now_ms: int) -> None:
        if self.state not in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE):
            return
        if self.heartbeat.session_expired(now_ms):
            self._mark_coordinator_unknown("no successful heartbeat within session_timeout_ms", now_ms)
        elif self.heartbeat.poll_expired(now_ms):
            log.warning(
                "group %s: consumer poll timeout has expired: the time between polls exceeded max_poll_interval_ms "
                "(%d); leaving the group. Increase max_poll_interval_ms or process fewer records per poll "
                "(max_poll_records)",
                self.config.group_id,
                self.config.max_poll_interval_ms,
            )
            self._maybe_leave_group("consumer poll timeout has expired")
            self._reset_state_and_rejoin("consumer poll timeout has expired")
        elif self.heartbeat.should_heartbeat(now_ms):
            self.heartbeat.sent(now_ms)
            body = {
                "group_id": self.config.group_id,
                "generation_id": self.generation.generation_id,
                "member_id": self.generation.member_id,
                "group_instance_id": self.config.group_instance_id,
            }
            self._send("heartbeat", body, self.generation)

    def _on_heartbeat(
        self, sent_with: Generation, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int
    ) -> None:
        if body is None:
            self.heartbeat.failed(now_ms)
            self._mark_coordinator_unknown(f"heartbeat failed: {error}", now_ms)
            return
        code, message = parse_simple(body)
        current = sent_with == self.generation
        if code is E.NONE:
            self.heartbeat.received(now_ms)
            return
        if code is E.REBALANCE_IN_PROGRESS:
            # The coordinator heard us: the session is fine, and heartbeats go on at their interval
            # so that it keeps us for the whole rebalance.
            self.heartbeat.received(now_ms)
            if self.state is MemberState.STABLE:
                self._request_rejoin("the group is rebalancing")
            return
        self.heartbeat.failed(now_ms)
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            if current:
                self._reset_state_and_rejoin(f"heartbeat answered {code.name}")
        elif code is E.FENCED_INSTANCE_ID:
            if current:
                self._set_fatal(FencedInstanceIdError(message))
        elif code in COORDINATOR_ERRORS:
            self._mark_coordinator_unknown(f"heartbeat answered {code.name}", now_ms)
        else:
            log.warning("group %s: unexpected heartbeat answer %s: %s", self.config.group_id, code.name, message)

    def _maybe_leave_group(self, reason: str) -> int | None:
        """LeaveGroup for a dynamic member the coordinator knows; static members stay (their session decides).

        Also between two joins of a rebalance (UNJOINED with a member id, e.g. after SyncGroup answered
        REBALANCE_IN_PROGRESS): the coordinator still counts the member, and without a LeaveGroup the next
        rebalance would wait for it until its session expired."""
        if self.config.group_instance_id is None and self.coordinator is not None and self.generation.member_id:
            member = {"member_id": self.generation.member_id, "group_instance_id": None, "reason": reason}
            return self._send("leave_group", {"group_id": self.config.group_id, "members": [member]})
        return None

    def _begin_leaving(self, kind: str, now_ms: int, deadline: int | None) -> GroupOperation:
        if self.closed:
            raise IllegalStateError("the consumer is closed")
        if self._leaving is not None:
            return self._leaving
        op = self._leaving = GroupOperation(kind, deadline_ms=deadline)
        self._leave_step = "commit"
        self._advance_app(now_ms)
        return op

    def _advance_leaving(self, now_ms: int) -> None:
        op = self._leaving
        assert op is not None
        if self._leave_step == "commit":
            self._leave_step = "revoke"
            in_generation = self.generation.is_valid and self.state is MemberState.STABLE
            commit_first = op.kind == "close" and self.config.enable_auto_commit
            if commit_first and (in_generation or not self.subscription.active):
                offsets = self.store.all_consumed()
                if offsets:
                    deadline = op.deadline_ms if op.deadline_ms is not None else now_ms + self.config.request_timeout_ms
                    self._prepare_commit = self._commit(
                        offsets, now_ms, deadline=deadline, callback=None, internal=True
                    )
                    self._leave_step = "committing"
        if self._leave_step == "committing":
            if self._prepare_commit is not None and not self._prepare_commit.done:
                return
            self._prepare_commit = None
            self._leave_step = "revoke"
        if self._leave_step == "revoke":
            self._leave_step = "revoking"
            owned = self.store.assigned_partitions()
            method = "on_partitions_revoked" if self.generation.is_valid else "on_partitions_lost"

            def done() -> None:
                self.store.assign_from_subscribed(())
                self._leave_step = "leave"

            if self.subscription.active and owned:
                if self._invoke(method, owned, done):
                    return
            else:
                done()
        if self._leave_step == "revoking":
            return
        if self._leave_step == "leave":
            first_join_out = not self.generation.member_id and self._join_rid is not None
            if op.kind == "close" and first_join_out and (op.deadline_ms is None or now_ms < op.deadline_ms):
                # Its answer (MEMBER_ID_REQUIRED, at once) names the id the coordinator now holds as a pending
                # member; a pending member holds up every rebalance of the group until its session expires,
                # so wait for the id and leave with it.
                return
            self._leave_step = "waiting"
            why = "the consumer is being closed" if op.kind == "close" else "the consumer unsubscribed"
            self._leave_rid = self._maybe_leave_group(why)
        if self._leave_step == "waiting":
            # close() waits for the answer (bounded by its timeout); unsubscribe() does not.
            waiting = self._leave_rid in self._inflight and op.kind == "close"
            if waiting and (op.deadline_ms is None or now_ms < op.deadline_ms):
                return
            self._finish_leaving(now_ms)

    def _finish_leaving(self, now_ms: int) -> None:
        op = self._leaving
        assert op is not None
        self._leaving = None
        self._leave_step = None
        self._leave_rid = None
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self._join_rid = self._sync_rid = None
        self._rejoin_needed = False
        self._needs_join_prepare = True
        self._pending_assignment = self._complete_step = None
        self._prepare_step = None
        self.is_leader = False
        self.subscription.unsubscribe()
        if op.kind == "close":
            self.closed = True
            for pending in self._ops:
                if not pending.done:
                    pending.finish(IllegalStateError("the consumer was closed before this finished"))
        op.finish()

    # --- commits and lookups ------------------------------------------------------------------

    def _commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        now_ms: int,
        *,
        deadline: int | None,
        callback: CommitCallback | None,
        internal: bool,
    ) -> GroupOperation:
        if not internal:
            self._check_open()
        chosen = dict(self.store.all_consumed() if offsets is None else offsets)
        op = GroupOperation("commit", offsets=chosen, deadline_ms=deadline, callback=callback, internal=internal)
        if not chosen:
            self._complete(op, None)
        else:
            self._ops.append(op)
            self._advance_background(now_ms)
        return op

    def _maybe_auto_commit(self, now_ms: int) -> None:
        if (
            not self.config.enable_auto_commit
            or self._next_auto_commit_ms is None
            or now_ms < self._next_auto_commit_ms
        ):
            return
        if self.subscription.active and (self.state is not MemberState.STABLE or self._pending_assignment is not None):
            return
        self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
        offsets = self.store.all_consumed()
        if not offsets:
            return

        def retry_soon(done: Mapping[TopicPartition, OffsetAndMetadata], error: KafkaError | None) -> None:
            if isinstance(error, RetriableCommitFailedError):
                self._next_auto_commit_ms = min(self._next_auto_commit_ms, now_ms + self.config.retry_backoff_ms)
            elif error is not None:
                log.warning("group %s: auto-commit of %s failed: %s", self.config.group_id, sorted(done), error)

        self._commit(offsets, now_ms, deadline=None, callback=retry_soon, internal=True)

    def _expire_ops(self, now_ms: int) -> None:
        for op in self._ops:
            if not op.done and op.deadline_ms is not None and now_ms >= op.deadline_ms:
                what = "commit of offsets" if op.kind == "commit" else "lookup of committed offsets"
                self._complete(op, KafkaTimeoutError(f"{what} for group {self.config.group_id} timed out"))
        self._ops = [op for op in self._ops if not op.done]

    def _send_ops(self, now_ms: int) -> None:
        if self.coordinator is None:
            return
        for op in self._ops:
            if op.done or op.in_flight is not None or now_ms < op.retry_at_ms:
                continue
            if op.kind == "fetch":
                op.in_flight = self._send(
                    "offset_fetch", fetch_body(self.config.group_id, op.partitions, self.config.require_stable), op
                )
                continue
            generation = self.generation
            if self.subscription.active or generation.is_valid:
                if self.state is not MemberState.STABLE or not generation.is_valid:
                    # Not in an active generation: the commit cannot be accepted (Kafka's generationIfStable).
                    error: KafkaError = (
                        RebalanceInProgressError(COMMIT_REFUSED_REBALANCING)
                        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)
                        else CommitFailedError(COMMIT_REFUSED_NOT_IN_GROUP)
                    )
                    self._complete(op, error)
                    continue
            else:
                generation = NO_GENERATION  # manual assignment: a simple commit, as Kafka's
            body = commit_body(
                self.config.group_id,
                generation.generation_id,
                generation.member_id,
                self.config.group_instance_id if generation.is_valid else None,
                op.offsets,
            )
            op.in_flight = self._send("offset_commit", body, (op, generation))
        self._ops = [op for op in self._ops if not op.done]

    def _on_commit(
        self,
        ctx: tuple[GroupOperation, Generation],
        body: Mapping[str, Any] | None,
        error: KafkaError | None,
        now_ms: int,
    ) -> None:
        op, sent_with = ctx
        op.in_flight = None
        if op.done:
            return
        if body is None:
            assert error is not None
            self._mark_coordinator_unknown(f"OffsetCommit failed: {error}", now_ms)
            return self._retry_or_fail(op, RetriableCommitFailedError(f"offset commit failed: {error}"), now_ms)
        outcome = parse_commit(body)
        if outcome.error is None:
            return self._complete(op, None)
        if outcome.coordinator_unknown:
            self._mark_coordinator_unknown(f"OffsetCommit answered {outcome.error.code.name}", now_ms)
        if outcome.fenced:
            self._set_fatal(outcome.error)
        if outcome.generation_lost and sent_with == self.generation:
            self._reset_state_and_rejoin(f"OffsetCommit answered {outcome.error.code.name}")
        if outcome.retriable:
            return self._retry_or_fail(op, RetriableCommitFailedError(str(outcome.error), outcome.error.code), now_ms)
        self._complete(op, outcome.error)

    def _on_fetch(
        self, op: GroupOperation, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int
    ) -> None:
        op.in_flight = None
        if op.done:
            return
        if body is None:
            assert error is not None
            self._mark_coordinator_unknown(f"OffsetFetch failed: {error}", now_ms)
            return self._retry_or_fail(op, error, now_ms)
        code, message, offsets = parse_fetch(body, op.partitions)
        if code is E.NONE:
            op.result = offsets
            return self._complete(op, None)
        if code in COORDINATOR_ERRORS:
            self._mark_coordinator_unknown(f"OffsetFetch answered {code.name}", now_ms)
        if code in RETRIABLE_FETCH_ERRORS:
            return self._retry_or_fail(op, error_from(code, message), now_ms)
        self._complete(op, error_from(code, message))

    def _retry_or_fail(self, op: GroupOperation, error: KafkaError, now_ms: int) -> None:
        retry_at = now_ms + self.config.retry_backoff_ms
        if op.retries and op.deadline_ms is not None and retry_at < op.deadline_ms:
            op.retry_at_ms = retry_at
            if op not in self._ops:
                self._ops.append(op)
        else:
            self._complete(op, error)

    def _complete(self, op: GroupOperation, error: KafkaError | None) -> None:
        op.finish(error)
        if op.callback is None:
            return
        if op.internal:
            op.callback(op.offsets, error)  # the auto-commit's own bookkeeping, not application code
        else:
            self._callbacks.append(RunCommitCallback(op.callback, dict(op.offsets), error))

    def _emit_callbacks(self) -> None:
        self._out.extend(self._callbacks)
        self._callbacks = []

    # --- answers ------------------------------------------------------------------------------

    def on_response(self, request_id: int, body: Mapping[str, Any], now_ms: int) -> None:
        self._answer(request_id, body, None, now_ms)

    def on_failure(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        self._answer(request_id, None, error, now_ms)

    def _answer(self, rid: int, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int) -> None:
        entry = self._inflight.pop(rid, None)
        if entry is None:
            return
        api, ctx = entry
        try:
            self._dispatch(api, rid, ctx, body, error, now_ms)
        except KafkaError as err:
            if err.code is not E.CORRUPT_MESSAGE or body is None:
                raise
            # A malformed answer is handled as no answer at all.
            log.warning("group %s: %s", self.config.group_id, err)
            self._dispatch(api, rid, ctx, None, err, now_ms)
        self._advance_background(now_ms)

    def _dispatch(
        self, api: str, rid: int, ctx: Any, body: Mapping[str, Any] | None, error: KafkaError | None, now_ms: int
    ) -> None:
        if api == "find_coordinator":
            self._on_find_coordinator(body, error, now_ms)
        elif api == "join_group":
            self._on_join(rid, parse_join(body) if body is not None else None, error, now_ms)
        elif api == "sync_group":
            self._on_sync(rid, body, error, now_ms)
        elif api == "heartbeat":
            self._on_heartbeat(ctx, body, error, now_ms)
        elif api == "offset_commit":
            self._on_commit(ctx, body, error, now_ms)
        elif api == "offset_fetch":
            self._on_fetch(ctx, body, error, now_ms)
        # leave_group: nothing to do; close() only waited for it to be answered.
