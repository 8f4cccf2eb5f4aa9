"""Commits from the member's side: auto-commit timing (virtual time), sync/async commits, committed(), close."""

from __future__ import annotations

from kraftpy.client.errors import KafkaTimeoutError
from kraftpy.client.group.assignors import make_assignors
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.client.group.errors import (
    LOCAL_COMMIT_REFUSALS,
    CommitFailedError,
    RebalanceInProgressError,
    RetriableCommitFailedError,
)
from kraftpy.client.group.membership import GroupMembership, MemberState
from kraftpy.client.group.membership_types import (
    GroupMembershipConfig,
    RunCommitCallback,
    SimpleAssignmentStore,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_group_membership_protocol import COORDINATOR, T0, T1, T2, Scripted, error
from tests.unit.client.test_group_membership_sim import Sim

E = ErrorCode
OK = {"error_code": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}


def committed_offsets(request) -> dict[TopicPartition, int]:
    return {
        TopicPartition(t["name"], p["partition_index"]): p["committed_offset"]
        for t in request.body["topics"]
        for p in t["partitions"]
    }


def test_auto_commit_runs_every_interval_from_poll_with_the_consumed_positions() -> None:
    s = Scripted(auto_commit_interval_ms=5_000, session_timeout_ms=60_000)  # heartbeats go unanswered here
    s.poll(1_000)
    s.stable()  # assigned at t=1000: the interval starts there
    s.store.consume(T0, 10)
    s.store.consume(T1, 20)
    s.poll(5_999)
    assert not s.has("offset_commit")
    s.poll(6_000)
    commit = s.take("offset_commit")
    assert committed_offsets(commit) == {T0: 10, T1: 20}
    s.answer(commit, OK)
    s.store.consume(T0, 11)
    s.poll(10_999)
    assert not s.has("offset_commit")
    s.poll(11_000)
    assert committed_offsets(s.take("offset_commit")) == {T0: 11, T1: 20}
    assert s.callbacks == []  # auto-commit is the consumer's business, not the application's


def test_a_failed_auto_commit_is_retried_after_the_backoff_not_the_interval() -> None:
    s = Scripted(auto_commit_interval_ms=5_000, retry_backoff_ms=100)
    s.stable()
    s.store.consume(T0, 10)
    s.poll(5_000)
    s.answer(s.take("offset_commit"), error(E.COORDINATOR_LOAD_IN_PROGRESS))
    s.poll(5_099)
    assert not s.has("offset_commit")
    s.poll(5_100)
    assert committed_offsets(s.take("offset_commit")) == {T0: 10}


def test_no_auto_commit_when_disabled_or_nothing_was_consumed() -> None:
    s = Scripted(enable_auto_commit=False)
    s.stable()
    s.store.consume(T0, 10)
    s.poll(60_000)
    assert not s.has("offset_commit")
    t = Scripted()
    t.stable()
    t.poll(60_000)
    assert not t.has("offset_commit")


def test_commit_sync_retries_retriable_errors_until_its_deadline() -> None:
    s = Scripted()
    s.stable()
    op = s.m.commit_sync({T0: OffsetAndMetadata(5, "note", 3)}, s.now, 1_000)
    s.collect()
    request = s.take("offset_commit")
    part = request.body["topics"][0]["partitions"][0]
    assert (part["committed_offset"], part["committed_metadata"], part["committed_leader_epoch"]) == (5, "note", 3)
    s.answer(request, error(E.COORDINATOR_LOAD_IN_PROGRESS))
    assert not op.done
    s.tick(100)
    s.answer(s.take("offset_commit"), OK)
    assert op.done and op.error is None
    late = s.m.commit_sync({T0: OffsetAndMetadata(6)}, s.now, 250)
    s.collect()
    s.answer(s.take("offset_commit"), error(E.COORDINATOR_LOAD_IN_PROGRESS))
    s.tick(200)
    s.answer(s.take("offset_commit"), error(E.COORDINATOR_LOAD_IN_PROGRESS))
    s.tick(350)
    assert late.done and isinstance(late.error, RetriableCommitFailedError | KafkaTimeoutError)


def test_commit_async_reports_through_its_callback_from_poll() -> None:
    s = Scripted()
    s.stable()
    seen = []
    op = s.m.commit_async({T1: OffsetAndMetadata(9)}, s.now, lambda offsets, err: seen.append((offsets, err)))
    s.collect()
    s.answer(s.take("offset_commit"), error(E.NOT_COORDINATOR))
    assert op.done and isinstance(op.error, RetriableCommitFailedError)  # async: no retry, as Kafka's
    assert s.callbacks == []  # not from the network side ...
    s.poll()
    [callback] = s.callbacks  # ... but from the application's poll()
    assert isinstance(callback, RunCommitCallback) and callback.offsets == {T1: OffsetAndMetadata(9)}
    assert s.m.coordinator is None  # and the coordinator is looked up again


def test_commits_outside_an_active_generation_fail_with_the_right_exception() -> None:
    s = Scripted()
    s.stable()
    s.tick(3_000)
    s.answer(s.take("heartbeat"), error(E.UNKNOWN_MEMBER_ID))
    op = s.m.commit_sync({T0: OffsetAndMetadata(1)}, s.now, 1_000)
    assert op.done and isinstance(op.error, CommitFailedError)  # kicked out: not part of the group
    s.collect()
    assert op.error.message in LOCAL_COMMIT_REFUSALS and not s.has("offset_commit")  # refused unsent
    s.poll(3_001)
    s.listener_done()  # on_partitions_lost
    assert s.m.state is MemberState.PREPARING_REBALANCE
    op = s.m.commit_sync({T0: OffsetAndMetadata(1)}, s.now, 1_000)
    assert op.done and isinstance(op.error, RebalanceInProgressError)  # poll() to finish, then retry
    s.collect()
    assert op.error.message in LOCAL_COMMIT_REFUSALS and not s.has("offset_commit")


def test_a_commit_answered_with_a_lost_generation_fails_and_resets_the_member() -> None:
    s = Scripted()
    s.stable()
    op = s.m.commit_sync({T0: OffsetAndMetadata(1)}, s.now, 1_000)
    s.collect()
    s.answer(
        s.take("offset_commit"),
        {
            "error_code": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, **error(E.ILLEGAL_GENERATION)}]}],
        },
    )
    assert isinstance(op.error, CommitFailedError) and s.m.state is MemberState.UNJOINED
    assert op.error.message not in LOCAL_COMMIT_REFUSALS  # the coordinator's refusal, not the client's own
    op = s.m.commit_sync({T0: OffsetAndMetadata(1, "x" * 5000)}, s.now, 1_000)
    assert isinstance(op.error, CommitFailedError)


def test_too_large_metadata_is_final() -> None:
    s = Scripted()
    s.stable()
    op = s.m.commit_sync({T0: OffsetAndMetadata(1, "x" * 5000)}, s.now, 10_000)
    s.collect()
    s.answer(
        s.take("offset_commit"),
        {
            "error_code": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, **error(E.OFFSET_METADATA_TOO_LARGE)}]}],
        },
    )
    assert op.done and op.error.code is E.OFFSET_METADATA_TOO_LARGE


def test_committed_looks_offsets_up_and_retries_while_the_coordinator_loads() -> None:
    s = Scripted()
    s.stable()
    op = s.m.committed([T0, T1], s.now, 5_000)
    s.collect()
    fetch = s.take("offset_fetch")
    assert fetch.body == {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    s.answer(fetch, error(E.COORDINATOR_LOAD_IN_PROGRESS))
    s.tick(100)
    body = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 17,
                        "committed_leader_epoch": 4,
                        "metadata": "m",
                        "error_code": 0,
                    },
                    {
                        "partition_index": 1,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": 0,
                    },
                ],
            }
        ],
    }
    s.answer(s.take("offset_fetch"), body)
    assert op.done and op.result == {T0: OffsetAndMetadata(17, "m", 4), T1: None}


def test_a_manually_assigned_consumer_commits_as_a_simple_consumer() -> None:
    store = SimpleAssignmentStore()
    m = GroupMembership(GroupMembershipConfig("g", enable_auto_commit=False), make_assignors(["range"]), store)
    op = m.commit_sync({T2: OffsetAndMetadata(3)}, 0, 1_000)
    [find] = m.drain()
    m.on_response(find.request_id, COORDINATOR, 0)
    [commit] = m.drain()
    assert (commit.body["generation_id"], commit.body["member_id"]) == (-1, "")
    m.on_response(commit.request_id, OK, 0)
    assert op.done and op.error is None


def test_close_commits_then_revokes_then_leaves_and_a_static_member_does_not_leave() -> None:
    for instance in (None, "host-1"):
        s = Scripted(group_instance_id=instance)
        s.stable()
        s.store.consume(T0, 8)
        op = s.m.close(s.now, 5_000)
        s.collect()
        s.answer(s.take("offset_commit"), OK)
        s.poll()
        assert s.listener_done().method == "on_partitions_revoked"
        if instance is None:
            leave = s.take("leave_group")
            assert leave.body["members"][0]["member_id"] == "me"
            assert not op.done  # close waits (bounded) for the answer
            s.answer(leave, {"error_code": 0, "members": []})
            s.poll()
        else:
            assert not s.has("leave_group")  # its session keeps its place for a restart
        assert op.done and s.m.closed and s.m.next_deadline_ms() is None


def test_close_gives_up_on_an_unreachable_coordinator_at_its_timeout() -> None:
    s = Scripted()
    s.stable()
    s.store.consume(T0, 8)
    op = s.m.close(s.now, 1_000)
    s.collect()
    s.take("offset_commit")  # never answered
    s.tick(1_000)
    s.poll()
    s.listener_done()
    s.take("leave_group")
    s.poll(1_001)
    assert op.done and s.m.closed


def test_auto_commit_bounds_redelivery_after_a_crash_to_the_uncommitted_window() -> None:
    for kill_at in (2_050, 4_420, 7_777):
        sim = Sim({"t": 2})
        a = sim.add("a", auto_commit_interval_ms=1_000, commit_on_revoke=False)
        b = sim.add("b", auto_commit_interval_ms=1_000, commit_on_revoke=False)
        sim.run(kill_at)
        [tp] = a.store.assigned_partitions()
        sim.kill(a)
        sim.run(15_000)  # a's session (10 s) runs out; b takes its partition over
        first_by_b, last_by_a = b.consumed[tp][0], a.consumed[tp][-1]
        assert first_by_b <= last_by_a + 1  # nothing lost
        # Redelivered: what a read since its last auto-commit, at most one interval of polls (one record each).
        assert last_by_a + 1 - first_by_b <= 1_000 // 100
