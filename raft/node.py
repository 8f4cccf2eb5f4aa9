"""The sans-I/O Raft node: one plain object, fed inputs, emitting actions.

Design notes: docs/raft.md, section "raft/node.py".
"""

from __future__ import annotations

import random
from collections import deque

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
    WriteSnapshotChunk,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.election import (
    VoteTally,
    can_grant_prevote,
    can_grant_vote,
    election_backoff_ms,
    election_timeout_ms,
    log_is_up_to_date,
    successor_backoff_ms,
)
from kraftpy.raft.leader import LeaderState, ParkedFetch, PendingAppend, PendingRead, ReplicaProgress
from kraftpy.raft.log import (
    ENTRY_OVERHEAD_BYTES,
    Entry,
    EntryKind,
    FetchVerdict,
    OffsetAndEpoch,
    RaftLog,
    truncation_offset,
    validate_fetch,
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

NEVER = 1 << 62

# How far one peer request may move this node's epoch (see RaftNode.screen): more elections than a
# healthy quorum runs while one voter is away for many minutes.
MAX_EPOCH_JUMP = 1024


class RaftInvariantError(AssertionError):
    """The core was asked to do something that would break Raft's safety (a bug somewhere)."""


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

        # timers
        self._election_deadline: int | None = None
        self._fetch_deadline: int | None = None  # a follower's "leader is silent" deadline
        self._retry_at: int | None = None  # resend a request (fetch, votes, EndQuorumEpoch)
        self._end_deadline: int | None = None

        # per-role state
        self._leader: LeaderState | None = None
        self._retired_leader: LeaderState | None = None  # its callers are failed when the step ends
        self._tally: VoteTally | None = None
        self._election_round = 0
        self._election_attempts = 0
        self._fetch_inflight: int | None = None
        self._fetch_target: int | None = None
        self._snapshot_fetch: tuple[OffsetAndEpoch, int] | None = None  # (id, next position)
        self._last_leader_contact_ms: int | None = None
        self._leader_resigned = False
        self._leader_round = 0
        self._end_pending: set[int] = set()
        self._end_successors: tuple[int, ...] = ()
        self._next_read_id = 1
        self._discovery_index = 0

        if self.leader_id == self.node_id:
            # KRaft: a restarted leader comes back resigned in its epoch, so no epoch ever has
            # two leaderships (its unflushed tail may be gone).
            self.role = Role.RESIGNED
            self._election_deadline = now_ms + election_timeout_ms(self.config, rng)
        elif self.leader_id is not None:
            self.role = Role.FOLLOWER
            self._start_following(now_ms)
        else:
            self.role = Role.UNATTACHED
            self._arm_unattached()
        self._emit(RoleChanged(self.role, self.epoch, self.leader_id))
        self._send_fetch()  # a follower (or an observer looking for the leader) fetches at once

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
            known = self.node_id if self.role in (Role.LEADER, Role.RESIGNED) else self.leader_id
            if known is not None and known != message.leader_id:
                return KafkaError(
                    f"BeginQuorumEpoch from {message.src} claims epoch {epoch}, which node {known} leads",
                    ErrorCode.INVALID_REQUEST,
                )
        return None

    def handle(self, message: Message, now_ms: int) -> None:
        self._begin(now_ms)
        if message.dst != self.node_id:
            return
        if message.cluster_id != self.cluster_id:
            self._reject_foreign(message)
            return
        if self.screen(message) is not None:
            return  # dropped, as the network may drop it: the route already answered the error
        handler = _HANDLERS.get(type(message))
        if handler is not None:
            handler(self, message)

    def tick(self, now_ms: int) -> None:
        self._begin(now_ms)
        now_ms = self._now  # _begin keeps the clock from running backwards
        if self.role is Role.LEADER:
            self._tick_leader(now_ms)
        elif self.role is Role.FOLLOWER:
            if self._fetch_deadline is not None and now_ms >= self._fetch_deadline:
                if self.is_voter:
                    self._to_prospective()
                else:
                    self._to_unattached(self.epoch, self.voted_for)
            elif self._retry_at is not None and now_ms >= self._retry_at:
                self._fetch_inflight = None
                self._send_fetch()
        elif self.role is Role.UNATTACHED:
            if self.is_voter:
                if self._election_deadline is not None and now_ms >= self._election_deadline:
                    self._to_prospective()
            elif self._retry_at is not None and now_ms >= self._retry_at:
                self._fetch_inflight = None
                self._send_fetch()
        elif self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            if self._election_deadline is not None and now_ms >= self._election_deadline:
                self._to_prospective()  # split vote or silence: a fresh pre-vote round
            elif self._retry_at is not None and now_ms >= self._retry_at:
                self._send_votes(resend=True)
        elif self.role is Role.RESIGNED:
            if self._election_deadline is not None and now_ms >= self._election_deadline:
                self._to_prospective()
            elif self._retry_at is not None and now_ms >= self._retry_at:
                if self._end_pending:
                    self._send_end_quorum_epoch()
                else:
                    self._retry_at = None  # every voter has the EndQuorumEpoch

    def on_flushed(self, up_to_offset: int, now_ms: int) -> None:
        self._begin(now_ms)
        best = None
        while self._pending_flushes and self._pending_flushes[0][0] <= up_to_offset:
            offset, generation = self._pending_flushes.popleft()
            if generation == self._truncations:
                best = offset
        if best is not None and best > self._flushed:
            self._flushed = min(best, self.view.end_offset)
            if self._leader is not None:
                self._leader.local_end_offset = self._flushed
                if self._leader.maybe_advance_high_watermark():
                    self._on_leader_hw_advanced()
            self._update_exposed_hw()
            if self.role in (Role.FOLLOWER, Role.UNATTACHED) and self._fetch_inflight is None:
                self._send_fetch()
        self._maybe_flush()

    def append(self, records: list[bytes], now_ms: int) -> tuple[int, int, int]:
        """Propose `records`; returns (epoch, base_offset, last_offset). The outcome comes as
        an `AppendResolved` action. Raises NotLeaderError (with the leader hint) if not leader."""
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
        if self.config.append_linger_ms == 0 or leader.accumulated_bytes >= self.config.max_batch_bytes:
            self._drain_accumulator()
        elif leader.linger_deadline_ms is None:
            leader.linger_deadline_ms = now_ms + self.config.append_linger_ms
        return self.epoch, base, last

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
        for replica in list(leader.parked):
            self._answer_parked(replica)
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
        times = [self._election_deadline, self._fetch_deadline, self._retry_at]
        leader = self._leader
        if leader is not None:
            times.append(leader.linger_deadline_ms)
            times.append(leader.begin_resend_ms)
            times.append(leader.check_quorum_deadline_ms(self.config.check_quorum_timeout_ms))
            times.extend(p.deadline_ms for p in leader.parked.values())
            if leader.appends:
                times.append(leader.appends[0].deadline_ms)
            if leader.reads:
                times.append(leader.reads[0].deadline_ms)
        found = [t for t in times if t is not None]
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

    def _set_state(self, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        if epoch < self.epoch:
            raise RaftInvariantError(f"epoch going back from {self.epoch} to {epoch}")
        self.epoch, self.voted_for, self.leader_id = epoch, voted_for, leader_id
        state = QuorumState(epoch, voted_for, leader_id)
        if state != self._persisted:
            self._persisted = state
            self._emit(PersistQuorumState(state))

    def _require_leader(self) -> LeaderState:
        if self.role is not Role.LEADER or self._leader is None:
            hint = None if self.leader_id == self.node_id else self.leader_id
            raise NotLeaderError(
                f"node {self.node_id} is not the leader (epoch {self.epoch}, leader {hint})",
                leader_id=hint,
                epoch=self.epoch,
            )
        return self._leader

    def _reject_foreign(self, message: Message) -> None:
        if isinstance(message, VoteRequest):
            self._send(
                VoteResponse(
                    self.cluster_id,
                    self.node_id,
                    message.src,
                    message.correlation_id,
                    self.epoch,
                    None,
                    False,
                    message.pre_vote,
                    ErrorCode.INCONSISTENT_CLUSTER_ID,
                )
            )
        elif isinstance(message, FetchRequest):
            self._send(
                FetchResponse(
                    self.cluster_id,
                    self.node_id,
                    message.src,
                    message.correlation_id,
                    self.epoch,
                    None,
                    ErrorCode.INCONSISTENT_CLUSTER_ID,
                    message.fetch_offset,
                )
            )
        # other foreign messages are dropped: answering them would only help a misconfigured peer

    # ---- leaving a role ----------------------------------------------------------------

    def _leave_role(self) -> None:
        """Clear the per-role state; fail what a leader still owed its callers."""
        leader, self._leader = self._leader, None
        self._tally = None
        self._fetch_inflight = None
        self._snapshot_fetch = None
        self._retry_at = None
        self._election_deadline = None
        self._fetch_deadline = None
        self._end_pending = set()
        if leader is not None:
            self._retired_leader = leader

    def _fail_leader_work(self, leader: LeaderState) -> None:
        hint = None if self.leader_id == self.node_id else self.leader_id
        for pending in leader.appends:
            appended = pending.last_offset < leader.epoch_start_offset + 1 + leader.appended_count
            self._emit(
                AppendResolved(
                    leader.epoch,
                    pending.base_offset,
                    pending.last_offset,
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    hint,
                    appended,
                )
            )
        for read in leader.reads:
            self._emit(ReadResolved(read.read_id, -1, ErrorCode.NOT_LEADER_OR_FOLLOWER, hint))
        leader.appends.clear()
        leader.reads.clear()
        leader.parked.clear()
        leader.accumulated.clear()

    # ======================================================================================
    # transitions
    # ======================================================================================

    def _arm_unattached(self) -> None:
        if self.is_voter:
            self._election_deadline = self._now + election_timeout_ms(self.config, self.rng)
        else:
            self._retry_at = self._now  # observers look for the leader among the voters

    def _to_unattached(self, epoch: int, voted_for: int | None = None, backoff: bool = False) -> None:
        self._leave_role()
        self._set_state(epoch, voted_for, None)
        self.role = Role.UNATTACHED
        self._arm_unattached()
        if backoff and self.is_voter:
            self._election_deadline = self._now + election_backoff_ms(self.config, self.rng, self._election_attempts)
        self._emit(RoleChanged(self.role, self.epoch, None))
        if not self.is_voter:
            self._send_fetch()

    def _to_follower(self, epoch: int, leader_id: int) -> None:
        if leader_id == self.node_id:
            raise RaftInvariantError(f"told to follow itself in epoch {epoch}")
        if epoch == self.epoch and self.role is Role.LEADER:
            raise RaftInvariantError(f"two leaders in epoch {epoch}: {self.node_id} and {leader_id}")
        if epoch == self.epoch and self.leader_id is not None and self.leader_id != leader_id:
            raise RaftInvariantError(f"epoch {epoch} has leaders {self.leader_id} and {leader_id}")
        self._leave_role()
        self._set_state(epoch, self.voted_for if epoch == self.epoch else None, leader_id)
        self.role = Role.FOLLOWER
        self._election_attempts = 0
        self._start_following(self._now)
        self._emit(RoleChanged(self.role, self.epoch, leader_id))
        self._send_fetch()

    def _start_following(self, now_ms: int) -> None:
        self._leader_resigned = False
        self._leader_round = 0
        self._last_leader_contact_ms = now_ms
        self._fetch_deadline = now_ms + self._fetch_timeout_ms()
        self._retry_at = now_ms

    def _to_prospective(self) -> None:
        if not self.is_voter:
            raise RaftInvariantError("an observer never runs for election")
        if self.epoch >= INT32_MAX:
            # No epoch left to run in (every batch header stores it as int32): wait for a leader
            # rather than write an epoch no batch can carry. codec.MAX_PEER_EPOCH keeps peers away.
            self._to_unattached(self.epoch, self.voted_for, backoff=True)
            return
        self._leave_role()
        self.role = Role.PROSPECTIVE
        self._election_attempts += 1
        self._election_deadline = self._now + election_timeout_ms(self.config, self.rng)
        self._emit(RoleChanged(self.role, self.epoch, self.leader_id))
        self._start_round()

    def _to_candidate(self) -> None:
        self._leave_role()
        self._set_state(self.epoch + 1, self.node_id, None)
        self.role = Role.CANDIDATE
        self._election_deadline = self._now + election_timeout_ms(self.config, self.rng)
        self._emit(RoleChanged(self.role, self.epoch, None))
        self._start_round()

    def _start_round(self) -> None:
        self._election_round = self._correlation()
        self._tally = VoteTally(self.voters)
        self._tally.record(self.node_id, True)
        if self._tally.won:
            self._election_won()
            return
        self._send_votes(resend=False)

    def _send_votes(self, resend: bool) -> None:
        tally = self._tally
        if tally is None:
            return
        pre_vote = self.role is Role.PROSPECTIVE
        candidate_epoch = self.epoch + 1 if pre_vote else self.epoch
        for voter in tally.unanswered():
            self._send(
                VoteRequest(
                    self.cluster_id,
                    self.node_id,
                    voter,
                    self._election_round,
                    candidate_epoch,
                    self.view.last_epoch,
                    self.view.end_offset,
                    pre_vote,
                )
            )
        self._retry_at = self._now + self.config.request_timeout_ms

    def _election_won(self) -> None:
        if self.role is Role.PROSPECTIVE:
            self._to_candidate()
        elif self.role is Role.CANDIDATE:
            self._to_leader()

    def _election_lost(self) -> None:
        if self.role is Role.PROSPECTIVE and self.leader_id is not None:
            # the pre-vote found the leader alive: back to following it (without pretending
            # to have heard from it, so we keep granting pre-votes to others)
            contact = self._last_leader_contact_ms
            self._leave_role()
            self.role = Role.FOLLOWER
            self._start_following(self._now)
            self._last_leader_contact_ms = contact
            self._emit(RoleChanged(self.role, self.epoch, self.leader_id))
            self._send_fetch()
        else:
            self._to_unattached(self.epoch, self.voted_for, backoff=True)

    def _to_leader(self) -> None:
        self._leave_role()
        self._set_state(self.epoch, self.voted_for, self.node_id)  # persisted before anything else
        self.role = Role.LEADER
        self._election_attempts = 0
        start = self.view.end_offset
        leader = LeaderState(self.epoch, self.node_id, self.voters, start, self._now)
        leader.local_end_offset = self._flushed
        self._leader = leader
        self._emit(RoleChanged(self.role, self.epoch, self.node_id))
        change = cbor2.dumps({"leader_id": self.node_id, "voters": sorted(self.voters)})
        self._append_local([Entry(start, self.epoch, change, EntryKind.LEADER_CHANGE)])
        self._send_begin_quorum_epoch()
        if leader.maybe_advance_high_watermark():  # a single voter commits on its own flush
            self._on_leader_hw_advanced()

    def _to_resigned(self, successors: tuple[int, ...]) -> None:
        self._leave_role()
        self.role = Role.RESIGNED
        self._end_successors = successors
        self._end_pending = set(successors)
        self._election_deadline = self._now + election_timeout_ms(self.config, self.rng)
        self._emit(RoleChanged(self.role, self.epoch, self.node_id))
        self._send_end_quorum_epoch()

    # ======================================================================================
    # log writes (as actions) and commit
    # ======================================================================================

    def _append_local(self, entries: list[Entry]) -> None:
        if not entries:
            return
        self.view.append(entries)
        self._emit(AppendEntries(tuple(entries)))
        self._maybe_flush()
        leader = self._leader
        if leader is not None:
            for replica in list(leader.parked):
                self._answer_parked(replica)

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

    def _update_exposed_hw(self) -> None:
        if self._leader is not None and self._leader.high_watermark is not None:
            self._quorum_hw = max(self._quorum_hw, self._leader.high_watermark)
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
                self._answer_parked(replica)
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
    # leader
    # ======================================================================================

    def _tick_leader(self, now_ms: int) -> None:
        leader = self._leader
        assert leader is not None
        if not leader.quorum_alive(now_ms, self.config.check_quorum_timeout_ms):
            self._to_resigned(())  # check-quorum: a majority has not fetched from us lately
            return
        if leader.linger_deadline_ms is not None and now_ms >= leader.linger_deadline_ms:
            self._drain_accumulator()
        for replica, parked in list(leader.parked.items()):
            if now_ms >= parked.deadline_ms:
                self._answer_parked(replica)
        while leader.appends and leader.appends[0].deadline_ms <= now_ms:
            pending = leader.appends.popleft()
            appended = pending.last_offset < self.view.end_offset
            self._emit(
                AppendResolved(
                    leader.epoch,
                    pending.base_offset,
                    pending.last_offset,
                    ErrorCode.REQUEST_TIMED_OUT,
                    self.node_id,
                    appended,
                )
            )
        while leader.reads and leader.reads[0].deadline_ms <= now_ms:
            read = leader.reads.popleft()
            self._emit(ReadResolved(read.read_id, -1, ErrorCode.REQUEST_TIMED_OUT, self.node_id))
        if now_ms >= leader.begin_resend_ms:
            self._send_begin_quorum_epoch()

    def _send_begin_quorum_epoch(self) -> None:
        leader = self._leader
        assert leader is not None
        for voter, progress in sorted(leader.progress.items()):
            if not progress.knows_epoch:
                self._send(BeginQuorumEpochRequest(self.cluster_id, self.node_id, voter, 0, self.epoch, self.node_id))
        leader.begin_resend_ms = self._now + self.config.request_timeout_ms
        if all(p.knows_epoch for p in leader.progress.values()):
            leader.begin_resend_ms = NEVER

    def _fetch_error(self, request: FetchRequest, error: ErrorCode) -> None:
        hint = self.leader_id if self.role is Role.FOLLOWER or self.role is Role.LEADER else None
        self._send(
            FetchResponse(
                self.cluster_id,
                self.node_id,
                request.src,
                request.correlation_id,
                self.epoch,
                hint,
                error,
                request.fetch_offset,
            )
        )

    def _on_fetch_request(self, request: FetchRequest) -> None:
        if request.epoch > self.epoch and request.src in self.voters:
            self._to_unattached(request.epoch)
        if self.role is not Role.LEADER or self._leader is None:
            self._fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if request.epoch < self.epoch:
            self._fetch_error(request, ErrorCode.FENCED_LEADER_EPOCH)
            return
        if request.epoch > self.epoch:
            self._fetch_error(request, ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        if request.fetch_offset < 0 or not 0 <= request.last_fetched_epoch <= self.epoch:
            self._fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        leader = self._leader
        if request.src == self.node_id:
            self._fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        leader.on_fetch(request.src, self._now, request.leader_round)
        verdict, position = validate_fetch(self.view, request.fetch_offset, request.last_fetched_epoch)
        if verdict is FetchVerdict.VALID:
            leader.acknowledge(request.src, request.fetch_offset)
            if request.src in self.voters and leader.maybe_advance_high_watermark():
                self._on_leader_hw_advanced()
            leader.parked.pop(request.src, None)
            progress = leader.replica(request.src)
            hw = -1 if leader.high_watermark is None else leader.high_watermark
            hw_news = progress.hw_sent != hw
            linger = self.config.fetch_high_watermark_linger_ms
            no_entries = request.fetch_offset >= self.view.end_offset
            if (
                no_entries
                and not (hw_news and linger == 0)
                and request.max_wait_ms > 0
                and request.leader_round >= leader.round
            ):
                wait = min(request.max_wait_ms, self.config.fetch_max_wait_ms)
                if hw_news:
                    wait = min(wait, linger)  # see fetch_high_watermark_linger_ms
                leader.parked[request.src] = ParkedFetch(request, self._now + wait)
                self._check_reads()  # a parked fetch still confirms this leadership for reads
                return
            self._answer_fetch(request)
        else:
            self._check_reads()
            self._send(
                FetchResponse(
                    self.cluster_id,
                    self.node_id,
                    request.src,
                    request.correlation_id,
                    self.epoch,
                    self.node_id,
                    ErrorCode.NONE,
                    request.fetch_offset,
                    self._leader_hw(),
                    diverging=position if verdict is FetchVerdict.DIVERGING else None,
                    snapshot_id=position if verdict is FetchVerdict.SNAPSHOT else None,
                    leader_round=leader.round,
                )
            )
        self._check_reads()

    def _leader_hw(self) -> int:
        leader = self._leader
        return -1 if leader is None or leader.high_watermark is None else leader.high_watermark

    def _answer_parked(self, replica: int) -> None:
        leader = self._leader
        assert leader is not None
        parked = leader.parked.pop(replica, None)
        if parked is not None:
            self._answer_fetch(parked.request)

    def _answer_fetch(self, request: FetchRequest) -> None:
        """Answer a fetch already found valid (now or when it was parked)."""
        leader = self._leader
        assert leader is not None
        verdict, position = validate_fetch(self.view, request.fetch_offset, request.last_fetched_epoch)
        entries: tuple[Entry, ...] = ()
        if verdict is FetchVerdict.VALID and request.fetch_offset < self.view.end_offset:
            entries = tuple(self.view.read(request.fetch_offset, self.config.max_fetch_bytes))
        hw = self._leader_hw()
        leader.replica(request.src).hw_sent = hw
        self._send(
            FetchResponse(
                self.cluster_id,
                self.node_id,
                request.src,
                request.correlation_id,
                self.epoch,
                self.node_id,
                ErrorCode.NONE,
                request.fetch_offset,
                hw,
                entries,
                diverging=position if verdict is FetchVerdict.DIVERGING else None,
                snapshot_id=position if verdict is FetchVerdict.SNAPSHOT else None,
                leader_round=leader.round,
            )
        )

    def _on_fetch_snapshot_request(self, request: FetchSnapshotRequest) -> None:
        def answer(error: ErrorCode, **fields: object) -> None:
            hint = self.leader_id if self.role in (Role.FOLLOWER, Role.LEADER) else None
            self._send(
                FetchSnapshotResponse(
                    self.cluster_id,
                    self.node_id,
                    request.src,
                    request.correlation_id,
                    self.epoch,
                    hint,
                    error,
                    **fields,  # type: ignore[arg-type]
                )
            )

        if request.epoch > self.epoch and request.src in self.voters:
            self._to_unattached(request.epoch)
        if self.role is not Role.LEADER or self._leader is None:
            answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if request.epoch != self.epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH if request.epoch < self.epoch else ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        self._leader.on_fetch(request.src, self._now, 0)
        snapshot = self.view.latest_snapshot()
        if snapshot is None or snapshot != request.snapshot_id:
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        size = self.view.snapshot_size(snapshot)
        if size is None:
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if not 0 <= request.position <= size:
            answer(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        chunk = min(max(request.max_bytes, 1), self.config.snapshot_chunk_bytes)
        data = self.view.read_snapshot(snapshot, request.position, chunk)
        answer(ErrorCode.NONE, snapshot_id=snapshot, position=request.position, size=size, data=data)

    # ======================================================================================
    # follower / observer
    # ======================================================================================

    def _send_fetch(self) -> None:
        if self._fetch_inflight is not None:
            return
        if self.role is Role.FOLLOWER:
            target = self.leader_id
        elif self.role is Role.UNATTACHED and not self.is_voter:
            ordered = sorted(self.voters)
            target = ordered[self._discovery_index % len(ordered)]
            self._discovery_index += 1
        else:
            return
        if target is None:
            return
        if self._snapshot_fetch is not None:
            snapshot_id, position = self._snapshot_fetch
            self._fetch_inflight = self._correlation()
            self._fetch_target = target
            self._send(
                FetchSnapshotRequest(
                    self.cluster_id,
                    self.node_id,
                    target,
                    self._fetch_inflight,
                    self.epoch,
                    snapshot_id,
                    position,
                    self.config.snapshot_chunk_bytes,
                )
            )
            self._retry_at = self._now + self.config.request_timeout_ms
            return
        if self.is_voter and self._flushed < self.view.end_offset:
            self._maybe_flush()  # a voter fetches only from a durable position: it acknowledges it
            self._retry_at = None
            return
        self._fetch_inflight = self._correlation()
        self._fetch_target = target
        self._send(
            FetchRequest(
                self.cluster_id,
                self.node_id,
                target,
                self._fetch_inflight,
                self.epoch,
                self.view.end_offset,
                self.view.last_epoch,
                self.config.fetch_max_wait_ms,
                self._leader_round,
            )
        )
        self._retry_at = self._now + self.config.fetch_max_wait_ms + self.config.request_timeout_ms

    def _retry_fetch_later(self) -> None:
        self._fetch_inflight = None
        self._retry_at = self._now + self.config.retry_backoff_ms

    def _fetch_timeout_ms(self) -> int:
        return self.config.fetch_timeout_ms + self.rng.randrange(self.config.fetch_timeout_jitter_ms + 1)

    def _leader_contact(self) -> None:
        self._last_leader_contact_ms = self._now
        if not self._leader_resigned:
            self._fetch_deadline = self._now + self._fetch_timeout_ms()

    def _on_fetch_response(self, response: FetchResponse) -> None:
        if response.correlation_id != self._fetch_inflight or response.src != self._fetch_target:
            return
        self._fetch_inflight = None
        if self._observe_epoch(response.epoch, response.leader_id, response.src):
            return
        if response.error is not ErrorCode.NONE or response.epoch != self.epoch:
            self._retry_fetch_later()
            return
        if self.role is not Role.FOLLOWER or response.src != self.leader_id:
            self._retry_fetch_later()
            return
        self._leader_contact()
        self._leader_round = max(self._leader_round, response.leader_round)
        if response.fetch_offset != self.view.end_offset:
            self._send_fetch()  # an answer to a position we no longer have
            return
        if response.diverging is not None:
            self._truncate(truncation_offset(self.view, response.diverging))
            self._send_fetch()
            return
        if response.snapshot_id is not None:
            if response.snapshot_id.offset > max(self.high_watermark, self.view.log_start_offset):
                self._snapshot_fetch = (response.snapshot_id, 0)
            self._send_fetch()
            return
        entries = response.entries
        if entries:
            if entries[0].offset != self.view.end_offset or any(
                e.offset != entries[0].offset + i for i, e in enumerate(entries)
            ):
                self._retry_fetch_later()
                return
            if entries[0].epoch < self.view.last_epoch or entries[-1].epoch > self.epoch:
                raise RaftInvariantError(f"fetched entries out of epoch order: {entries[0]} .. {entries[-1]}")
            self.view.append(list(entries))
            self._emit(AppendEntries(tuple(entries)))
            self._maybe_flush()
        if response.high_watermark >= 0:
            # our log matches the leader's up to its end now (the fetch was valid)
            self._quorum_hw = max(self._quorum_hw, min(response.high_watermark, self.view.end_offset))
            self._update_exposed_hw()
        self._send_fetch()

    def _on_fetch_snapshot_response(self, response: FetchSnapshotResponse) -> None:
        if response.correlation_id != self._fetch_inflight or response.src != self._fetch_target:
            return
        self._fetch_inflight = None
        if self._observe_epoch(response.epoch, response.leader_id, response.src):
            return
        fetch = self._snapshot_fetch
        if fetch is None or self.role is not Role.FOLLOWER or response.epoch != self.epoch:
            self._retry_fetch_later()
            return
        if response.error in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
            self._snapshot_fetch = None  # the leader moved on: ask again from our log end
            self._send_fetch()
            return
        if response.error is not ErrorCode.NONE:
            self._retry_fetch_later()
            return
        self._leader_contact()
        snapshot_id, position = fetch
        if response.snapshot_id != snapshot_id or response.position != position:
            self._send_fetch()
            return
        if response.data:
            self._emit(WriteSnapshotChunk(snapshot_id, position, response.data))
        position += len(response.data)
        if position < response.size and response.data:
            self._snapshot_fetch = (snapshot_id, position)
            self._send_fetch()
            return
        if position != response.size:
            raise RaftInvariantError(f"snapshot {snapshot_id}: {position} bytes of {response.size}")
        self._snapshot_fetch = None
        self.view.install(snapshot_id)
        self._emit(InstallSnapshot(snapshot_id))
        self._truncations += 1  # flushes in flight covered the old log
        self._flushed = snapshot_id.offset
        self._quorum_hw = max(self._quorum_hw, snapshot_id.offset)
        self.high_watermark = max(self.high_watermark, snapshot_id.offset)  # the state machine loaded it
        self._send_fetch()

    # ======================================================================================
    # election messages
    # ======================================================================================

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
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
        ):
            self._to_follower(epoch, leader_id)
            return True
        return False

    def _has_live_leader(self) -> bool:
        if self.role is Role.LEADER:
            return True
        if self.leader_id is None or self._leader_resigned or self._last_leader_contact_ms is None:
            return False
        if self.role not in (Role.FOLLOWER, Role.PROSPECTIVE):
            return False
        return self._now - self._last_leader_contact_ms < self.config.fetch_timeout_ms

    def _vote_log_ok(self, request: VoteRequest) -> bool:
        return log_is_up_to_date(request.last_epoch, request.end_offset, self.view.last_epoch, self.view.end_offset)

    def _on_vote_request(self, request: VoteRequest) -> None:
        def answer(granted: bool, error: ErrorCode = ErrorCode.NONE) -> None:
            self._send(
                VoteResponse(
                    self.cluster_id,
                    self.node_id,
                    request.src,
                    request.correlation_id,
                    self.epoch,
                    self.leader_id,
                    granted,
                    request.pre_vote,
                    error,
                )
            )

        if not self.is_voter or request.src not in self.voters:
            answer(False, ErrorCode.INCONSISTENT_VOTER_SET)
            return
        if request.pre_vote:
            granted = can_grant_prevote(
                candidate_epoch=request.candidate_epoch,
                epoch=self.epoch,
                log_ok=self._vote_log_ok(request),
                is_leader=self.role is Role.LEADER,
                has_live_leader=self._has_live_leader(),
            )
            answer(granted)
            return
        if request.candidate_epoch < self.epoch:
            answer(False)
            return
        if request.candidate_epoch > self.epoch:
            self._to_unattached(request.candidate_epoch)
        granted = can_grant_vote(
            candidate_id=request.src,
            candidate_epoch=request.candidate_epoch,
            epoch=self.epoch,
            voted_for=self.voted_for,
            leader_id=self.leader_id,
            log_ok=self._vote_log_ok(request),
        ) and self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
        if granted and self.voted_for is None:
            was_unattached = self.role is Role.UNATTACHED
            self._leave_role()
            self.role = Role.UNATTACHED
            self._set_state(self.epoch, request.src, None)  # persisted before the answer leaves
            self._arm_unattached()
            if not was_unattached:
                self._emit(RoleChanged(self.role, self.epoch, None))
        answer(granted)

    def _on_vote_response(self, response: VoteResponse) -> None:
        if response.src not in self.voters:
            return
        if self._observe_epoch(response.epoch, response.leader_id, response.src):
            return
        tally = self._tally
        if tally is None or response.correlation_id != self._election_round:
            return
        if response.pre_vote != (self.role is Role.PROSPECTIVE):
            return
        if not response.pre_vote and response.epoch != self.epoch:
            return
        tally.record(response.src, response.granted)
        if tally.won:
            self._election_won()
        elif tally.lost:
            self._election_lost()

    def _on_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> None:
        if request.src not in self.voters or request.leader_id != request.src:
            return
        if request.epoch >= self.epoch and not (
            self.role is Role.FOLLOWER and self.leader_id == request.src and self.epoch == request.epoch
        ):
            if request.epoch == self.epoch and self.role in (Role.LEADER, Role.RESIGNED):
                raise RaftInvariantError(f"epoch {self.epoch} claimed by {request.src} and {self.node_id}")
            self._to_follower(request.epoch, request.src)
        error = ErrorCode.FENCED_LEADER_EPOCH if request.epoch < self.epoch else ErrorCode.NONE
        self._send(
            BeginQuorumEpochResponse(
                self.cluster_id,
                self.node_id,
                request.src,
                request.correlation_id,
                self.epoch,
                self.leader_id,
                error,
            )
        )

    def _on_begin_quorum_epoch_response(self, response: BeginQuorumEpochResponse) -> None:
        if self._observe_epoch(response.epoch, response.leader_id, response.src):
            return
        leader = self._leader
        if (
            leader is not None
            and response.epoch == self.epoch
            and response.error is ErrorCode.NONE
            and response.src in leader.progress
        ):
            leader.progress[response.src].knows_epoch = True

    def _send_end_quorum_epoch(self) -> None:
        for voter in sorted(self._end_pending):
            self._send(
                EndQuorumEpochRequest(
                    self.cluster_id,
                    self.node_id,
                    voter,
                    0,
                    self.epoch,
                    self.node_id,
                    self._end_successors,
                )
            )
        self._retry_at = self._now + self.config.request_timeout_ms

    def _on_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> None:
        if request.src not in self.voters or request.leader_id != request.src:
            return
        if request.epoch > self.epoch:
            self._to_follower(request.epoch, request.src)
        if request.epoch == self.epoch and self.role is Role.FOLLOWER and self.leader_id == request.src:
            self._leader_resigned = True  # pre-votes are now granted: the leader is gone
            successors = request.preferred_successors
            if self.node_id in successors:
                wait = successor_backoff_ms(self.config, successors.index(self.node_id))
            else:
                wait = election_timeout_ms(self.config, self.rng)
            self._fetch_deadline = self._now + wait
        self._send(
            EndQuorumEpochResponse(
                self.cluster_id,
                self.node_id,
                request.src,
                request.correlation_id,
                self.epoch,
                self.leader_id,
            )
        )

    def _on_end_quorum_epoch_response(self, response: EndQuorumEpochResponse) -> None:
        if self._observe_epoch(response.epoch, response.leader_id, response.src):
            return
        self._end_pending.discard(response.src)


_HANDLERS = {
    VoteRequest: RaftNode._on_vote_request,
    VoteResponse: RaftNode._on_vote_response,
    BeginQuorumEpochRequest: RaftNode._on_begin_quorum_epoch,
    BeginQuorumEpochResponse: RaftNode._on_begin_quorum_epoch_response,
    EndQuorumEpochRequest: RaftNode._on_end_quorum_epoch,
    EndQuorumEpochResponse: RaftNode._on_end_quorum_epoch_response,
    FetchRequest: RaftNode._on_fetch_request,
    FetchResponse: RaftNode._on_fetch_response,
    FetchSnapshotRequest: RaftNode._on_fetch_snapshot_request,
    FetchSnapshotResponse: RaftNode._on_fetch_snapshot_response,
}
