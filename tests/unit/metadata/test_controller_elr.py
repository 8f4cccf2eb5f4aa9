"""Eligible leader replicas (KIP-966) in the controller: who may lead once the ISR is below min ISR.

The cases are the fault runs' last-ISR-member losses (docs/jepsen.md, seeds 2101 and 2304) and the
rules around them: docs/replication.md, "Eligible leader replicas".
"""

from __future__ import annotations

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.harness import ControllerHarness, check_image_invariants
from kraftpy.metadata.image.metadata_image import PartitionRegistration

MIN_ISR_2 = ControllerConfig(
    cluster_id="test-cluster",
    auto_leader_rebalance_enable=False,
    metadata_max_idle_interval_ms=0,
    min_insync_replicas=2,
)


def cluster(assignment: tuple[int, ...], brokers: tuple[int, ...] = (1, 2, 3)) -> ControllerHarness:
    h = ControllerHarness(MIN_ISR_2)
    h.start_brokers(list(brokers))
    result = h.send(CreateTopicsRequest((CreatableTopic("t", assignments=(assignment,)),)))
    assert result.response.results[0].error is None
    return h


def part(h: ControllerHarness) -> PartitionRegistration:
    check_image_invariants(h.committed, min_isr_default=2)
    return h.committed.topic("t").partitions[0]


def shrink(h: ControllerHarness, isr: tuple[int, ...]) -> None:
    p = part(h)
    item = AlterPartitionItem(h.committed.topic("t").topic_id, 0, p.leader_epoch, isr, p.partition_epoch)
    result = h.send(AlterPartitionRequest(p.leader, h.broker_epochs[p.leader], (item,)))
    assert result.response.results[0].error is None, result.response.results[0].error


def lapse(h: ControllerHarness, broker: int) -> None:
    """`broker`'s session lapses (paused, cut off) while the others keep heartbeating."""
    h.now_ms += 8000
    for b in h.broker_epochs:
        if b != broker and not h.latest.broker(b).fenced:
            h.heartbeat(b)
    h.tick(h.now_ms + 1000)
    assert h.committed.broker(broker).fenced


def restart(h: ControllerHarness, broker: int, *, clean: bool) -> None:
    h.register(broker, incarnation=f"again-{h.now_ms}-{broker}", clean=clean)
    h.heartbeat(broker)  # caught up: unfenced


def test_seed_2304_the_fenced_replica_leads_after_the_last_isr_member_lost_its_tail() -> None:
    """Node 1 is fenced late (the ISR {1, 3} falls to {3}, below min ISR 2), then node 3, the ISR's
    last member, loses power. Node 3's log may lack what was committed; node 1's holds it all."""
    h = cluster((3, 1, 2))
    shrink(h, (3, 1))
    lapse(h, 1)
    assert (part(h).isr, part(h).elr, part(h).leader) == ((3,), (1,), 3)
    restart(h, 3, clean=False)
    after = part(h)
    assert (after.leader, after.isr, after.elr, after.last_known_elr) == (-1, (), (1,), (3,))
    h.heartbeat(1)  # node 1 comes back: its ELR copy leads
    back = part(h)
    assert (back.leader, back.isr, back.elr, back.last_known_elr) == (1, (1,), (), ())
    shrink(h, (1, 3))  # node 3 caught up from node 1 (truncating its cut tail) and rejoins
    assert (part(h).isr, part(h).elr) == ((1, 3), ())


def test_a_clean_restart_of_the_last_isr_member_keeps_it_electable() -> None:
    """The same, but node 3 was only SIGKILLed (same boot id: nothing lost): it leads again at once."""
    h = cluster((3, 1, 2))
    shrink(h, (3, 1))
    lapse(h, 1)
    restart(h, 3, clean=True)
    after = part(h)
    assert (after.leader, after.isr, after.elr) == (3, (3,), (1,))


def test_an_unclean_restart_leaves_the_elr_too() -> None:
    h = cluster((3, 1, 2))
    shrink(h, (3, 1))
    lapse(h, 1)
    assert part(h).elr == (1,)
    h.register(1, incarnation="rebooted")  # node 1 lost power meanwhile
    assert (part(h).isr, part(h).elr, part(h).leader) == ((3,), (), 3)


def test_seed_2101_a_restart_moves_the_replica_into_the_elr_and_it_leads_after_the_isr_loses_power() -> None:
    """ISR {1, 2} (min 2): node 1 is SIGKILLed and restarts cleanly, which takes it out of the ISR
    into the ELR; then node 2, the leader and last ISR member, loses power."""
    h = cluster((2, 1, 3))
    shrink(h, (2, 1))
    h.register(1, incarnation="restarted", clean=True)
    assert (part(h).isr, part(h).elr) == ((2,), (1,))
    h.heartbeat(1)
    restart(h, 2, clean=False)
    after = part(h)
    assert (after.leader, after.isr, after.elr) == (1, (1,), ())


def test_replicas_enter_the_elr_only_below_min_isr_and_leave_it_when_the_isr_is_back() -> None:
    h = cluster((1, 2, 3))
    shrink(h, (1, 2))
    assert part(h).elr == ()  # ISR of 2 = min ISR: the HW still moves, 3 lags behind it
    shrink(h, (1,))
    assert part(h).elr == (2,)  # 3 is not eligible: it left while the HW could still move
    shrink(h, (1, 3))
    assert (part(h).isr, part(h).elr) == ((1, 3), ())


def set_min_isr(h: ControllerHarness, value: int) -> None:
    op = AlterConfigOp("min.insync.replicas", value=value)
    resource = AlterConfigsResource(ConfigResource(ConfigResourceType.TOPIC, "t"), (op,))
    assert h.send(IncrementalAlterConfigsRequest((resource,))).response.results[0].error is None


def test_lowering_min_isr_empties_the_elr() -> None:
    """The HW moves again once the ISR reaches the new min ISR: the ELR's copies would go stale."""
    h = cluster((1, 2, 3))
    shrink(h, (1,))
    assert part(h).elr == (2, 3)
    set_min_isr(h, 1)
    assert part(h).elr == ()


def test_an_eligible_leader_that_alone_reaches_min_isr_takes_the_others_out() -> None:
    """Both replicas fenced under min ISR 2 are eligible; min ISR then drops to 1. The first back leads
    alone, an ISR that moves the HW again, so the other's copy must not stay eligible."""
    h = cluster((1, 2), brokers=(1, 2))
    h.now_ms += 9000
    h.tick(h.now_ms)
    assert (part(h).isr, part(h).elr, part(h).leader) == ((), (1, 2), -1)
    set_min_isr(h, 1)
    assert part(h).elr == (1, 2)  # an empty ISR is below any min ISR
    h.heartbeat(1)
    assert (part(h).isr, part(h).elr, part(h).leader) == ((1,), (), 1)


def test_at_min_isr_1_only_the_last_member_is_eligible() -> None:
    h = cluster((1, 2), brokers=(1, 2))
    set_min_isr(h, 1)
    h.now_ms += 9000
    h.tick(h.now_ms)  # 1 is fenced first (the ISR {2} still moves the HW), then 2
    assert (part(h).isr, part(h).elr, part(h).leader) == ((), (2,), -1)
    h.heartbeat(1)
    assert part(h).leader == -1  # 1 lacks what 2 committed alone
    h.heartbeat(2)
    assert (part(h).isr, part(h).elr, part(h).leader) == ((2,), (), 2)


def test_when_every_eligible_replica_restarted_uncleanly_the_last_leader_is_elected() -> None:
    """Kafka's balanced recovery: with the ISR and ELR empty, the last leader is the likeliest whole copy."""
    h = cluster((1,), brokers=(1, 2))
    lapse(h, 1)
    assert (part(h).isr, part(h).elr, part(h).last_known_elr) == ((), (1,), (1,))
    restart(h, 1, clean=False)
    after = part(h)
    assert (after.leader, after.isr, after.elr, after.last_known_elr) == (1, (1,), (), ())


def test_an_offline_replica_leaves_the_elr() -> None:
    h = cluster((3, 1, 2))
    shrink(h, (3, 1))
    lapse(h, 1)
    h.heartbeat(1)
    assert part(h).elr == (1,)
    topic_id = h.committed.topic("t").topic_id
    h.send(BrokerHeartbeatRequest(1, h.broker_epochs[1], h.committed.offset, False, ((topic_id, 0),)))
    assert part(h).elr == ()
