"""The sans-I/O Raft node: one plain object, fed inputs, emitting actions.

Design notes: docs/raft.md, section "raft/node.py".
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX
from kraftpy.raft.actions import (
    Action,
    AppendEntries,
    AppendResolved,
    CommitAdvanced,
    Flush,
    InstallSnapshot,
    PersistQuorumState,
    ReadResolved,
    RoleChanged,
    Send,
    TrimLog,
    TruncateTo,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.election import (
    can_grant_prevote,
    can_grant_vote,
    election_backoff_ms,
    election_timeout_ms,
    log_is_up_to_date,
)
from kraftpy.raft.leader import LeaderState, PendingAppend, PendingRead, ReplicaProgress
from kraftpy.raft.log import (
    ENTRY_OVERHEAD_BYTES,
    Entry,
    EntryKind,
    OffsetAndEpoch,
    RaftLog,
)
from kraftpy.raft.log_view import LogView
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
    is_request,
)
from kraftpy.raft.quorum_state import QuorumState, Role
from kraftpy.raft.roles import (
    NEVER,
    Candidate,
    Election,
    Fetching,
    Follower,
    Leader,
    Prospective,
    RaftInvariantError,
    Resigned,
    RoleState,
    Unattached,
)

__all__ = ["MAX_EPOCH_JUMP", "NEVER", "NotLeaderError", "RaftInvariantError", "RaftNode"]

# How far one peer request may move this node's epoch (see RaftNode.screen): more elections than a
# healthy quorum runs while one voter is away for many minutes.
MAX_EPOCH_JUMP = 1024


class NotLeaderError(KafkaError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RaftNode:
    def __init__(
        self,
        *,
        node_id: int,
        voters: frozenset[int] | set[int] | list[int],
        cluster_id: str,
        log: RaftLog,
        quorum_state: QuorumState,
        rng: random.Random,
        now_ms: int,
        config: RaftConfig | None = None,
    ) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        if not self.voters:
            raise ValueError("the voter set is empty")
        self.is_voter = node_id in self.voters
        self.cluster_id = cluster_id
        self.config = config or RaftConfig()
        self.rng = rng
        self.view = LogView(log)
        self._now = now_ms
        self._actions: list[Action] = []
        self._next_correlation = rng.getrandbits(40) << 16  # unique across restarts, w.h.p.

        self._persisted = quorum_state
        self.epoch = quorum_state.epoch
        self.voted_for = quorum_state.voted_for
        self.leader_id = quorum_state.leader_id

        # log durability and commit
        self._flushed = log.end_offset  # whatever survived a restart is durable
        self._truncations = 0  # flushes asked for before the latest truncation cover nothing
        self._pending_flushes: deque[tuple[int, int]] = deque()
        self._quorum_hw = -1  # the leader's high watermark as we know it (capped to our validated log)
        self.high_watermark = log.log_start_offset  # what the state machine may apply (exposed, monotonic)

        # What outlives a role. The last leader heard from: a prospective voter still refuses
        # pre-votes while it is alive, and an observer looking for a new leader still echoes
        # its read round.
        self._last_leader_contact_ms: int | None = None
        self._leader_resigned = False
        self._leader_round = 0
        self._election_attempts = 0  # lost elections in a row: the backoff grows with them
        self._discovery_index = 0  # the voter an observer asks next
        self._next_read_id = 1
        self._retired_leader: LeaderState | None = None  # its callers are failed when the step ends

        self.state: RoleState
        if self.leader_id == self.node_id:
            # KRaft: a restarted leader comes back resigned in its epoch, so no epoch ever has
            # two leaderships (its unflushed tail may be gone).
            self.state = Resigned(election_deadline_ms=now_ms + election_timeout_ms(self.config, rng))
        elif self.leader_id is not None:
            self.state = self._following(now_ms)
        else:
            self.state = self._unattached()
        self._emit(RoleChanged(self.role, self.epoch, self.leader_id))
        self._send_fetch()  # a follower (or an observer looking for the leader) fetches at once

    # ---- views of the role (the shells and tests read these) ---------------------------

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def _leader(self) -> LeaderState | None:
        """The leader's bookkeeping while leading, else None."""
        state = self.state
        return state.state if isinstance(state, Leader) else None

    def _leading(self) -> Leader:
        state = self.state
        assert isinstance(state, Leader)
        return state

    @property
    def _election_round(self) -> int:
        """The correlation id of the running election round (0 outside an election)."""
        state = self.state
        return state.round if isinstance(state, Election) else 0

    @property
    def _fetch_inflight(self) -> int | None:
        """The correlation id of the fetch in flight, if any."""
        state = self.state
        return state.fetch_inflight if isinstance(state, Fetching) else None

    # ======================================================================================
    # inputs
    # ======================================================================================

    def take_actions(self) -> list[Action]:
        if self._retired_leader is not None:
            # failed here, after the step, so the answers carry the new leader hint if known
            self._fail_leader_work(self._retired_leader)
            self._retired_leader = None
        out, self._actions = self._actions, []
        return out

    def screen(self, message: Message) -> KafkaError | None:
        """Why the core refuses a peer's request before acting on it, or None (a pure check).

        A request may raise this node's epoch by at most MAX_EPOCH_JUMP: a forged epoch near
        the top of the int32 range would otherwise be persisted and leave the quorum no epoch
        to elect in. A voter further behind than that learns the epoch from the answers to its
        own requests (answers are not screened). A BeginQuorumEpoch may not claim an epoch
        this node already knows another leader of (or leads itself): only a forged or broken
        peer sends one, and taking it would trip the core's safety checks.
        """
        if not is_request(message):
            return None
        epoch = message.candidate_epoch if isinstance(message, VoteRequest) else message.epoch
        if epoch > self.epoch + MAX_EPOCH_JUMP:
            return KafkaError(
                f"{type(message).__name__} from {message.src} for epoch {epoch}: more than "
                f"{MAX_EPOCH_JUMP} epochs above this node's epoch {self.epoch}",
                ErrorCode.INVALID_REQUEST,
            )
        if isinstance(message, BeginQuorumEpochRequest) and message.epoch == self.epoch:
            known = self.node_id if isinstance(self.state, Leader | Resigned) else self.leader_id
            if known is not None and known != message.leader_id:
                return KafkaError(
                    f"BeginQuorumEpoch from {message.src} claims epoch {epoch}, which node {known} leads",
                    ErrorCode.INVALID_REQUEST,
                )
        return None

    def handle(self, message: Message, now_ms: int) -> None:
        """One step (etcd's Step): filter, the epoch rule once, then the role's own handling."""
        self._begin(now_ms)
        if message.dst != self.node_id:
            return
        if message.cluster_id != self.cluster_id:
            self._reject_foreign(message)
            return
        if self.screen(message) is not None:
            return  # dropped, as the network may drop it: the route already answered the error
        kind = type(message)
        if kind is FetchResponse or kind is FetchSnapshotResponse:
            state = self.state
            if not isinstance(state, Fetching) or not state.claims(message):
                return  # answers no request in flight: late, duplicated or from before a restart
        if self._apply_epoch_rule(message):
            return  # a response that moved us answered a request of the role we left
        if self._fence_stale(message):
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, message)

    def tick(self, now_ms: int) -> None:
        self._begin(now_ms)
        self.state.tick(self, self._now)

    def on_flushed(self, up_to_offset: int, now_ms: int) -> None:
        self._begin(now_ms)
        best = None
        while self._pending_flushes and self._pending_flushes[0][0] <= up_to_offset:
            offset, generation = self._pending_flushes.popleft()
            if generation == self._truncations:
                best = offset
        if best is not None and best > self._flushed:
            self._flushed = min(best, self.view.end_offset)
            leader = self._leader
            if leader is not None:
                leader.local_end_offset = self._flushed
                if leader.maybe_advance_high_watermark():
                    self._on_leader_hw_advanced()
            self._update_exposed_hw()
            state = self.state
            if isinstance(state, Fetching) and state.fetch_inflight is None:
                self._send_fetch()
        self._maybe_flush()

    def append(self, records: list[bytes], now_ms: int, *, drain: bool = True) -> tuple[int, int, int]:
        """Propose `records`; returns (epoch, base_offset, last_offset). The outcome comes as
        an `AppendResolved` action. Raises NotLeaderError (with the leader hint) if not leader.

        With `append_linger_ms` 0 the records are appended at once, unless `drain` is False:
        then they wait in the accumulator for `drain_proposals`, so that proposals made together
        share one batch (a caller that passes False must call it)."""
        self._begin(now_ms)
        leader = self._require_leader()
        if not records:
            raise KafkaError("an append needs at least one record", ErrorCode.INVALID_REQUEST)
        size = sum(len(r) + ENTRY_OVERHEAD_BYTES for r in records)
        if size > self.config.max_batch_bytes:
            raise KafkaError(
                f"{size} bytes exceed max_batch_bytes {self.config.max_batch_bytes}",
                ErrorCode.RECORD_LIST_TOO_LARGE,
            )
        if leader.backlog_bytes + size > self.config.max_uncommitted_bytes:
            raise KafkaError(
                f"{leader.backlog_bytes} bytes of proposals are not committed yet (max_uncommitted_bytes "
                f"{self.config.max_uncommitted_bytes}): the quorum is behind; retry later",
                ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        if leader.accumulated_bytes + size > self.config.max_batch_bytes:
            self._drain_accumulator()
        base = self.view.end_offset + len(leader.accumulated)
        leader.accumulated.extend(bytes(r) for r in records)
        leader.accumulated_bytes += size
        last = base + len(records) - 1
        leader.appends.append(PendingAppend(base, last, now_ms + self.config.proposal_timeout_ms))
        leader.backlog.append((last, size))
        leader.backlog_bytes += size
        linger_ms = self.config.append_linger_ms
        if leader.accumulated_bytes >= self.config.max_batch_bytes or (linger_ms == 0 and drain):
            self._drain_accumulator()
        elif linger_ms > 0 and leader.linger_deadline_ms is None:
            leader.linger_deadline_ms = now_ms + linger_ms
        return self.epoch, base, last

    def drain_proposals(self, now_ms: int) -> None:
        """Append every proposal accumulated so far as one batch (KRaft's accumulator is drained
        on the Raft thread's next poll the same way). The shell calls this once per event-loop
        turn after appends made with `drain=False`; a no-op when nothing waits or not leader."""
        self._begin(now_ms)
        if self._leader is not None:
            self._drain_accumulator()

    def read_index(self, now_ms: int) -> int:
        """Start a linearizable read; returns its id. A `ReadResolved(read_id, read_index)`
        follows once a majority has confirmed this leadership after the call."""
        self._begin(now_ms)
        leader = self._require_leader()
        leader.round += 1
        read = PendingRead(self._next_read_id, leader.round, now_ms + self.config.read_timeout_ms)
        self._next_read_id += 1
        leader.reads.append(read)
        # answer parked fetches now so followers come straight back with the new round
        role = self._leading()
        for replica in list(leader.parked):
            role.answer_parked(self, replica)
        self._check_reads()
        return read.read_id

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: stop leading and ask the most caught-up voter to run."""
        self._begin(now_ms)
        if self.role is Role.LEADER and self._leader is not None:
            successors = self._leader.preferred_successors()
            self._to_resigned(successors)

    def on_snapshot_created(self, snapshot_id: OffsetAndEpoch, now_ms: int) -> None:
        """The shell stored (durably) a snapshot of the state machine at `snapshot_id`;
        trim the log behind it."""
        self._begin(now_ms)
        if snapshot_id.offset > self.high_watermark:
            raise RaftInvariantError(f"snapshot {snapshot_id} beyond the high watermark {self.high_watermark}")
        if self.view.entry_epoch(snapshot_id.offset - 1) != snapshot_id.epoch:
            raise RaftInvariantError(f"snapshot {snapshot_id} does not match the log")
        if snapshot_id.offset > self.view.log_start_offset:
            self.view.trim(snapshot_id.offset)
            self._emit(TrimLog(snapshot_id.offset))

    def snapshot_id_at(self, offset: int) -> OffsetAndEpoch:
        """The id a snapshot of the state machine after applying entries below `offset` gets."""
        epoch = self.view.entry_epoch(offset - 1)
        if epoch is None:
            raise ValueError(f"no entry at {offset - 1}")
        return OffsetAndEpoch(offset, epoch)

    def replica_progress(self) -> tuple[dict[int, ReplicaProgress], dict[int, ReplicaProgress]]:
        """A leader's view of the other voters and of the observers (both empty when not leading):
        copies of the maps, for status pages; the core never reads them back."""
        leader = self._leader
        if leader is None:
            return {}, {}
        return dict(leader.progress), dict(leader.observers)

    @property
    def leader_ready(self) -> bool:
        """Leader whose first entry of the epoch has committed: it knows the commit point,
        so it may serve reads and report commits (KRaft's "leader ready")."""
        return self._leader is not None and self._leader.high_watermark is not None

    def next_deadline_ms(self) -> int:
        """The latest time the shell must call `tick` next (earlier is harmless)."""
        found = [t for t in self.state.deadlines_ms(self) if t is not None]
        return min(found) if found else NEVER

    # ======================================================================================
    # plumbing
    # ======================================================================================

    def _begin(self, now_ms: int) -> None:
        self.view.sync()
        self._now = max(self._now, now_ms)

    def _emit(self, action: Action) -> None:
        self._actions.append(action)

    def _send(self, message: Message) -> None:
        self._emit(Send(message))

    def _correlation(self) -> int:
        self._next_correlation += 1
        return self._next_correlation

    def _request(self, kind: type, dst: int, correlation_id: int = 0, **fields: Any) -> None:
        """Send a request of `kind` to `dst` (the envelope filled in; `fields` by name)."""
        self._send(kind(cluster_id=self.cluster_id, src=self.node_id, dst=dst, correlation_id=correlation_id, **fields))

    def _reply(self, request: Message, kind: type, **fields: Any) -> None:
        """Answer `request` with a `kind` carrying our epoch (and, unless given, the leader we
        know): every response is built here, its own fields by name."""
        fields.setdefault("leader_id", self.leader_id)
        self._send(
            kind(
                cluster_id=self.cluster_id,
                src=self.node_id,
                dst=request.src,
                correlation_id=request.correlation_id,
                epoch=self.epoch,
                **fields,
            )
        )

    def _leader_hint(self) -> int | None:
        """The leader a refused fetch points to: only a follower or the leader names one."""
        return self.leader_id if self.state.names_leader else None

    def _fetch_error(self, request: FetchRequest, error: ErrorCode) -> None:
        self._reply(
            request, FetchResponse, leader_id=self._leader_hint(), error=error, fetch_offset=request.fetch_offset
        )

    def _snapshot_answer(self, request: FetchSnapshotRequest, error: ErrorCode, **fields: Any) -> None:
        self._reply(request, FetchSnapshotResponse, leader_id=self._leader_hint(), error=error, **fields)

    def _set_state(self, state: QuorumState) -> None:
        if state.epoch < self.epoch:
            raise RaftInvariantError(f"epoch going back from {self.epoch} to {state.epoch}")
        self.epoch, self.voted_for, self.leader_id = state.epoch, state.voted_for, state.leader_id
        if state != self._persisted:
            self._persisted = state
            self._emit(PersistQuorumState(state))

    def _require_leader(self) -> LeaderState:
        leader = self._leader
        if leader is None:
            hint = None if self.leader_id == self.node_id else self.leader_id
            raise NotLeaderError(
                f"node {self.node_id} is not the leader (epoch {self.epoch}, leader {hint})",
                leader_id=hint,
                epoch=self.epoch,
            )
        return leader

    def _reject_foreign(self, message: Message) -> None:
        if isinstance(message, VoteRequest):
            self._reply(
                message,
                VoteResponse,
                leader_id=None,
                granted=False,
                pre_vote=message.pre_vote,
                error=ErrorCode.INCONSISTENT_CLUSTER_ID,
            )
        elif isinstance(message, FetchRequest):
            self._reply(
                message,
                FetchResponse,
                leader_id=None,
                error=ErrorCode.INCONSISTENT_CLUSTER_ID,
                fetch_offset=message.fetch_offset,
            )
        # other foreign messages are dropped: answering them would only help a misconfigured peer

    # ======================================================================================
    # the epoch rule (once per message, before the role sees it)
    # ======================================================================================

    def _in_quorum(self, request: VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest) -> bool:
        """Whether a voter-only request comes from where it must: a Vote between voters, a
        Begin/EndQuorumEpoch from the voter it names as leader. The others carry no epoch news."""
        if isinstance(request, VoteRequest):
            return self.is_voter and request.src in self.voters
        return request.src in self.voters and request.leader_id == request.src

    def _apply_epoch_rule(self, message: Message) -> bool:
        """Move to a newer epoch a voter reports (or to the leader it names in ours). True if
        `message` is a response that moved us: it answered a request of the role we left."""
        kind = type(message)  # messages are final dataclasses: `is` is exact
        if kind is FetchRequest or kind is FetchSnapshotRequest:
            if message.epoch > self.epoch and message.src in self.voters:
                self._to_unattached(message.epoch)
            return False
        if kind is VoteRequest:
            # a pre-vote changes no state; a real vote moves us to its epoch, unattached
            if not message.pre_vote and self._in_quorum(message) and message.candidate_epoch > self.epoch:
                self._to_unattached(message.candidate_epoch)
            return False
        if kind is BeginQuorumEpochRequest:
            if self._in_quorum(message) and message.epoch >= self.epoch and not self._follows(message):
                if message.epoch == self.epoch and isinstance(self.state, Leader | Resigned):
                    raise RaftInvariantError(f"epoch {self.epoch} claimed by {message.src} and {self.node_id}")
                self._to_follower(message.epoch, message.src)
            return False
        if kind is EndQuorumEpochRequest:
            if self._in_quorum(message) and message.epoch > self.epoch:
                self._to_follower(message.epoch, message.src)
            return False
        return self._observe_epoch(message.epoch, message.leader_id, message.src)

    def _follows(self, request: BeginQuorumEpochRequest) -> bool:
        return isinstance(self.state, Follower) and self.leader_id == request.src and self.epoch == request.epoch

    def _observe_epoch(self, epoch: int, leader_id: int | None, src: int) -> bool:
        """React to an epoch (and leader) a peer reports. True if we changed role."""
        if src not in self.voters and src != self.node_id:
            return False
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._to_follower(epoch, leader_id)
            else:
                self._to_unattached(epoch)
            return True
        if (
            epoch == self.epoch
            and leader_id is not None
            and leader_id != self.node_id
            and self.leader_id is None
            and self.state.seeks_leader
        ):
            self._to_follower(epoch, leader_id)
            return True
        return False

    def _fence_stale(self, message: Message) -> bool:
        """Answer a request from an older epoch, which changes nothing here: the answer carries
        our epoch, which fences the sender. True if answered.

        The error is FENCED_LEADER_EPOCH for a BeginQuorumEpoch and for a fetch that reaches
        the leader; a non-leader refuses any fetch with NOT_LEADER_OR_FOLLOWER (and its
        leader hint); a Vote is refused and an EndQuorumEpoch acknowledged without an error
        code, the epoch alone telling the sender. Pre-votes are judged on their own terms, and
        voter-only requests from outside the quorum are left to their handlers.
        """
        kind = type(message)
        if kind is FetchRequest or kind is FetchSnapshotRequest:
            if message.epoch >= self.epoch:
                return False
            leading = isinstance(self.state, Leader)
            error = ErrorCode.FENCED_LEADER_EPOCH if leading else ErrorCode.NOT_LEADER_OR_FOLLOWER
            if kind is FetchRequest:
                self._fetch_error(message, error)
            else:
                self._snapshot_answer(message, error)
        elif kind is VoteRequest:
            if message.pre_vote or not self._in_quorum(message) or message.candidate_epoch >= self.epoch:
                return False
            self._reply(message, VoteResponse, granted=False, pre_vote=False)
        elif kind is BeginQuorumEpochRequest or kind is EndQuorumEpochRequest:
            if not self._in_quorum(message) or message.epoch >= self.epoch:
                return False
            if kind is BeginQuorumEpochRequest:
                self._reply(message, BeginQuorumEpochResponse, error=ErrorCode.FENCED_LEADER_EPOCH)
            else:
                self._reply(message, EndQuorumEpochResponse)
        else:
            return False
        return True

    # ======================================================================================
    # transitions (Kafka's QuorumState.transitionTo*)
    # ======================================================================================

    def _become(self, state: RoleState, quorum: QuorumState | None = None, *, announce: bool = True) -> None:
        """Replace the role object. The new `quorum` state (None: unchanged) is persisted first,
        so its `PersistQuorumState` precedes every action that depends on it; then the role is
        announced. A leader's unfinished work is failed when the step ends (`take_actions`)."""
        old = self.state
        if isinstance(old, Leader):
            self._retired_leader = old.state
        if quorum is not None:
            self._set_state(quorum)
        self.state = state
        if announce:
            self._emit(RoleChanged(self.role, self.epoch, self.leader_id))

    def _unattached(self, backoff: bool = False) -> Unattached:
        if not self.is_voter:
            return Unattached(retry_at_ms=self._now)  # observers look for the leader among the voters
        deadline = self._now + election_timeout_ms(self.config, self.rng)
        if backoff:
            deadline = self._now + election_backoff_ms(self.config, self.rng, self._election_attempts)
        return Unattached(election_deadline_ms=deadline)

    def _following(self, now_ms: int) -> Follower:
        """A fresh follower of `leader_id`: it heard from the leader now."""
        self._leader_resigned = False
        self._leader_round = 0
        self._last_leader_contact_ms = now_ms
        return Follower(fetch_deadline_ms=now_ms + self._fetch_timeout_ms(), retry_at_ms=now_ms)

    def _to_unattached(self, epoch: int, voted_for: int | None = None, backoff: bool = False) -> None:
        self._become(self._unattached(backoff), QuorumState(epoch, voted_for, None))
        if not self.is_voter:
            self._send_fetch()

    def _to_follower(self, epoch: int, leader_id: int) -> None:
        if leader_id == self.node_id:
            raise RaftInvariantError(f"told to follow itself in epoch {epoch}")
        if epoch == self.epoch and isinstance(self.state, Leader):
            raise RaftInvariantError(f"two leaders in epoch {epoch}: {self.node_id} and {leader_id}")
        if epoch == self.epoch and self.leader_id is not None and self.leader_id != leader_id:
            raise RaftInvariantError(f"epoch {epoch} has leaders {self.leader_id} and {leader_id}")
        voted_for = self.voted_for if epoch == self.epoch else None
        self._election_attempts = 0
        self._become(self._following(self._now), QuorumState(epoch, voted_for, leader_id))
        self._send_fetch()

    def _to_prospective(self) -> None:
        if not self.is_voter:
            raise RaftInvariantError("an observer never runs for election")
        if self.epoch >= INT32_MAX:
            # No epoch left to run in (every batch header stores it as int32): wait for a leader
            # rather than write an epoch no batch can carry. codec.MAX_PEER_EPOCH keeps peers away.
            self._to_unattached(self.epoch, self.voted_for, backoff=True)
            return
        self._election_attempts += 1
        deadline = self._now + election_timeout_ms(self.config, self.rng)
        self._become(Prospective(election_deadline_ms=deadline))
        self._start_round()

    def _to_candidate(self) -> None:
        deadline = self._now + election_timeout_ms(self.config, self.rng)
        self._become(Candidate(election_deadline_ms=deadline), QuorumState(self.epoch + 1, self.node_id, None))
        self._start_round()

    def _start_round(self) -> None:
        state = self.state
        assert isinstance(state, Election)
        state.start_round(self)

    def _election_won(self) -> None:
        if isinstance(self.state, Prospective):
            self._to_candidate()
        elif isinstance(self.state, Candidate):
            self._to_leader()

    def _election_lost(self) -> None:
        if isinstance(self.state, Prospective) and self.leader_id is not None:
            # the pre-vote found the leader alive: back to following it (without pretending
            # to have heard from it, so we keep granting pre-votes to others)
            contact = self._last_leader_contact_ms
            follower = self._following(self._now)
            self._last_leader_contact_ms = contact
            self._become(follower)
            self._send_fetch()
        else:
            self._to_unattached(self.epoch, self.voted_for, backoff=True)

    def _to_leader(self) -> None:
        self._election_attempts = 0
        start = self.view.end_offset
        leader = LeaderState(self.epoch, self.node_id, self.voters, start, self._now)
        leader.local_end_offset = self._flushed
        # the leadership is persisted before anything else
        self._become(Leader(leader), QuorumState(self.epoch, self.voted_for, self.node_id))
        change = cbor2.dumps({"leader_id": self.node_id, "voters": sorted(self.voters)})
        self._append_local([Entry(start, self.epoch, change, EntryKind.LEADER_CHANGE)])
        self._leading().send_begin_quorum_epoch(self)
        if leader.maybe_advance_high_watermark():  # a single voter commits on its own flush
            self._on_leader_hw_advanced()

    def _to_resigned(self, successors: tuple[int, ...]) -> None:
        deadline = self._now + election_timeout_ms(self.config, self.rng)
        resigned = Resigned(election_deadline_ms=deadline, end_successors=successors, end_pending=set(successors))
        self._become(resigned)
        resigned.send_end_quorum_epoch(self)

    def _fail_leader_work(self, leader: LeaderState) -> None:
        hint = None if self.leader_id == self.node_id else self.leader_id
        for pending in leader.appends:
            appended = pending.last_offset < leader.epoch_start_offset + 1 + leader.appended_count
            self._emit(
                AppendResolved(
                    leader.epoch,
                    pending.base_offset,
                    pending.last_offset,
                    error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    leader_id=hint,
                    appended=appended,
                )
            )
        for read in leader.reads:
            self._emit(ReadResolved(read.read_id, -1, ErrorCode.NOT_LEADER_OR_FOLLOWER, hint))
        leader.appends.clear()
        leader.reads.clear()
        leader.parked.clear()
        leader.accumulated.clear()

    # ======================================================================================
    # log writes (as actions) and commit
    # ======================================================================================

    def _append_local(self, entries: list[Entry]) -> None:
        """A leader's new entries: the parked fetches' answers carrying them are emitted before
        the write. The followers' round trip is the commit's critical path and the leader's own
        write and fsync run beside it; sending first is what the fsync in a thread already allows,
        since a leader counts its own copy only once flushed and the answers read the view."""
        if not entries:
            return
        self.view.append(entries)
        state = self.state
        if isinstance(state, Leader):
            for replica in list(state.state.parked):
                state.answer_parked(self, replica)
        self._emit(AppendEntries(tuple(entries)))
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        """Group commit: at most one flush of the current log generation in flight."""
        end = self.view.end_offset
        if end <= self._flushed:
            return
        if any(gen == self._truncations for _, gen in self._pending_flushes):
            return
        self._pending_flushes.append((end, self._truncations))
        self._emit(Flush(end))

    def _truncate(self, offset: int) -> None:
        if offset < self.high_watermark:
            raise RaftInvariantError(
                f"node {self.node_id}: truncation to {offset} below the high watermark {self.high_watermark}"
            )
        if offset < self.view.log_start_offset:
            raise RaftInvariantError(f"truncation to {offset} below the log start {self.view.log_start_offset}")
        if offset >= self.view.end_offset:
            return
        self.view.truncate_to(offset)
        self._emit(TruncateTo(offset))
        self._truncations += 1
        self._flushed = min(self._flushed, offset)
        self._quorum_hw = min(self._quorum_hw, offset)

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """A fetched snapshot is complete: the log restarts at its end."""
        self.view.install(snapshot_id)
        self._emit(InstallSnapshot(snapshot_id))
        self._truncations += 1  # flushes in flight covered the old log
        self._flushed = snapshot_id.offset
        self._quorum_hw = max(self._quorum_hw, snapshot_id.offset)
        self.high_watermark = max(self.high_watermark, snapshot_id.offset)  # the state machine loaded it

    def _update_exposed_hw(self) -> None:
        leader = self._leader
        if leader is not None and leader.high_watermark is not None:
            self._quorum_hw = max(self._quorum_hw, leader.high_watermark)
        exposed = min(self._quorum_hw, self._flushed)
        if exposed > self.high_watermark:
            self.high_watermark = exposed
            self._emit(CommitAdvanced(exposed))

    def _on_leader_hw_advanced(self) -> None:
        leader = self._leader
        assert leader is not None and leader.high_watermark is not None
        self._update_exposed_hw()
        hw = leader.high_watermark
        while leader.backlog and leader.backlog[0][0] < hw:
            leader.backlog_bytes -= leader.backlog.popleft()[1]
        while leader.appends and leader.appends[0].last_offset < hw:
            pending = leader.appends.popleft()
            self._emit(AppendResolved(leader.epoch, pending.base_offset, pending.last_offset))
        self._hw_news_for_parked()
        self._check_reads()

    def _hw_news_for_parked(self) -> None:
        """The high watermark moved: parked fetches (which have no new entries to carry) tell it
        within the linger, so an append that comes meanwhile carries it with its entries."""
        leader = self._leader
        assert leader is not None
        linger = self.config.fetch_high_watermark_linger_ms
        for replica, parked in list(leader.parked.items()):
            if linger == 0:
                self._leading().answer_parked(self, replica)
            else:
                parked.deadline_ms = min(parked.deadline_ms, self._now + linger)

    def _check_reads(self) -> None:
        leader = self._leader
        if leader is None:
            return
        while leader.reads and leader.read_confirmed(leader.reads[0]):
            read = leader.reads.popleft()
            assert leader.high_watermark is not None
            self._emit(ReadResolved(read.read_id, leader.high_watermark))

    def _drain_accumulator(self) -> None:
        leader = self._leader
        if leader is None or not leader.accumulated:
            return
        start = self.view.end_offset
        entries = [Entry(start + i, leader.epoch, data) for i, data in enumerate(leader.accumulated)]
        leader.appended_count += len(entries)
        leader.accumulated = []
        leader.accumulated_bytes = 0
        leader.linger_deadline_ms = None
        self._append_local(entries)

    # ======================================================================================
    # fetching: a follower, and an observer looking for the leader
    # ======================================================================================

    def _send_fetch(self) -> None:
        """Fetch from the leader (or a voter, to find it) unless a fetch is in flight."""
        state = self.state
        if isinstance(state, Fetching):
            state.send_fetch(self)

    def _fetch_timeout_ms(self) -> int:
        return self.config.fetch_timeout_ms + self.rng.randrange(self.config.fetch_timeout_jitter_ms + 1)

    def _leader_recently_heard(self) -> bool:
        """The leader we last followed fetched to us lately and has not resigned."""
        if self.leader_id is None or self._leader_resigned or self._last_leader_contact_ms is None:
            return False
        return self._now - self._last_leader_contact_ms < self.config.fetch_timeout_ms

    # ======================================================================================
    # message handlers (after the epoch rule): common ones here, the rest go to the role
    # ======================================================================================

    def _vote_log_ok(self, request: VoteRequest) -> bool:
        return log_is_up_to_date(request.last_epoch, request.end_offset, self.view.last_epoch, self.view.end_offset)

    def _on_vote_request(self, request: VoteRequest) -> None:
        if not self._in_quorum(request):
            self._reply(
                request, VoteResponse, granted=False, pre_vote=request.pre_vote, error=ErrorCode.INCONSISTENT_VOTER_SET
            )
            return
        if request.pre_vote:
            granted = can_grant_prevote(
                candidate_epoch=request.candidate_epoch,
                epoch=self.epoch,
                log_ok=self._vote_log_ok(request),
                is_leader=isinstance(self.state, Leader),
                has_live_leader=self.state.has_live_leader(self),
            )
            self._reply(request, VoteResponse, granted=granted, pre_vote=True)
            return
        granted = (
            can_grant_vote(
                candidate_id=request.src,
                candidate_epoch=request.candidate_epoch,
                epoch=self.epoch,
                voted_for=self.voted_for,
                leader_id=self.leader_id,
                log_ok=self._vote_log_ok(request),
            )
            and self.state.grants_votes
        )
        if granted and self.voted_for is None:
            # the vote is persisted before the answer leaves
            was_unattached = isinstance(self.state, Unattached)
            self._become(self._unattached(), QuorumState(self.epoch, request.src, None), announce=not was_unattached)
        self._reply(request, VoteResponse, granted=granted, pre_vote=False)

    def _on_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> None:
        if self._in_quorum(request):  # the epoch rule made us its follower
            self._reply(request, BeginQuorumEpochResponse)

    def _on_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> None:
        if self._in_quorum(request):
            self.state.on_end_quorum_epoch(self, request)
            self._reply(request, EndQuorumEpochResponse)


_HANDLERS = {
    VoteRequest: RaftNode._on_vote_request,
    VoteResponse: lambda node, m: node.state.on_vote_response(node, m),
    BeginQuorumEpochRequest: RaftNode._on_begin_quorum_epoch,
    BeginQuorumEpochResponse: lambda node, m: node.state.on_begin_quorum_epoch_response(node, m),
    EndQuorumEpochRequest: RaftNode._on_end_quorum_epoch,
    EndQuorumEpochResponse: lambda node, m: node.state.on_end_quorum_epoch_response(node, m),
    FetchRequest: lambda node, m: node.state.on_fetch_request(node, m),
    FetchResponse: lambda node, m: node.state.on_fetch_response(node, m),
    FetchSnapshotRequest: lambda node, m: node.state.on_fetch_snapshot_request(node, m),
    FetchSnapshotResponse: lambda node, m: node.state.on_fetch_snapshot_response(node, m),
}
