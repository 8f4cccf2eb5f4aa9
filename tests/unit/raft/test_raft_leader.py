"""The leader's commit rule (with Raft's Figure 8 case), check-quorum, successors, and
how a leader node answers Fetch: entries, DivergingEpoch, parking until something is new."""

from __future__ import annotations

import dataclasses

import pytest

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import AppendResolved, CommitAdvanced, Send
from kraftpy.raft.leader import LeaderState, quorum_high_watermark
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch
from kraftpy.raft.messages import FetchRequest, FetchResponse, VoteResponse
from kraftpy.raft.quorum_state import QuorumState, Role
from tests.unit.raft.test_raft_support import CLUSTER, drain, make_log, make_node, sent


def test_quorum_high_watermark_is_the_majority_position() -> None:
    assert quorum_high_watermark([10, 7, 3], 3) == 7
    assert quorum_high_watermark([10, 7, 3, 3, 1], 5) == 3
    assert quorum_high_watermark([5], 1) == 5


def test_quorum_high_watermark_with_an_even_number_of_voters_needs_more_than_half() -> None:
    # With an odd count the median is the majority position from either end; with an even count
    # only the right end gives it: 7 is held by two of four voters, which is no majority.
    assert quorum_high_watermark([10, 7, 3, 1], 4) == 3
    assert quorum_high_watermark([1, 10, 3, 7], 4) == 3
    assert quorum_high_watermark([10, 7], 2) == 7
    assert quorum_high_watermark([4, 9], 2) == 4


def test_figure_8_old_epoch_entry_is_not_committed_by_counting() -> None:
    """Raft paper, Figure 8: S1 leads epoch 4 with an epoch-2 entry at offset 2 replicated to a
    majority. It must not commit offset 2 until its own epoch-4 entry (offset 3) is on a
    majority, or a leader of epoch 3 could still overwrite it."""
    leader = LeaderState(epoch=4, node_id=1, voters=frozenset({1, 2, 3, 4, 5}), epoch_start_offset=3, now_ms=0)
    leader.local_end_offset = 4  # [e1, e1, e2, e4(leader change)]
    leader.acknowledge(2, 3)  # S2 has the epoch-2 entry: offsets 0..2
    leader.acknowledge(3, 3)
    assert not leader.maybe_advance_high_watermark()
    assert leader.high_watermark is None, "a majority holds offset 2, yet it is not committed"
    leader.acknowledge(2, 4)
    assert not leader.maybe_advance_high_watermark()  # only S1, S2 hold the epoch-4 entry
    leader.acknowledge(3, 4)
    assert leader.maybe_advance_high_watermark()
    assert leader.high_watermark == 4  # both the old entry and the new one commit now


def test_high_watermark_never_goes_back() -> None:
    leader = LeaderState(epoch=2, node_id=1, voters=frozenset({1, 2, 3}), epoch_start_offset=0, now_ms=0)
    leader.local_end_offset = 5
    leader.acknowledge(2, 5)
    assert leader.maybe_advance_high_watermark() and leader.high_watermark == 5
    leader.acknowledge(2, 2)  # a late duplicate fetch: acknowledged offsets never go back
    assert leader.progress[2].end_offset == 5
    assert not leader.maybe_advance_high_watermark() and leader.high_watermark == 5


def test_check_quorum_counts_recent_fetches_of_voters() -> None:
    leader = LeaderState(epoch=1, node_id=1, voters=frozenset({1, 2, 3}), epoch_start_offset=0, now_ms=0)
    assert leader.quorum_alive(2999, 3000)
    assert not leader.quorum_alive(3000, 3000)
    leader.on_fetch(3, 2500, 0)
    assert leader.quorum_alive(5499, 3000)
    assert leader.check_quorum_deadline_ms(3000) == 5500
    leader.on_fetch(9, 5400, 0)  # an observer does not keep the leader alive
    assert not leader.quorum_alive(5500, 3000)


def test_a_single_voter_leader_is_its_own_quorum_forever() -> None:
    leader = LeaderState(epoch=1, node_id=1, voters=frozenset({1}), epoch_start_offset=0, now_ms=0)
    assert leader.quorum_alive(10**9, 3000)
    assert leader.check_quorum_deadline_ms(3000) == 1 << 62


def test_preferred_successors_most_caught_up_first() -> None:
    leader = LeaderState(epoch=1, node_id=1, voters=frozenset({1, 2, 3, 4}), epoch_start_offset=0, now_ms=0)
    leader.acknowledge(2, 5)
    leader.acknowledge(3, 9)
    leader.acknowledge(4, 9)
    assert leader.preferred_successors() == (3, 4, 2)


def elected(voters=(1, 2, 3), log=None, **config):
    """Node 1 elected leader of epoch 1 (pre-vote, then vote), leader-change entry flushed."""
    state = QuorumState(log.last_epoch) if log is not None else None
    node, log = make_node(1, voters, log=log, state=state, **config)
    node.tick(5000)
    drain(node, log, now_ms=5000)
    epoch = node.epoch
    for voter in voters[1:]:
        node.handle(VoteResponse(CLUSTER, voter, 1, node._election_round, epoch, None, True, True), 5000)
        drain(node, log, now_ms=5000)
    actions = []
    for voter in voters[1:]:
        node.handle(VoteResponse(CLUSTER, voter, 1, node._election_round, node.epoch, None, True, False), 5000)
        actions += drain(node, log, now_ms=5000)
    assert node.role is Role.LEADER
    return node, log, actions


def fetch(node, src, offset, epoch, now, corr=1, wait=500):
    node.handle(FetchRequest(CLUSTER, src, 1, corr, node.epoch, offset, epoch, wait), now)


def test_leader_first_entry_is_leader_change_and_commits_first() -> None:
    node, log, _ = elected(log=make_log(1, 1))
    first = log.entries()[2]
    assert first.kind is EntryKind.LEADER_CHANGE and first.epoch == node.epoch == 2
    assert not node.leader_ready
    fetch(node, 2, 2, 1, 5001)  # follower 2 has the old entries only: no commit yet
    actions = drain(node, log, now_ms=5001)
    assert not [a for a in actions if isinstance(a, CommitAdvanced)]
    fetch(node, 2, 3, 2, 5002, corr=2)
    actions = drain(node, log, now_ms=5002)
    assert CommitAdvanced(3) in actions
    assert node.leader_ready


def test_fetch_answers_diverging_epoch() -> None:
    node, log, _ = elected(log=make_log(1, 1, 1))
    assert node.epoch == 2
    fetch(node, 2, 5, 1, 5001)  # the follower has epoch-1 entries up to 5, the leader up to 3
    (response,) = sent(drain(node, log, now_ms=5001), FetchResponse)
    assert response.diverging == OffsetAndEpoch(3, 1)
    assert response.entries == ()


def test_fetch_parks_until_new_entries_or_the_wait_ends() -> None:
    node, log, _ = elected()
    fetch(node, 2, 1, 1, 5001)  # commits offset 0; its only news is the high watermark: held 5 ms
    assert sent(drain(node, log, now_ms=5001), FetchResponse) == []
    node.tick(5006)
    (first,) = sent(drain(node, log, now_ms=5006), FetchResponse)
    assert first.high_watermark == 1
    fetch(node, 2, 1, 1, 5002, corr=2)
    assert sent(drain(node, log, now_ms=5002), FetchResponse) == [], "nothing new: parked"
    epoch, base, last = node.append([b"hello"], 5003)
    assert (epoch, base, last) == (1, 1, 1)
    assert sent(drain(node, log, now_ms=5003), FetchResponse) == []  # lingering (25 ms)
    node.tick(5028)
    (answer,) = sent(drain(node, log, now_ms=5028), FetchResponse)
    assert [e.data for e in answer.entries] == [b"hello"]
    fetch(node, 2, 2, 1, 5030, corr=3)  # commits "hello"
    actions = drain(node, log, now_ms=5030)
    assert AppendResolved(1, 1, 1) in actions
    fetch(node, 2, 2, 1, 5031, corr=4)
    assert sent(drain(node, log, now_ms=5031), FetchResponse) == []
    assert node.next_deadline_ms() <= 5031 + 500
    node.tick(5531)
    (empty,) = sent(drain(node, log, now_ms=5531), FetchResponse)
    assert empty.entries == () and empty.error is ErrorCode.NONE


def test_a_commit_rides_on_the_next_append_within_the_linger() -> None:
    """The fetch that commits an entry is held (fetch_high_watermark_linger_ms) rather than
    answered only to carry the new high watermark; an append within the linger answers it with
    the entries and the high watermark together: one fetch per follower per commit."""
    node, log, _ = elected(append_linger_ms=0)
    fetch(node, 2, 1, 1, 5001)
    assert sent(drain(node, log, now_ms=5001), FetchResponse) == []
    assert node.next_deadline_ms() == 5006  # the linger bounds how late the follower learns the commit
    node.append([b"next"], 5002)
    (answer,) = sent(drain(node, log, now_ms=5002), FetchResponse)
    assert [e.data for e in answer.entries] == [b"next"] and answer.high_watermark == 1


def test_a_new_batch_reaches_parked_fetches_before_the_leader_writes_it() -> None:
    """The followers' round trip is the commit's critical path; the leader's own write and fsync
    run beside it. So the answers carrying a new batch come before its AppendEntries and Flush,
    and the leader still counts its own copy only once flushed."""
    node, log, _ = elected(append_linger_ms=0)
    fetch(node, 2, 1, 1, 5001)
    fetch(node, 3, 1, 1, 5001, corr=2)
    drain(node, log, now_ms=5001)
    node.tick(5006)
    drain(node, log, now_ms=5006)  # the commit of offset 0 answered; both fetch again and park
    fetch(node, 2, 1, 1, 5007, corr=3)
    fetch(node, 3, 1, 1, 5007, corr=4)
    assert sent(drain(node, log, now_ms=5007), FetchResponse) == []
    node.append([b"next"], 5008)
    actions = node.take_actions()
    kinds = [type(a).__name__ if not isinstance(a, Send) else "Send" for a in actions]
    assert kinds == ["Send", "Send", "AppendEntries", "Flush"], kinds
    assert all([e.data for e in m.entries] == [b"next"] for m in sent(actions, FetchResponse))
    for action in actions:
        log.apply(action)
    fetch(node, 2, 2, 1, 5009, corr=5)  # one follower has it, the leader has not flushed it
    assert not [a for a in drain(node, log, flush=False, now_ms=5009) if isinstance(a, CommitAdvanced)]
    log.flush(2)
    node.on_flushed(2, 5010)
    assert CommitAdvanced(2) in drain(node, log, now_ms=5010)


def test_a_parked_fetch_learns_a_commit_within_the_linger() -> None:
    """Follower 3 is parked with nothing new; follower 2's fetch commits an entry. Follower 3
    hears the new high watermark within the linger, not at the end of its max wait."""
    node, log, _ = elected()
    fetch(node, 3, 0, 0, 5001)  # behind: answered at once with the leader-change entry
    drain(node, log, now_ms=5001)
    fetch(node, 3, 1, 1, 5002, corr=2)  # no news for it after that: parked for the max wait
    assert sent(drain(node, log, now_ms=5002), FetchResponse) == []
    fetch(node, 2, 1, 1, 5003)  # commits offset 0
    assert sent(drain(node, log, now_ms=5003), FetchResponse) == []
    node.tick(5008)
    answers = sent(drain(node, log, now_ms=5008), FetchResponse)
    assert sorted((a.dst, a.high_watermark) for a in answers) == [(2, 1), (3, 1)]


def test_no_high_watermark_linger_answers_a_commit_at_once_as_kraft() -> None:
    node, log, _ = elected(fetch_high_watermark_linger_ms=0)
    fetch(node, 2, 1, 1, 5001)
    (answer,) = sent(drain(node, log, now_ms=5001), FetchResponse)
    assert answer.high_watermark == 1


def test_leader_without_quorum_resigns() -> None:
    node, log, _ = elected()
    node.tick(5000 + 3000)
    drain(node, log, now_ms=8000)
    assert node.role is Role.RESIGNED
    assert node._persisted == QuorumState(1, 1, 1), "its epoch stays; it never leads it again"


def test_append_on_a_follower_raises_not_leader_with_hint() -> None:
    import pytest

    from kraftpy.raft.node import NotLeaderError

    node, _ = make_node(2, state=QuorumState(3, None, 1))
    with pytest.raises(NotLeaderError) as info:
        node.append([b"x"], 0)
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert info.value.details == {"leader_id": 1, "epoch": 3}


def test_single_voter_commits_on_its_own_flush() -> None:
    node, log = make_node(1, (1,))
    node.tick(3000)
    drain(node, log, now_ms=3000)
    assert node.role is Role.LEADER and node.leader_ready
    node.append([b"a", b"b"], 3000)
    node.tick(3025)
    actions = drain(node, log, now_ms=3025)
    assert AppendResolved(1, 1, 2) in actions
    assert node.high_watermark == 3
    assert [e.data for e in log.entries()[1:]] == [b"a", b"b"]
    assert log.entries()[1] == Entry(1, 1, b"a")


def test_deposed_leader_fails_proposals_with_the_new_leader_hint() -> None:
    from kraftpy.raft.messages import BeginQuorumEpochRequest

    node, log, _ = elected()
    node.append([b"kept?"], 5001)
    node.tick(5026)  # appended (not committed)
    drain(node, log, now_ms=5026)
    node.append([b"never appended"], 5027)
    drain(node, log, now_ms=5027)
    node.handle(BeginQuorumEpochRequest(CLUSTER, 2, 1, 0, 2, 2), 5030)
    actions = drain(node, log, now_ms=5030)
    failed = [a for a in actions if isinstance(a, AppendResolved)]
    assert [(a.base_offset, a.error, a.leader_id, a.appended) for a in failed] == [
        (1, ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, True),  # may still commit under the new leader
        (2, ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, False),
    ]


def test_proposals_are_batched_by_linger_and_size() -> None:
    from kraftpy.raft.actions import AppendEntries

    node, log, _ = elected()
    node.append([b"a"], 5001)
    node.append([b"b", b"c"], 5010)
    assert not [a for a in drain(node, log, now_ms=5010) if isinstance(a, AppendEntries)]
    assert node.next_deadline_ms() == 5001 + 25
    node.tick(5026)
    (batch,) = [a for a in drain(node, log, now_ms=5026) if isinstance(a, AppendEntries)]
    assert [e.data for e in batch.entries] == [b"a", b"b", b"c"]

    small, small_log, _ = elected()
    small.config = dataclasses.replace(small.config, max_batch_bytes=100)
    small.append([b"x" * 40], 5001)
    small.append([b"y" * 40], 5002)  # 2 x (40 + 16) > 100: the first batch goes out now
    (first,) = [a for a in drain(small, small_log, now_ms=5002) if isinstance(a, AppendEntries)]
    assert [e.data for e in first.entries] == [b"x" * 40]


def test_held_proposals_share_one_batch_when_drained() -> None:
    """With no linger, `drain=False` holds proposals for `drain_proposals` (the shell's end of an
    event-loop turn): proposals made together go out as one batch; a default append goes at once."""
    from kraftpy.raft.actions import AppendEntries

    node, log, _ = elected(append_linger_ms=0)
    assert node.append([b"a"], 5001, drain=False) == (node.epoch, 1, 1)
    assert node.append([b"b", b"c"], 5001, drain=False) == (node.epoch, 2, 3)
    assert not [a for a in drain(node, log, now_ms=5001) if isinstance(a, AppendEntries)]
    assert node.next_deadline_ms() > 5001 + 25  # no timer drains them: the caller does
    node.drain_proposals(5001)
    (batch,) = [a for a in drain(node, log, now_ms=5001) if isinstance(a, AppendEntries)]
    assert [e.data for e in batch.entries] == [b"a", b"b", b"c"]
    node.drain_proposals(5002)  # nothing held: nothing appended
    assert not [a for a in drain(node, log, now_ms=5002) if isinstance(a, AppendEntries)]
    node.append([b"d"], 5003)
    (alone,) = [a for a in drain(node, log, now_ms=5003) if isinstance(a, AppendEntries)]
    assert [e.data for e in alone.entries] == [b"d"]


def test_proposal_times_out() -> None:
    node, log, _ = elected()
    node.config = dataclasses.replace(node.config, proposal_timeout_ms=1000)
    fetch(node, 2, 1, 1, 5001)  # one follower alive: keeps check-quorum happy
    drain(node, log, now_ms=5001)
    node.append([b"slow"], 5002)
    node.tick(5030)
    drain(node, log, now_ms=5030)
    node.tick(6002)
    failed = [a for a in drain(node, log, now_ms=6002) if isinstance(a, AppendResolved)]
    assert [(a.error, a.appended) for a in failed] == [(ErrorCode.REQUEST_TIMED_OUT, True)]


def test_a_proposal_that_times_out_while_held_for_the_linger_may_still_commit() -> None:
    # Timed out before the 25 ms linger appended it: it is appended afterwards all the same, so its
    # answer must not say it never took effect (a caller would record a write that happened as failed).
    node, log, _ = elected()
    node.config = dataclasses.replace(node.config, proposal_timeout_ms=10)
    fetch(node, 2, 1, 1, 5001)
    drain(node, log, now_ms=5001)
    node.append([b"held"], 5002)
    node.tick(5012)
    failed = [a for a in drain(node, log, now_ms=5012) if isinstance(a, AppendResolved)]
    assert [(a.error, a.appended) for a in failed] == [(ErrorCode.REQUEST_TIMED_OUT, True)]
    node.tick(5027)
    drain(node, log, now_ms=5027)
    assert log.entries()[-1].data == b"held", "the held proposal was appended after its timeout"


def test_uncommitted_backlog_is_bounded() -> None:
    import pytest

    from kraftpy.protocol.errors import KafkaError

    node, log, _ = elected()
    node.config = dataclasses.replace(node.config, max_uncommitted_bytes=100)
    node.append([b"x" * 30], 5001)  # 46 bytes
    node.append([b"y" * 30], 5002)  # 92 bytes
    with pytest.raises(KafkaError) as info:
        node.append([b"z" * 30], 5003)
    assert info.value.code is ErrorCode.NOT_ENOUGH_REPLICAS and info.value.retriable
    node.tick(5030)
    drain(node, log, now_ms=5030)
    fetch(node, 2, 3, 1, 5031)  # commits both: room again
    drain(node, log, now_ms=5031)
    assert node.append([b"z" * 30], 5032)[1] == 3


def test_a_fetch_of_an_older_epoch_is_fenced_and_told_who_leads() -> None:
    node, log, _ = elected(log=make_log(1, 1))
    node.handle(FetchRequest(CLUSTER, 2, 1, 7, node.epoch - 1, 2, 1, 500), 5001)
    (answer,) = sent(drain(node, log, now_ms=5001), FetchResponse)
    assert answer.error is ErrorCode.FENCED_LEADER_EPOCH and answer.epoch == node.epoch and answer.leader_id == 1


def test_begin_quorum_epoch_is_resent_only_to_voters_that_have_not_answered() -> None:
    from kraftpy.raft.messages import BeginQuorumEpochRequest, BeginQuorumEpochResponse

    node, log, actions = elected()
    assert sorted(m.dst for m in sent(actions, BeginQuorumEpochRequest)) == [2, 3]
    node.handle(BeginQuorumEpochResponse(CLUSTER, 2, 1, 0, node.epoch, 1), 5001)
    drain(node, log, now_ms=5001)
    resend_at = 5000 + node.config.request_timeout_ms
    node.tick(resend_at)
    assert [m.dst for m in sent(drain(node, log, now_ms=resend_at), BeginQuorumEpochRequest)] == [3]


@pytest.mark.parametrize(
    ("offset", "last_epoch"), [(-1, 0), (0, 5), (0, -1)], ids=["negative offset", "future epoch", "negative epoch"]
)
def test_a_fetch_with_an_impossible_position_is_an_invalid_request(offset: int, last_epoch: int) -> None:
    node, log, _ = elected()
    node.handle(FetchRequest(CLUSTER, 2, 1, 7, node.epoch, offset, last_epoch, 500), 5001)
    (answer,) = sent(drain(node, log, now_ms=5001), FetchResponse)
    assert answer.error is ErrorCode.INVALID_REQUEST
    assert node.state.state.progress[2].end_offset == 0, "an invalid fetch acknowledged something"


def test_a_fetch_at_the_log_end_waits_at_most_the_leaders_max_wait_and_not_at_all_when_asked() -> None:
    node, log, _ = elected()
    fetch(node, 2, 1, 1, 5001, corr=1, wait=500)  # acknowledges the leader-change entry: news, answered
    drain(node, log, now_ms=5001)
    fetch(node, 2, 1, 1, 5002, corr=2, wait=0)
    (answer,) = sent(drain(node, log, now_ms=5002), FetchResponse)
    assert answer.correlation_id == 2, "a fetch that asked not to wait was parked"
    fetch(node, 2, 1, 1, 5003, corr=3, wait=3_600_000)
    assert not sent(drain(node, log, now_ms=5003), FetchResponse)
    assert node.state.state.parked[2].deadline_ms == 5003 + node.config.fetch_max_wait_ms
