"""Raft roles as objects: one per role, holding only that role's state (as Kafka's EpochState).

`RaftNode` (node.py) is the facade. It owns what outlives a role (the durable quorum
state, the log view, flushes, the high watermark), applies the epoch rule to every
message before a role sees it, and replaces the role object on a transition, persisting
the quorum state first. A role object decides what its role does on `tick` and on the
messages only that role acts on; it reaches the log and the outbox through the node.
Observers (node ids outside the voter set) are only ever `Unattached` or `Follower`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import AppendEntries, AppendResolved, ReadResolved, WriteSnapshotChunk
from kraftpy.raft.election import VoteTally, election_timeout_ms, successor_backoff_ms
from kraftpy.raft.leader import LeaderState, ParkedFetch
from kraftpy.raft.log import Entry, FetchVerdict, OffsetAndEpoch, truncation_offset, validate_fetch
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Role

if TYPE_CHECKING:
    from kraftpy.raft.node import RaftNode


NEVER = 1 << 62  # a deadline that never comes


class RaftInvariantError(AssertionError):
    """The core was asked to do something that would break Raft's safety (a bug somewhere)."""


@dataclass(slots=True)
class RoleState:
    """What every role answers; a role overrides the hooks it acts on."""

    role: ClassVar[Role]
    seeks_leader: ClassVar[bool] = False  # follows a leader of its epoch that any answer names
    grants_votes: ClassVar[bool] = False  # may grant a real vote in its epoch
    names_leader: ClassVar[bool] = False  # tells the leader it knows when refusing a fetch

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        """The times at which `tick` has something to do (None: nothing)."""
        return []

    def tick(self, node: RaftNode, now_ms: int) -> None:
        pass

    def has_live_leader(self, node: RaftNode) -> bool:
        """Whether a pre-vote must be refused because a leader is known to be alive."""
        return False

    def on_fetch_request(self, node: RaftNode, request: FetchRequest) -> None:
        node._fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def on_fetch_snapshot_request(self, node: RaftNode, request: FetchSnapshotRequest) -> None:
        node._snapshot_answer(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def on_fetch_response(self, node: RaftNode, response: FetchResponse) -> None:
        pass

    def on_fetch_snapshot_response(self, node: RaftNode, response: FetchSnapshotResponse) -> None:
        pass

    def on_vote_response(self, node: RaftNode, response: VoteResponse) -> None:
        pass

    def on_begin_quorum_epoch_response(self, node: RaftNode, response: BeginQuorumEpochResponse) -> None:
        pass

    def on_end_quorum_epoch(self, node: RaftNode, request: EndQuorumEpochRequest) -> None:
        pass

    def on_end_quorum_epoch_response(self, node: RaftNode, response: EndQuorumEpochResponse) -> None:
        pass


# ==========================================================================================
# fetching roles: a follower, and an observer looking for the leader
# ==========================================================================================


@dataclass(slots=True)
class Fetching(RoleState):
    """One fetch (or snapshot fetch) in flight at a time, retried at `retry_at_ms`."""

    retry_at_ms: int | None = None
    fetch_inflight: int | None = None  # the correlation id of the request in flight
    fetch_target: int | None = None
    snapshot_fetch: tuple[OffsetAndEpoch, int] | None = None  # (id, next position); a follower's

    def claims(self, response: FetchResponse | FetchSnapshotResponse) -> bool:
        """Whether `response` answers the request in flight (then it is in flight no more)."""
        if response.correlation_id != self.fetch_inflight or response.src != self.fetch_target:
            return False
        self.fetch_inflight = None
        return True

    def fetch_target_for(self, node: RaftNode) -> int | None:
        return None

    def send_fetch(self, node: RaftNode) -> None:
        """Fetch (or fetch the snapshot) unless a request is in flight. A voter fetches only
        from a durable position, because its fetch offset acknowledges what is below it."""
        if self.fetch_inflight is not None:
            return
        target = self.fetch_target_for(node)
        if target is None:
            return
        config = node.config
        if self.snapshot_fetch is not None:
            snapshot_id, position = self.snapshot_fetch
            self.fetch_inflight = node._correlation()
            self.fetch_target = target
            node._request(
                FetchSnapshotRequest,
                target,
                self.fetch_inflight,
                epoch=node.epoch,
                snapshot_id=snapshot_id,
                position=position,
                max_bytes=config.snapshot_chunk_bytes,
            )
            self.retry_at_ms = node._now + config.request_timeout_ms
            return
        view = node.view
        if node.is_voter and node._flushed < view.end_offset:
            node._maybe_flush()  # fetched again once on_flushed reports it
            self.retry_at_ms = None
            return
        self.fetch_inflight = node._correlation()
        self.fetch_target = target
        node._request(
            FetchRequest,
            target,
            self.fetch_inflight,
            epoch=node.epoch,
            fetch_offset=view.end_offset,
            last_fetched_epoch=view.last_epoch,
            max_wait_ms=config.fetch_max_wait_ms,
            leader_round=node._leader_round,
        )
        self.retry_at_ms = node._now + config.fetch_max_wait_ms + config.request_timeout_ms

    def retry_later(self, node: RaftNode) -> None:
        self.fetch_inflight = None
        self.retry_at_ms = node._now + node.config.retry_backoff_ms

    def resend_due(self, node: RaftNode, now_ms: int) -> None:
        if self.retry_at_ms is not None and now_ms >= self.retry_at_ms:
            self.fetch_inflight = None
            node._send_fetch()

    def on_fetch_response(self, node: RaftNode, response: FetchResponse) -> None:
        self.retry_later(node)

    def on_fetch_snapshot_response(self, node: RaftNode, response: FetchSnapshotResponse) -> None:
        self.retry_later(node)


@dataclass(slots=True)
class Unattached(Fetching):
    """Knows the epoch, no leader yet (may have voted). A voter waits for its election
    timeout; an observer fetches from the voters in turn to find the leader."""

    role: ClassVar[Role] = Role.UNATTACHED
    seeks_leader: ClassVar[bool] = True
    grants_votes: ClassVar[bool] = True
    election_deadline_ms: int | None = None

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        return [self.election_deadline_ms, self.retry_at_ms]

    def fetch_target_for(self, node: RaftNode) -> int | None:
        if node.is_voter:
            return None
        ordered = sorted(node.voters)
        target = ordered[node._discovery_index % len(ordered)]
        node._discovery_index += 1
        return target

    def tick(self, node: RaftNode, now_ms: int) -> None:
        if node.is_voter:
            if self.election_deadline_ms is not None and now_ms >= self.election_deadline_ms:
                node._to_prospective()
        else:
            self.resend_due(node, now_ms)


@dataclass(slots=True)
class Follower(Fetching):
    """Knows the leader of its epoch and fetches from it; `fetch_deadline_ms` is when the
    leader counts as gone (sooner after its EndQuorumEpoch)."""

    role: ClassVar[Role] = Role.FOLLOWER
    names_leader: ClassVar[bool] = True
    fetch_deadline_ms: int | None = None

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        return [self.fetch_deadline_ms, self.retry_at_ms]

    def fetch_target_for(self, node: RaftNode) -> int | None:
        return node.leader_id

    def has_live_leader(self, node: RaftNode) -> bool:
        return node._leader_recently_heard()

    def tick(self, node: RaftNode, now_ms: int) -> None:
        if self.fetch_deadline_ms is not None and now_ms >= self.fetch_deadline_ms:
            if node.is_voter:
                node._to_prospective()
            else:
                node._to_unattached(node.epoch, node.voted_for)
        else:
            self.resend_due(node, now_ms)

    def leader_contact(self, node: RaftNode) -> None:
        node._last_leader_contact_ms = node._now
        if not node._leader_resigned:
            self.fetch_deadline_ms = node._now + node._fetch_timeout_ms()

    def on_fetch_response(self, node: RaftNode, response: FetchResponse) -> None:
        if response.error is not ErrorCode.NONE or response.epoch != node.epoch or response.src != node.leader_id:
            self.retry_later(node)
            return
        self.leader_contact(node)
        node._leader_round = max(node._leader_round, response.leader_round)
        view = node.view
        if response.fetch_offset != view.end_offset:
            node._send_fetch()  # an answer to a position we no longer have
            return
        if response.diverging is not None:
            node._truncate(truncation_offset(view, response.diverging))
            node._send_fetch()
            return
        if response.snapshot_id is not None:
            if response.snapshot_id.offset > max(node.high_watermark, view.log_start_offset):
                self.snapshot_fetch = (response.snapshot_id, 0)
            node._send_fetch()
            return
        entries = response.entries
        if entries:
            if entries[0].offset != view.end_offset or any(
                e.offset != entries[0].offset + i for i, e in enumerate(entries)
            ):
                self.retry_later(node)
                return
            if entries[0].epoch < view.last_epoch or entries[-1].epoch > node.epoch:
                raise RaftInvariantError(f"fetched entries out of epoch order: {entries[0]} .. {entries[-1]}")
            view.append(list(entries))
            node._emit(AppendEntries(tuple(entries)))
            node._maybe_flush()
        if response.high_watermark >= 0:
            # our log matches the leader's up to its end now (the fetch was valid)
            node._quorum_hw = max(node._quorum_hw, min(response.high_watermark, view.end_offset))
            node._update_exposed_hw()
        node._send_fetch()

    def on_fetch_snapshot_response(self, node: RaftNode, response: FetchSnapshotResponse) -> None:
        fetch = self.snapshot_fetch
        if fetch is None or response.epoch != node.epoch:
            self.retry_later(node)
            return
        if response.error in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
            self.snapshot_fetch = None  # the leader moved on: ask again from our log end
            node._send_fetch()
            return
        if response.error is not ErrorCode.NONE:
            self.retry_later(node)
            return
        self.leader_contact(node)
        snapshot_id, position = fetch
        if response.snapshot_id != snapshot_id or response.position != position:
            node._send_fetch()
            return
        if response.data:
            node._emit(WriteSnapshotChunk(snapshot_id, position, response.data))
        position += len(response.data)
        if position < response.size and response.data:
            self.snapshot_fetch = (snapshot_id, position)
            node._send_fetch()
            return
        if position != response.size:
            raise RaftInvariantError(f"snapshot {snapshot_id}: {position} bytes of {response.size}")
        self.snapshot_fetch = None
        node._install_snapshot(snapshot_id)
        node._send_fetch()

    def on_end_quorum_epoch(self, node: RaftNode, request: EndQuorumEpochRequest) -> None:
        if request.epoch != node.epoch or node.leader_id != request.src:
            return
        node._leader_resigned = True  # pre-votes are now granted: the leader is gone
        successors = request.preferred_successors
        if node.node_id in successors:
            wait = successor_backoff_ms(node.config, successors.index(node.node_id))
        else:
            wait = election_timeout_ms(node.config, node.rng)
        self.fetch_deadline_ms = node._now + wait


# ==========================================================================================
# elections
# ==========================================================================================


@dataclass(slots=True)
class Election(RoleState):
    """One round of votes (pre-vote or real), resent at `retry_at_ms` until the round ends;
    a fresh pre-vote round starts at `election_deadline_ms` (split vote or silence)."""

    election_deadline_ms: int | None = None
    retry_at_ms: int | None = None
    round: int = 0  # the correlation id of this round's requests
    tally: VoteTally | None = None
    seeks_leader: ClassVar[bool] = True

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        return [self.election_deadline_ms, self.retry_at_ms]

    def tick(self, node: RaftNode, now_ms: int) -> None:
        if self.election_deadline_ms is not None and now_ms >= self.election_deadline_ms:
            node._to_prospective()
        elif self.retry_at_ms is not None and now_ms >= self.retry_at_ms:
            self.send_votes(node)

    def start_round(self, node: RaftNode) -> None:
        """Vote for itself, then ask the others (a single voter wins at once)."""
        self.round = node._correlation()
        self.tally = VoteTally(node.voters)
        self.tally.record(node.node_id, True)
        if self.tally.won:
            node._election_won()
            return
        self.send_votes(node)

    def send_votes(self, node: RaftNode) -> None:
        """Ask the voters that have not answered this round."""
        if self.tally is None:
            return
        pre_vote = self.role is Role.PROSPECTIVE
        view = node.view
        for voter in self.tally.unanswered():
            node._request(
                VoteRequest,
                voter,
                self.round,
                candidate_epoch=node.epoch + 1 if pre_vote else node.epoch,
                last_epoch=view.last_epoch,
                end_offset=view.end_offset,
                pre_vote=pre_vote,
            )
        self.retry_at_ms = node._now + node.config.request_timeout_ms

    def on_vote_response(self, node: RaftNode, response: VoteResponse) -> None:
        tally = self.tally
        if response.src not in node.voters or tally is None or response.correlation_id != self.round:
            return
        if response.pre_vote != (self.role is Role.PROSPECTIVE):
            return
        if not response.pre_vote and response.epoch != node.epoch:
            return
        tally.record(response.src, response.granted)
        if tally.won:
            node._election_won()
        elif tally.lost:
            node._election_lost()


@dataclass(slots=True)
class Prospective(Election):
    """Running a pre-vote, epoch not bumped; still knows (and may fall back to) the leader
    it followed, if any."""

    role: ClassVar[Role] = Role.PROSPECTIVE
    grants_votes: ClassVar[bool] = True

    def has_live_leader(self, node: RaftNode) -> bool:
        return node._leader_recently_heard()


@dataclass(slots=True)
class Candidate(Election):
    """Bumped the epoch and voted for itself; asking for votes."""

    role: ClassVar[Role] = Role.CANDIDATE


# ==========================================================================================
# leadership
# ==========================================================================================


@dataclass(slots=True)
class Leader(RoleState):
    """Leads its epoch; its bookkeeping (progress, commit rule, proposals) is `state`."""

    state: LeaderState
    role: ClassVar[Role] = Role.LEADER
    names_leader: ClassVar[bool] = True

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        leader = self.state
        times: list[int | None] = [leader.linger_deadline_ms, leader.begin_resend_ms]
        times.append(leader.check_quorum_deadline_ms(node.config.check_quorum_timeout_ms))
        times.extend(p.deadline_ms for p in leader.parked.values())
        if leader.appends:
            times.append(leader.appends[0].deadline_ms)
        if leader.reads:
            times.append(leader.reads[0].deadline_ms)
        return times

    def has_live_leader(self, node: RaftNode) -> bool:
        return True

    def tick(self, node: RaftNode, now_ms: int) -> None:
        leader = self.state
        if not leader.quorum_alive(now_ms, node.config.check_quorum_timeout_ms):
            node._to_resigned(())  # check-quorum: a majority has not fetched from us lately
            return
        if leader.linger_deadline_ms is not None and now_ms >= leader.linger_deadline_ms:
            node._drain_accumulator()
        for replica, parked in list(leader.parked.items()):
            if now_ms >= parked.deadline_ms:
                self.answer_parked(node, replica)
        while leader.appends and leader.appends[0].deadline_ms <= now_ms:
            pending = leader.appends.popleft()
            # Held in the accumulator is as good as appended: the linger appends it all the same, so
            # the caller must not learn that it never took effect (AppendResolved.appended).
            appended = pending.last_offset < node.view.end_offset + len(leader.accumulated)
            node._emit(
                AppendResolved(
                    leader.epoch,
                    pending.base_offset,
                    pending.last_offset,
                    error=ErrorCode.REQUEST_TIMED_OUT,
                    leader_id=node.node_id,
                    appended=appended,
                )
            )
        while leader.reads and leader.reads[0].deadline_ms <= now_ms:
            read = leader.reads.popleft()
            node._emit(ReadResolved(read.read_id, -1, ErrorCode.REQUEST_TIMED_OUT, node.node_id))
        if now_ms >= leader.begin_resend_ms:
            self.send_begin_quorum_epoch(node)

    @property
    def high_watermark(self) -> int:
        """As fetch answers carry it: -1 until the first entry of the epoch commits."""
        hw = self.state.high_watermark
        return -1 if hw is None else hw

    def send_begin_quorum_epoch(self, node: RaftNode) -> None:
        """Tell the voters that have not fetched in this epoch yet; resent until all have."""
        leader = self.state
        for voter, progress in sorted(leader.progress.items()):
            if not progress.knows_epoch:
                node._request(BeginQuorumEpochRequest, voter, epoch=node.epoch, leader_id=node.node_id)
        leader.begin_resend_ms = node._now + node.config.request_timeout_ms
        if all(p.knows_epoch for p in leader.progress.values()):
            leader.begin_resend_ms = NEVER

    def answer_parked(self, node: RaftNode, replica: int) -> None:
        parked = self.state.parked.pop(replica, None)
        if parked is not None:
            self.answer_fetch(node, parked.request)

    def answer_fetch(self, node: RaftNode, request: FetchRequest) -> None:
        """Answer a fetch already found valid (now or when it was parked)."""
        view = node.view
        verdict, position = validate_fetch(view, request.fetch_offset, request.last_fetched_epoch)
        entries: tuple[Entry, ...] = ()
        if verdict is FetchVerdict.VALID and request.fetch_offset < view.end_offset:
            entries = tuple(view.read(request.fetch_offset, node.config.max_fetch_bytes))
        hw = self.high_watermark
        self.state.replica(request.src).hw_sent = hw
        node._reply(
            request,
            FetchResponse,
            leader_id=node.node_id,
            fetch_offset=request.fetch_offset,
            high_watermark=hw,
            entries=entries,
            diverging=position if verdict is FetchVerdict.DIVERGING else None,
            snapshot_id=position if verdict is FetchVerdict.SNAPSHOT else None,
            leader_round=self.state.round,
        )

    def on_fetch_request(self, node: RaftNode, request: FetchRequest) -> None:
        if request.epoch > node.epoch:
            node._fetch_error(request, ErrorCode.UNKNOWN_LEADER_EPOCH)  # an observer ahead of us
            return
        if request.fetch_offset < 0 or not 0 <= request.last_fetched_epoch <= node.epoch:
            node._fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        if request.src == node.node_id:
            node._fetch_error(request, ErrorCode.INVALID_REQUEST)
            return
        leader = self.state
        leader.on_fetch(request.src, node._now, request.leader_round)
        verdict, position = validate_fetch(node.view, request.fetch_offset, request.last_fetched_epoch)
        if verdict is FetchVerdict.VALID:
            leader.acknowledge(request.src, request.fetch_offset)
            if request.src in node.voters and leader.maybe_advance_high_watermark():
                node._on_leader_hw_advanced()
            leader.parked.pop(request.src, None)
            progress = leader.replica(request.src)
            hw = -1 if leader.high_watermark is None else leader.high_watermark
            hw_news = progress.hw_sent != hw
            linger = node.config.fetch_high_watermark_linger_ms
            no_entries = request.fetch_offset >= node.view.end_offset
            if (
                no_entries
                and not (hw_news and linger == 0)
                and request.max_wait_ms > 0
                and request.leader_round >= leader.round
            ):
                wait = min(request.max_wait_ms, node.config.fetch_max_wait_ms)
                if hw_news:
                    wait = min(wait, linger)  # see fetch_high_watermark_linger_ms
                leader.parked[request.src] = ParkedFetch(request, node._now + wait)
                node._check_reads()  # a parked fetch still confirms this leadership for reads
                return
            self.answer_fetch(node, request)
        else:
            node._check_reads()
            node._reply(
                request,
                FetchResponse,
                leader_id=node.node_id,
                fetch_offset=request.fetch_offset,
                high_watermark=self.high_watermark,
                diverging=position if verdict is FetchVerdict.DIVERGING else None,
                snapshot_id=position if verdict is FetchVerdict.SNAPSHOT else None,
                leader_round=leader.round,
            )
        node._check_reads()

    def on_fetch_snapshot_request(self, node: RaftNode, request: FetchSnapshotRequest) -> None:
        if request.epoch != node.epoch:
            node._snapshot_answer(request, ErrorCode.UNKNOWN_LEADER_EPOCH)  # lower ones are fenced earlier
            return
        self.state.on_fetch(request.src, node._now, 0)
        view = node.view
        snapshot = view.latest_snapshot()
        if snapshot is None or snapshot != request.snapshot_id:
            node._snapshot_answer(request, ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        size = view.snapshot_size(snapshot)
        if size is None:
            node._snapshot_answer(request, ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if not 0 <= request.position <= size:
            node._snapshot_answer(request, ErrorCode.POSITION_OUT_OF_RANGE)
            return
        chunk = min(max(request.max_bytes, 1), node.config.snapshot_chunk_bytes)
        data = view.read_snapshot(snapshot, request.position, chunk)
        node._snapshot_answer(
            request, ErrorCode.NONE, snapshot_id=snapshot, position=request.position, size=size, data=data
        )

    def on_begin_quorum_epoch_response(self, node: RaftNode, response: BeginQuorumEpochResponse) -> None:
        progress = self.state.progress
        if response.epoch == node.epoch and response.error is ErrorCode.NONE and response.src in progress:
            progress[response.src].knows_epoch = True


@dataclass(slots=True)
class Resigned(RoleState):
    """Was leader of this epoch and never leads it again: tells the voters (EndQuorumEpoch,
    resent at `retry_at_ms` to those that have not answered) and waits for a new leader."""

    election_deadline_ms: int | None = None
    retry_at_ms: int | None = None
    end_successors: tuple[int, ...] = ()
    end_pending: set[int] = field(default_factory=set)
    role: ClassVar[Role] = Role.RESIGNED

    def deadlines_ms(self, node: RaftNode) -> list[int | None]:
        return [self.election_deadline_ms, self.retry_at_ms]

    def tick(self, node: RaftNode, now_ms: int) -> None:
        if self.election_deadline_ms is not None and now_ms >= self.election_deadline_ms:
            node._to_prospective()
        elif self.retry_at_ms is not None and now_ms >= self.retry_at_ms:
            if self.end_pending:
                self.send_end_quorum_epoch(node)
            else:
                self.retry_at_ms = None  # every voter has the EndQuorumEpoch

    def send_end_quorum_epoch(self, node: RaftNode) -> None:
        for voter in sorted(self.end_pending):
            node._request(
                EndQuorumEpochRequest,
                voter,
                epoch=node.epoch,
                leader_id=node.node_id,
                preferred_successors=self.end_successors,
            )
        self.retry_at_ms = node._now + node.config.request_timeout_ms

    def on_end_quorum_epoch_response(self, node: RaftNode, response: EndQuorumEpochResponse) -> None:
        self.end_pending.discard(response.src)
