"""A broker's heartbeat names replicas it cannot serve (a corrupt batch): the controller moves them away."""

from __future__ import annotations

import uuid

import pytest

from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import BrokerHeartbeatRequest, CreatableTopic, CreateTopicsRequest
from kraftpy.metadata.harness import ControllerHarness, check_image_invariants
from kraftpy.protocol.errors import ErrorCode, KafkaError

QUIET = ControllerConfig(cluster_id="test-cluster", auto_leader_rebalance_enable=False, metadata_max_idle_interval_ms=0)


def setup(assignments: dict[str, list[tuple[int, ...]]]) -> ControllerHarness:
    h = ControllerHarness(QUIET)
    h.start_brokers([0, 1, 2])
    for name, assignment in assignments.items():
        result = h.send(CreateTopicsRequest((CreatableTopic(name, assignments=tuple(assignment)),)))
        assert result.response.results[0].error is None
    return h


def report(h: ControllerHarness, broker_id: int, *replicas: tuple[str, int]):
    ids = tuple((h.committed.topic(name).topic_id, p) for name, p in replicas)
    return h.send(BrokerHeartbeatRequest(broker_id, h.broker_epochs[broker_id], h.committed.offset, False, ids))


def part(h: ControllerHarness, name: str, p: int = 0):
    return h.committed.topic(name).partitions[p]


def test_a_leader_reporting_its_replica_offline_hands_leadership_to_another_isr_member() -> None:
    h = setup({"t": [(0, 1, 2), (1, 0, 2)], "other": [(0, 1, 2)]})
    result = report(h, 0, ("t", 0), ("t", 1))
    assert result.response.is_fenced is False
    led, followed, untouched = part(h, "t", 0), part(h, "t", 1), part(h, "other")
    assert (led.leader, led.isr, led.leader_epoch) == (1, (1, 2), 1)
    assert (followed.leader, followed.isr, followed.leader_epoch) == (1, (1, 2), 0)  # left the ISR only
    assert (untouched.leader, untouched.isr) == (0, (0, 1, 2))  # the broker itself stays usable
    check_image_invariants(h.committed)
    # The next heartbeat repeats the report: nothing more to change.
    assert report(h, 0, ("t", 0), ("t", 1)).records == ()


def test_the_only_isr_member_leaves_isr_and_elr_and_the_partition_goes_leaderless() -> None:
    h = setup({"solo": [(0,)], "pair": [(0, 1)]})
    h.send(BrokerHeartbeatRequest(0, h.broker_epochs[0], h.committed.offset))
    from kraftpy.metadata.controller.requests import AlterPartitionItem, AlterPartitionRequest

    topic_id = h.committed.topic("pair").topic_id
    h.send(AlterPartitionRequest(0, h.broker_epochs[0], (AlterPartitionItem(topic_id, 0, 0, (0,), 0),)))
    report(h, 0, ("solo", 0), ("pair", 0))
    # No other replica holds what it holds: no leader rather than one without the data. Its own copy
    # may lack what it acknowledged, so it is no eligible leader either (KIP-966); it stays the last
    # known leader, which only an unclean recovery elects.
    for name in ("solo", "pair"):
        p = part(h, name)
        assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, (), (), (0,)), name
    check_image_invariants(h.committed)


def test_unknown_or_foreign_replicas_in_a_report_are_ignored() -> None:
    h = setup({"t": [(1, 2)]})
    ghost = uuid.uuid4()
    result = h.send(
        BrokerHeartbeatRequest(
            0, h.broker_epochs[0], h.committed.offset, False, ((ghost, 0), (h.committed.topic("t").topic_id, 0))
        )
    )
    assert result.records == () and result.response.is_fenced is False


def test_the_wire_carries_offline_replicas_and_range_checks_them() -> None:
    topic_id = uuid.uuid4()
    request = BrokerHeartbeatRequest(3, 7, 100, False, ((topic_id, 5),))
    body = wire.broker_heartbeat_body(request)
    assert wire.decode_request("broker_heartbeat", body) == request
    older = {k: v for k, v in body.items() if k != "offline_replicas"}
    assert wire.decode_request("broker_heartbeat", older).offline_replicas == ()
    for bad in (
        [{"topic_id": str(topic_id), "partition": 2**31}],
        [{"topic_id": str(topic_id), "partition": -1}],
        [{"topic_id": "nope", "partition": 0}],
        [7],
        "x",
    ):
        with pytest.raises(KafkaError) as info:
            wire.decode_request("broker_heartbeat", {**body, "offline_replicas": bad})
        assert info.value.code == ErrorCode.INVALID_REQUEST


def test_the_broker_lifecycle_reports_a_new_offline_replica_at_once_and_in_every_heartbeat() -> None:
    from kraftpy.broker.lifecycle import HEARTBEAT, BrokerLifecycle
    from kraftpy.metadata.records import Listener

    lc = BrokerLifecycle(
        broker_id=4,
        cluster_id="c1",
        incarnation_id="inc-1",
        listeners=(Listener("PLAINTEXT", "127.0.0.1", 9004),),
        rack=None,
        voters={1: ("127.0.0.1", 9001)},
        heartbeat_interval_ms=2000,
    )
    lc.on_answer(lc.next_request(0, -1, 1), {"broker_epoch": 7}, 0)
    beat = lc.next_request(0, 5, 1)
    lc.on_answer(beat, {"is_caught_up": True, "is_fenced": False, "should_shut_down": False}, 10)
    assert "offline_replicas" not in beat.body and lc.next_request(11, 5, 1) is None
    topic_id = uuid.uuid4()
    lc.set_offline_replicas(((topic_id, 3),), 50)
    beat = lc.next_request(50, 5, 1)  # not 2 s later: its leadership must move now
    assert beat is not None and beat.path == HEARTBEAT
    assert beat.body["offline_replicas"] == [{"topic_id": str(topic_id), "partition": 3}]
    lc.on_answer(beat, {"is_caught_up": True, "is_fenced": False, "should_shut_down": False}, 60)
    lc.set_offline_replicas(((topic_id, 3),), 70)
    assert lc.next_request(70, 5, 1) is None  # known already: the next regular heartbeat repeats it
    assert lc.next_request(2060, 5, 1).body["offline_replicas"][0]["partition"] == 3


def test_a_corrupt_replica_is_cut_only_once_another_replica_leads_and_it_left_the_isr() -> None:
    from kraftpy.broker.replication.model import PartitionRegistration, may_cut_corrupt_replica

    def reg(leader: int, isr: tuple[int, ...]) -> PartitionRegistration:
        return PartitionRegistration((1, 2, 3), isr, leader, 5, 9)

    assert not may_cut_corrupt_replica(reg(1, (1, 2, 3)), 1)  # it still leads: the report is not acted on yet
    assert not may_cut_corrupt_replica(reg(2, (1, 2, 3)), 1)  # still counted in the ISR
    assert not may_cut_corrupt_replica(reg(-1, (1,)), 1)  # the only copy: never cut
    assert may_cut_corrupt_replica(reg(2, (2, 3)), 1)
