"""Broker registration, heartbeats, session fencing, controlled shutdown, NOT_CONTROLLER."""

from __future__ import annotations

import random

import pytest

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    Listener,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError

QUIET = ControllerConfig(cluster_id="test-cluster", auto_leader_rebalance_enable=False, metadata_max_idle_interval_ms=0)


def error_of(result) -> KafkaError:
    assert isinstance(result.response, KafkaError), result.response
    return result.response


def create(h: ControllerHarness, name: str, assignments) -> None:
    result = h.send(CreateTopicsRequest((CreatableTopic(name, assignments=tuple(map(tuple, assignments))),)))
    assert result.response.results[0].error is None, result.response.results[0].error


def partitions(h: ControllerHarness, name: str):
    return h.committed.topic(name).partitions


# --- registration ---------------------------------------------------------------------------------


def test_registration_starts_fenced_with_increasing_epochs() -> None:
    h = ControllerHarness()
    assert h.register(3, rack="r1") == 1 and h.register(4) == 2
    b = h.committed.broker(3)
    assert b.fenced and b.rack == "r1" and b.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9095),)
    assert b.registration_offset == 0 and h.committed.cluster.next_broker_epoch == 3


def test_wrong_cluster_id_is_inconsistent_cluster_id() -> None:
    h = ControllerHarness()
    result = h.send(BrokerRegistrationRequest(1, "other-cluster", "inc", ()))
    assert error_of(result).code == ErrorCode.INCONSISTENT_CLUSTER_ID and "test-cluster" in error_of(result).message
    assert result.records == ()


@pytest.mark.parametrize(
    "request_",
    [
        BrokerRegistrationRequest(-1, "test-cluster", "inc"),
        BrokerRegistrationRequest(True, "test-cluster", "inc"),  # type: ignore[arg-type]  # a bool is no id
        BrokerRegistrationRequest("1", "test-cluster", "inc"),  # type: ignore[arg-type]
        BrokerRegistrationRequest(1, "test-cluster", ""),
        BrokerRegistrationRequest(1, "test-cluster", "inc", (Listener("A", "h", 1), Listener("A", "h", 2))),
    ],
)
def test_malformed_registrations_are_invalid_request(request_) -> None:
    assert error_of(ControllerHarness().send(request_)).code == ErrorCode.INVALID_REQUEST


def test_same_incarnation_is_a_retry_and_different_listeners_a_duplicate() -> None:
    h = ControllerHarness()
    epoch = h.register(1)
    retry = h.send(
        BrokerRegistrationRequest(1, "test-cluster", "incarnation-1", (Listener("PLAINTEXT", "127.0.0.1", 9093),))
    )
    assert retry.records == () and retry.response == BrokerRegistrationResponse(epoch)
    clash = h.send(
        BrokerRegistrationRequest(1, "test-cluster", "incarnation-1", (Listener("PLAINTEXT", "10.0.0.1", 1),))
    )
    assert error_of(clash).code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_new_incarnation_fences_the_old_one_and_moves_its_leaderships() -> None:
    h = ControllerHarness()
    h.start_brokers([0, 1, 2])
    create(h, "t", [(0, 1, 2), (1, 0, 2)])
    old_epoch = h.broker_epochs[0]
    new_epoch = h.register(0, incarnation="restarted")
    assert new_epoch > old_epoch
    assert h.committed.broker(0).fenced and h.committed.broker(0).incarnation_id == "restarted"
    p0, p1 = partitions(h, "t")
    assert p0.leader == 1 and p0.isr == (1, 2) and p0.leader_epoch == 1 and p0.partition_epoch == 1
    assert p1.leader == 1 and p1.isr == (1, 2) and p1.leader_epoch == 0
    stale = h.send(BrokerHeartbeatRequest(0, old_epoch, 100))
    assert error_of(stale).code == ErrorCode.STALE_BROKER_EPOCH


def test_a_new_incarnations_fencing_and_moves_precede_its_registration_record() -> None:
    """A restarted broker acts on no image before the one holding its new registration (issue 11).

    The controller may split a large decision over several Raft batches, so the old incarnation's
    fencing and every leadership move must come before the RegisterBroker record in the log.
    """
    h = ControllerHarness()
    h.start_brokers([0, 1, 2])
    create(h, "t", [(0, 1, 2), (1, 0, 2), (0, 2, 1)])
    old_epoch = h.broker_epochs[0]
    result = h.send(
        BrokerRegistrationRequest(0, "test-cluster", "restarted", (Listener("PLAINTEXT", "127.0.0.1", 9092),))
    )
    kinds = [type(r) for r in result.records]
    assert kinds[0] is FenceBrokerRecord and result.records[0].broker_epoch == old_epoch
    assert kinds[-1] is RegisterBrokerRecord and kinds.count(RegisterBrokerRecord) == 1
    moves = [r for r in result.records if isinstance(r, PartitionChangeRecord)]
    assert len(moves) == 3  # two leaderships moved, and it left the third partition's ISR
    h.commit()
    for p in partitions(h, "t"):
        assert p.leader != 0 and 0 not in p.isr


# --- heartbeats and fencing ---------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    h = ControllerHarness()
    assert error_of(h.send(BrokerHeartbeatRequest(9, 1, 0))).code == ErrorCode.BROKER_ID_NOT_REGISTERED
    h.register(9)
    assert error_of(h.send(BrokerHeartbeatRequest(9, 42, 0))).code == ErrorCode.STALE_BROKER_EPOCH


def test_unfenced_only_once_caught_up_with_its_registration() -> None:
    h = ControllerHarness(auto_commit=False)
    h.register(1)
    # Registration not committed yet: the broker cannot be caught up.
    early = h.heartbeat(1, offset=1000)
    assert early.records == () and early.response == BrokerHeartbeatResponse(False, True, False)
    h.commit()
    registered_at = h.committed.broker(1).registration_offset
    behind = h.heartbeat(1, offset=registered_at - 1)
    assert behind.records == () and behind.response == BrokerHeartbeatResponse(False, True, False)
    caught_up = h.heartbeat(1, offset=registered_at)
    assert caught_up.records == (UnfenceBrokerRecord(1, h.broker_epochs[1]),)
    assert caught_up.response == BrokerHeartbeatResponse(True, False, False)
    h.commit()
    assert not h.committed.broker(1).fenced
    steady = h.heartbeat(1)
    assert steady.records == () and steady.response == BrokerHeartbeatResponse(True, False, False)


def test_lapsed_session_fences_and_moves_leaderships_the_last_isr_member_into_the_elr() -> None:
    h = ControllerHarness(QUIET)
    h.start_brokers([0, 1, 2])
    for name, assignment in (("a", [(0, 1, 2)]), ("b", [(1, 0)]), ("c", [(0,)]), ("d", [(2, 1)])):
        create(h, name, assignment)
    h.now_ms = 8000
    h.heartbeat(1)
    h.heartbeat(2)
    assert h.tick(8999).records == ()  # broker 0's lease still holds
    result = h.tick(9000)
    assert result.records[0] == FenceBrokerRecord(0, h.broker_epochs[0])
    assert all(isinstance(r, PartitionChangeRecord) for r in result.records[1:])
    (a,), (b,), (c,), (d,) = (partitions(h, name) for name in "abcd")
    assert (a.leader, a.isr, a.leader_epoch, a.partition_epoch) == (1, (1, 2), 1, 1)
    assert (b.leader, b.isr, b.leader_epoch, b.partition_epoch) == (1, (1,), 0, 1)
    # The last ISR member leaves the ISR for the eligible leader replicas (KIP-966); min ISR 1, so
    # b's ISR of one keeps no ELR.
    assert (c.leader, c.isr, c.leader_epoch, c.elr, c.last_known_elr) == (-1, (), 1, (0,), (0,))
    assert b.elr == () and a.elr == ()
    assert d.partition_epoch == 0  # untouched
    assert h.committed.broker(0).fenced
    assert h.tick(9500).records == (), "a fenced broker's lapsed lease fences nothing again"
    # Coming back: caught up -> unfenced, and it leads its leaderless partition again.
    result = h.heartbeat(0)
    assert result.records[0] == UnfenceBrokerRecord(0, h.broker_epochs[0])
    (c,) = partitions(h, "c")
    assert (c.leader, c.isr, c.leader_epoch, c.elr, c.last_known_elr) == (0, (0,), 2, (), ())


def test_unclean_topic_gets_an_out_of_isr_leader_when_its_last_isr_member_is_fenced() -> None:
    h = ControllerHarness(QUIET)
    h.start_brokers([0, 1])
    create(h, "t", [(0, 1)])
    h.send(
        IncrementalAlterConfigsRequest(
            (
                AlterConfigsResource(
                    ConfigResource(ConfigResourceType.TOPIC, "t"),
                    (AlterConfigOp("unclean.leader.election.enable", value="true"),),
                ),
            )
        )
    )
    topic_id = h.committed.topic("t").topic_id
    h.send(BrokerHeartbeatRequest(1, h.broker_epochs[1], h.committed.offset))
    from kraftpy.metadata.controller.requests import AlterPartitionItem, AlterPartitionRequest

    h.send(AlterPartitionRequest(0, h.broker_epochs[0], (AlterPartitionItem(topic_id, 0, 0, (0,), 0),)))
    assert partitions(h, "t")[0].isr == (0,)
    h.now_ms = 5000
    h.heartbeat(1)
    h.tick(9000)
    p = partitions(h, "t")[0]
    assert p.leader == 1 and p.isr == (1,) and p.leader_epoch == 1


def test_activation_starts_every_lease_afresh() -> None:
    h = ControllerHarness(QUIET)
    h.start_brokers([0, 1])
    h.now_ms = 60_000
    h.fail_over()
    assert h.tick(60_000 + 8999).records == ()
    fenced = h.tick(60_000 + 9000)
    assert {r.broker_id for r in fenced.records if isinstance(r, FenceBrokerRecord)} == {0, 1}
    assert h.controller.next_deadline_ms(h.now_ms) is None  # every broker fenced, no timers on


def test_next_deadline_is_the_earliest_lease_expiry() -> None:
    h = ControllerHarness(QUIET)
    h.start_brokers([0, 1])
    h.now_ms = 100
    h.heartbeat(1)
    assert h.controller.next_deadline_ms(h.now_ms) == 9000  # broker 0 last heard at 0
    h.heartbeat(0)
    assert h.controller.next_deadline_ms(h.now_ms) == 9100


def test_idle_controller_writes_noops() -> None:
    h = ControllerHarness()
    assert h.tick(100).records == ()
    result = h.tick(500)
    assert [type(r).__name__ for r in result.records] == ["NoOpRecord"]
    assert h.tick(600).records == ()


# --- controlled shutdown -------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_first() -> None:
    h = ControllerHarness(QUIET, auto_commit=False)
    h.start_brokers([0, 1, 2])
    for name, assignment in (("a", [(0, 1, 2)]), ("b", [(0,)]), ("c", [(1, 2)])):
        create(h, name, assignment)
    h.commit()
    first = h.heartbeat(0, want_shutdown=True)
    assert first.records[0] == BrokerRegistrationChangeRecord(0, h.broker_epochs[0], in_controlled_shutdown=True)
    assert first.response == BrokerHeartbeatResponse(True, False, False)
    # Not committed yet: the broker may not go (still unfenced, it serves on meanwhile).
    assert h.heartbeat(0, want_shutdown=True).response == BrokerHeartbeatResponse(True, False, False)
    h.commit()
    (a,), (b,), (c,) = (partitions(h, name) for name in "abc")
    assert (a.leader, a.isr) == (1, (1, 2)) and (b.leader, b.isr, b.elr) == (-1, (), (0,)) and c.partition_epoch == 0
    threshold = h.committed.offset
    behind = h.heartbeat(0, offset=threshold - 1, want_shutdown=True)
    assert behind.records == () and behind.response == BrokerHeartbeatResponse(True, False, False)
    done = h.heartbeat(0, offset=threshold, want_shutdown=True)
    assert done.records == (FenceBrokerRecord(0, h.broker_epochs[0]),)
    assert done.response == BrokerHeartbeatResponse(True, True, True)
    h.commit()
    assert h.committed.broker(0).fenced
    # A fenced broker may always shut down.
    again = h.heartbeat(0, want_shutdown=True)
    assert again.records == () and again.response == BrokerHeartbeatResponse(True, True, True)


def test_a_broker_leading_nothing_is_fenced_only_once_its_shutdown_is_committed() -> None:
    """Nothing to move, but the controlled-shutdown state itself must be durable before the broker
    is fenced and told to go (a new controller would otherwise not know why it is fenced)."""
    h = ControllerHarness(QUIET, auto_commit=False)
    h.start_brokers([0, 1, 2])
    create(h, "c", [(1, 0)])
    h.commit()
    first = h.heartbeat(2, want_shutdown=True)
    assert first.records == (BrokerRegistrationChangeRecord(2, h.broker_epochs[2], in_controlled_shutdown=True),)
    early = h.heartbeat(2, offset=h.committed.offset + 10, want_shutdown=True)
    assert early.records == () and early.response == BrokerHeartbeatResponse(True, False, False)
    h.commit()
    done = h.heartbeat(2, offset=h.committed.offset, want_shutdown=True)
    assert done.records == (FenceBrokerRecord(2, h.broker_epochs[2]),)
    assert done.response == BrokerHeartbeatResponse(True, True, True)


def test_controlled_shutdown_is_sticky() -> None:
    h = ControllerHarness()
    h.start_brokers([0, 1])
    h.heartbeat(0, want_shutdown=True)
    result = h.heartbeat(0)  # without want_shutdown: still shutting down, never unfenced back
    assert result.response.should_shut_down is True and h.committed.broker(0).fenced


def test_unregister_broker() -> None:
    h = ControllerHarness()
    h.start_brokers([0, 1])
    create(h, "t", [(0, 1)])
    result = h.send(UnregisterBrokerRequest(0))
    assert result.records[0] == UnregisterBrokerRecord(0, h.broker_epochs[0])
    assert result.response == UnregisterBrokerResponse()
    assert h.committed.broker(0) is None and partitions(h, "t")[0].leader == 1
    assert error_of(h.send(UnregisterBrokerRequest(0))).code == ErrorCode.BROKER_ID_NOT_REGISTERED


# --- activeness ----------------------------------------------------------------------------------


def test_inactive_controller_answers_not_controller_with_the_hint() -> None:
    controller = QuorumController(ControllerConfig(cluster_id="c"), rng=random.Random(0))
    controller.deactivate(leader_id=2, leader_address="127.0.0.2:9093")
    result = controller.handle(BrokerRegistrationRequest(1, "c", "inc"), 0)
    error = error_of(result)
    assert error.code == ErrorCode.NOT_CONTROLLER and result.records == ()
    # Refused before anything was appended: it can never take effect, and the answer says so.
    assert error.details == {"leader_id": 2, "leader_address": "127.0.0.2:9093", "appended": False}
    assert controller.tick(10_000).records == () and controller.next_deadline_ms(0) is None


def test_losing_leadership_drops_uncommitted_state() -> None:
    h = ControllerHarness(auto_commit=False)
    h.register(1)
    assert h.latest.broker(1) is not None and h.committed.broker(1) is None
    h.fail_over()
    assert h.latest.broker(1) is None and h.controller.epoch == 2
    assert h.register(1) == 1  # the lost registration's epoch is handed out again: it never existed


def test_committed_records_replayed_on_a_standby_show_in_its_image() -> None:
    h = ControllerHarness()
    h.start_brokers([0])
    standby = QuorumController(h.config, rng=random.Random(1))
    standby.handle_commit(h.committed)
    assert standby.latest_image is h.committed and not standby.is_active
