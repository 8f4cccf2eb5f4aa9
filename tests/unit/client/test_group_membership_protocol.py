"""The membership core request by request, against scripted answers: discovery, join, sync, heartbeats, errors."""

from __future__ import annotations

from typing import Any

import pytest

from kraftpy.client.errors import IllegalStateError
from kraftpy.client.group.assignors import PartitionAssignor, make_assignors
from kraftpy.client.group.errors import FencedInstanceIdError, GroupProtocolError
from kraftpy.client.group.membership import GroupMembership, MemberState
from kraftpy.client.group.membership_types import (
    GroupMembershipConfig,
    InvokeListener,
    SendRequest,
    SimpleAssignmentStore,
)
from kraftpy.protocol.consumer_protocol import Assignment, Subscription, decode_subscription, encode_assignment
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

E = ErrorCode
T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
COORDINATOR = {"error_code": 0, "node_id": 7, "host": "10.0.0.7", "port": 9092}


class Scripted:
    """One member whose every request the test answers by hand."""

    def __init__(
        self, *, assignors: tuple[str | PartitionAssignor, ...] = ("range",), listener: bool = True, **config: Any
    ) -> None:
        settings = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 3_000, "retry_backoff_ms": 100, **config}
        self.store = SimpleAssignmentStore()
        self.m = GroupMembership(GroupMembershipConfig("g", **settings), make_assignors(assignors), self.store)
        self.now = 0
        self.requests: list[SendRequest] = []
        self.listener_calls: list[InvokeListener] = []
        self.callbacks: list[Any] = []
        self.m.subscribe(["t"], listener=listener)
        self.m.on_metadata({"t": 3}, 0)

    def collect(self) -> None:
        for action in self.m.drain():
            if isinstance(action, SendRequest):
                self.requests.append(action)
            elif isinstance(action, InvokeListener):
                self.listener_calls.append(action)
            else:
                self.callbacks.append(action)

    def poll(self, at: int | None = None) -> None:
        self.now = self.now if at is None else at
        self.m.poll(self.now)
        self.collect()

    def tick(self, at: int) -> None:
        self.now = at
        self.m.tick(at)
        self.collect()

    def take(self, api: str) -> SendRequest:
        for i, request in enumerate(self.requests):
            if request.api == api:
                return self.requests.pop(i)
        raise AssertionError(f"no {api} request among {[r.api for r in self.requests]}")

    def has(self, api: str) -> bool:
        return any(r.api == api for r in self.requests)

    def answer(self, request: SendRequest, body: dict[str, Any]) -> None:
        self.m.on_response(request.request_id, body, self.now)
        self.collect()

    def listener_done(self) -> InvokeListener:
        call = self.listener_calls.pop(0)
        self.m.listener_done(self.now)
        self.collect()
        return call

    def join_as_leader(self, members: tuple[str, ...] = ("me",), generation: int = 1) -> SendRequest:
        """Find the coordinator, join (generation `generation`, leading), return the SyncGroup request."""
        if self.m.coordinator is None:
            self.poll()
            self.answer(self.take("find_coordinator"), COORDINATOR)
        self.poll()
        join = self.take("join_group")
        metadata = {m: join.body["protocols"][0]["metadata"] for m in members}
        self.answer(join, join_answer(members[0], members[0], generation, metadata))
        return self.take("sync_group")

    def stable(self, assigned: tuple[TopicPartition, ...] = (T0, T1, T2), generation: int = 1) -> None:
        sync = self.join_as_leader(generation=generation)
        self.answer(sync, sync_answer(assigned))
        self.poll()
        while self.listener_calls:
            self.listener_done()


def join_answer(member: str, leader: str, generation: int, metadata: dict[str, bytes] | None = None) -> dict:
    return {
        "error_code": 0,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": leader,
        "member_id": member,
        "skip_assignment": False,
        "members": [{"member_id": m, "group_instance_id": None, "metadata": d} for m, d in (metadata or {}).items()],
    }


def sync_answer(partitions: tuple[TopicPartition, ...]) -> dict:
    assignment = encode_assignment(Assignment(partitions))
    return {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range", "assignment": assignment}


def error(code: ErrorCode, **fields: Any) -> dict:
    return {"error_code": int(code), "error": code.name, "message": "scripted", **fields}


def test_discovery_retries_after_the_backoff_then_join_uses_the_coordinator() -> None:
    s = Scripted()
    s.poll()
    find = s.take("find_coordinator")
    assert find.node is None and find.body == {"key": "g", "key_type": 0}
    s.answer(find, error(E.COORDINATOR_NOT_AVAILABLE))
    assert s.m.next_deadline_ms() == 100
    s.tick(99)
    assert not s.has("find_coordinator")
    s.tick(100)
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    join = s.take("join_group")
    assert join.node is not None and join.node.address == ("10.0.0.7", 9092)
    assert join.body["member_id"] == "" and join.body["rebalance_timeout_ms"] == 300_000
    assert join.timeout_ms == 305_000  # the rebalance timeout plus Kafka's 5 s lapse
    assert [p["name"] for p in join.body["protocols"]] == ["range"]
    assert decode_subscription(join.body["protocols"][0]["metadata"]).topics == ("t",)


def test_member_id_required_makes_it_join_again_at_once_with_that_id() -> None:
    s = Scripted()
    s.poll()
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    s.answer(s.take("join_group"), error(E.MEMBER_ID_REQUIRED, member_id="c-123"))
    s.poll()
    assert s.take("join_group").body["member_id"] == "c-123"


def test_the_leader_assigns_with_the_chosen_assignor_and_followers_send_nothing() -> None:
    s = Scripted()
    sync = s.join_as_leader(members=("me", "other"))
    assignments = {a["member_id"]: a["assignment"] for a in sync.body["assignments"]}
    assert set(assignments) == {"me", "other"} and sync.body["generation_id"] == 1
    follower = Scripted()
    follower.poll()
    follower.answer(follower.take("find_coordinator"), COORDINATOR)
    follower.poll()
    follower.answer(follower.take("join_group"), join_answer("f", "someone-else", 4))
    body = follower.take("sync_group").body
    assert body["assignments"] == [] and body["generation_id"] == 4 and body["protocol_name"] == "range"


def test_after_sync_the_assignment_is_applied_in_poll_and_the_listener_hears_of_it() -> None:
    s = Scripted()
    s.answer(s.join_as_leader(), sync_answer((T0, T2)))
    assert s.m.state is MemberState.STABLE and s.store.assigned_partitions() == set()  # not before poll()
    s.poll()
    [call] = s.listener_calls
    assert call.method == "on_partitions_assigned" and call.partitions == (T0, T2)
    assert s.store.assigned_partitions() == {T0, T2}  # assigned before the listener, so it can seek


def test_heartbeats_go_every_interval_and_a_silent_coordinator_is_looked_up_again() -> None:
    s = Scripted()
    s.stable()
    s.tick(2_999)
    assert not s.has("heartbeat")
    s.tick(3_000)
    hb = s.take("heartbeat")
    assert hb.body == {"group_id": "g", "generation_id": 1, "member_id": "me", "group_instance_id": None}
    s.answer(hb, {"error_code": 0})
    s.tick(6_000)
    s.take("heartbeat")  # never answered: the session runs out 10 s after the last answer (3 000)
    s.tick(12_999)
    assert s.m.coordinator is not None
    s.tick(13_000)
    assert s.m.coordinator is None and s.has("find_coordinator")


def test_rebalance_in_progress_makes_an_eager_member_commit_revoke_everything_then_join() -> None:
    s = Scripted()
    s.stable()
    s.store.consume(T0, 42)
    s.tick(3_000)
    s.answer(s.take("heartbeat"), error(E.REBALANCE_IN_PROGRESS))
    s.poll(3_001)
    commit = s.take("offset_commit")  # auto-commit first...
    assert commit.body["generation_id"] == 1 and commit.body["member_id"] == "me"
    assert commit.body["topics"][0]["partitions"][0]["committed_offset"] == 42
    assert s.store.pending_revocation == {T0, T1, T2}  # ...with fetching stopped, so nothing slips past it
    assert not s.listener_calls and not s.has("join_group")
    s.answer(
        commit, {"error_code": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
    )
    s.poll()
    call = s.listener_done()  # ...then revoke, with the partitions still assigned for the listener
    assert call.method == "on_partitions_revoked" and call.partitions == (T0, T1, T2)
    assert s.store.assigned_partitions() == set()
    join = s.take("join_group")
    assert join.body["member_id"] == "me"


def test_a_lost_generation_means_on_partitions_lost_and_a_fresh_member_id() -> None:
    s = Scripted()
    s.stable()
    s.tick(3_000)
    s.answer(s.take("heartbeat"), error(E.ILLEGAL_GENERATION))
    assert s.m.state is MemberState.UNJOINED
    s.poll(3_001)
    assert not s.has("offset_commit")  # a member out of the group must not commit
    call = s.listener_done()
    assert call.method == "on_partitions_lost" and call.partitions == (T0, T1, T2)
    assert s.take("join_group").body["member_id"] == ""


def test_fenced_instance_is_fatal_and_inconsistent_protocol_is_reported_then_retried() -> None:
    s = Scripted(group_instance_id="host-1")
    s.stable()
    s.tick(3_000)
    s.answer(s.take("heartbeat"), error(E.FENCED_INSTANCE_ID))
    for _ in range(2):
        assert isinstance(s.m.take_error(), FencedInstanceIdError)
    assert s.m.next_deadline_ms() is None
    t = Scripted()
    t.poll()
    t.answer(t.take("find_coordinator"), COORDINATOR)
    t.poll()
    t.answer(t.take("join_group"), error(E.INCONSISTENT_GROUP_PROTOCOL))
    assert isinstance(t.m.take_error(), GroupProtocolError) and t.m.take_error() is None
    t.poll(50)
    assert not t.has("join_group")
    t.poll(100)
    assert t.has("join_group")


def test_coordinator_errors_during_the_rebalance_restart_discovery_and_the_join() -> None:
    s = Scripted()
    sync = s.join_as_leader()
    s.answer(sync, error(E.NOT_COORDINATOR))
    assert s.m.coordinator is None and s.m.state is MemberState.UNJOINED
    s.tick(0)
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll(100)
    assert s.has("join_group")


def test_a_transport_failure_or_a_malformed_answer_counts_as_no_answer() -> None:
    s = Scripted()
    s.poll()
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    join = s.take("join_group")
    s.m.on_failure(join.request_id, KafkaError("connection reset", E.NETWORK_EXCEPTION), 0)
    assert s.m.coordinator is None and s.m.state is MemberState.UNJOINED
    s.tick(0)
    s.answer(s.take("find_coordinator"), {"error_code": 0, "node_id": "seven"})
    assert s.m.coordinator is None  # malformed: retried after the backoff
    s.tick(100)
    assert s.has("find_coordinator")


def test_stale_answers_are_ignored() -> None:
    s = Scripted()
    s.stable()
    s.tick(3_000)
    old = s.take("heartbeat")
    s.tick(3_000)
    s.m.on_response(old.request_id, error(E.ILLEGAL_GENERATION), 3_000)
    s.m.on_response(old.request_id, error(E.ILLEGAL_GENERATION), 3_000)  # answered twice: ignored
    s.m.on_response(999, error(E.ILLEGAL_GENERATION), 3_000)  # never asked
    assert s.m.state is MemberState.UNJOINED  # the first one counted once


def test_a_cooperative_leader_refuses_an_assignor_that_moves_partitions_in_one_step() -> None:
    class Greedy(PartitionAssignor):
        name = "greedy"

        def supported_protocols(self):
            from kraftpy.client.group.assignors import RebalanceProtocol

            return (RebalanceProtocol.COOPERATIVE,)

        def assign(self, partitions_per_topic, subscriptions):
            return {m: Assignment((T0,)) if m == "me" else Assignment() for m in subscriptions}

    s = Scripted(assignors=(Greedy(),))
    s.poll()
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    join = s.take("join_group")
    from kraftpy.protocol.consumer_protocol import encode_subscription

    holder = encode_subscription(Subscription(("t",), owned_partitions=(T0,), generation_id=1))
    answer = join_answer("me", "me", 2, {"me": join.body["protocols"][0]["metadata"], "other": holder})
    answer["protocol_name"] = "greedy"
    s.answer(join, answer)
    assert isinstance(s.m.take_error(), IllegalStateError)
    assert not s.has("sync_group")


def test_the_config_is_checked() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        GroupMembershipConfig("g", session_timeout_ms=3_000, heartbeat_interval_ms=3_000)
    with pytest.raises(ValueError, match="group_id"):
        GroupMembershipConfig("")
    with pytest.raises(ValueError, match="group_instance_id"):
        GroupMembershipConfig("g", group_instance_id="")


def test_deadlines_name_only_work_that_can_happen_so_a_shell_never_spins() -> None:
    s = Scripted(auto_commit_interval_ms=5_000)
    s.poll(0)
    assert s.m.poll_deadline_ms() is None  # no coordinator yet: poll() cannot join, the find is in flight
    assert s.m.next_deadline_ms() is None
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll(0)
    s.answer(s.take("join_group"), error(E.COORDINATOR_LOAD_IN_PROGRESS))
    assert s.m.poll_deadline_ms() == 100  # the join retry
    s.poll(100)
    assert s.has("join_group")
    assert s.m.poll_deadline_ms() is None  # joining: nothing for poll() until the answer
    s.stable()  # answers that join
    assert s.m.poll_deadline_ms() == s.now + 5_000  # the next auto-commit
    assert s.m.next_deadline_ms() == s.now + 3_000  # the next heartbeat
    for _ in range(5):  # calling tick at its deadline always moves the deadline forward
        deadline = s.m.next_deadline_ms()
        s.tick(deadline)
        assert s.m.next_deadline_ms() > deadline
        for hb in [r for r in s.requests if r.api == "heartbeat"]:
            s.requests.remove(hb)
            s.answer(hb, {"error_code": 0})


def test_a_member_closed_between_two_joins_of_a_rebalance_still_leaves() -> None:
    s = Scripted()
    sync = s.join_as_leader()
    s.answer(sync, error(E.REBALANCE_IN_PROGRESS))
    assert s.m.state is MemberState.UNJOINED and s.m.member_id == "me"
    op = s.m.close(s.now, 1_000)
    s.collect()
    leave = s.take("leave_group")  # the coordinator counts "me" until told: the next rebalance would wait for it
    ((member),) = leave.body["members"]
    assert member["member_id"] == "me" and member["group_instance_id"] is None
    assert not op.done
    s.answer(leave, {"error_code": 0, "members": [{"member_id": "me", "group_instance_id": None, "error_code": 0}]})
    s.poll()
    assert op.done and op.error is None and s.m.closed


def test_a_member_closed_during_its_first_join_learns_its_id_and_leaves_with_it() -> None:
    s = Scripted()
    s.poll()
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    join = s.take("join_group")
    assert join.body["member_id"] == ""
    op = s.m.close(s.now, 1_000)
    s.collect()
    assert not s.has("leave_group") and not op.done, "no id yet: it would leave nobody"
    s.answer(join, error(E.MEMBER_ID_REQUIRED, member_id="c-123"))
    s.poll()
    assert not s.has("join_group"), "closing: no second join"
    ((member),) = s.take("leave_group").body["members"]
    assert member["member_id"] == "c-123"


def test_a_close_does_not_wait_past_its_timeout_for_a_join_answer() -> None:
    s = Scripted()
    s.poll()
    s.answer(s.take("find_coordinator"), COORDINATOR)
    s.poll()
    s.take("join_group")  # never answered
    op = s.m.close(s.now, 1_000)
    s.poll(1_000)
    assert op.done and s.m.closed and not s.has("leave_group")


def test_an_abandoned_member_leaves_at_once_without_listener_or_commit() -> None:
    s = Scripted(enable_auto_commit=True)
    s.stable()
    s.store.consume(T0, 5)
    op = s.m.close(s.now, 1_000)
    s.collect()
    s.take("offset_commit")  # close commits first; the application is torn down before it is answered
    s.m.abandon("cancelled")
    s.collect()
    ((member),) = s.take("leave_group").body["members"]
    assert member["member_id"] == "me" and s.m.closed and op.done
    assert not s.listener_calls and not s.requests
    s.m.abandon("again")  # a closed member stays quiet
    s.collect()
    assert not s.requests
