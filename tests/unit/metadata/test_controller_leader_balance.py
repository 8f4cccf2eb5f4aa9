"""The active controller restores leadership on its own (issue 12): preferred leaders a bounded,
configurable delay after they are back in the ISR, and unclean leaders for leaderless partitions
whose topic allows it (Kafka 3.9's periodic maybeElectUncleanLeaders). Pure: a harness, no clock."""

from __future__ import annotations

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from tests.unit.metadata.test_controller_partitions import alter_isr, part

DELAY_MS = 5_000


def tick_alive(h: ControllerHarness, now_ms: int):
    """Every broker heartbeats at `now_ms`, then the controller ticks (no session expires meanwhile)."""
    h.now_ms = now_ms
    h.heartbeat_all()
    return h.tick(now_ms)


def restarted_broker_back_in_isr(config: ControllerConfig) -> tuple[ControllerHarness, list[int]]:
    """Broker 0 restarts (losing its leaderships) and its new leaders take it back into their ISRs."""
    h = ControllerHarness(config)
    h.start_brokers([0, 1, 2])
    h.send(CreateTopicsRequest((CreatableTopic("r", 9, 3),)))
    h.register(0, incarnation="restart")
    h.heartbeat(0)
    parts = h.committed.topic("r").partitions
    moved = [p for p, reg in enumerate(parts) if reg.replicas[0] == 0]
    assert moved and all(parts[p].leader != 0 for p in moved)
    tid = h.committed.topic("r").topic_id
    for p in moved:
        reg = h.committed.topic("r").partitions[p]
        item = AlterPartitionItem(tid, p, reg.leader_epoch, (*reg.isr, 0), reg.partition_epoch)
        h.send(AlterPartitionRequest(reg.leader, h.broker_epochs[reg.leader], (item,)))
    return h, moved


def test_preferred_leaders_return_after_the_delay_not_the_imbalance_interval() -> None:
    config = ControllerConfig(
        cluster_id="c", metadata_max_idle_interval_ms=0, preferred_leader_election_delay_ms=DELAY_MS
    )
    h, moved = restarted_broker_back_in_isr(config)
    start = h.now_ms
    assert tick_alive(h, start).records == ()  # first seen: due in DELAY_MS
    assert h.controller.next_deadline_ms(start) <= start + DELAY_MS
    assert tick_alive(h, start + DELAY_MS - 1).records == ()
    result = tick_alive(h, start + DELAY_MS)
    assert sorted(r.partition for r in result.records) == moved and all(r.leader == 0 for r in result.records)
    assert all(h.committed.topic("r").partitions[p].leader == 0 for p in moved)
    assert tick_alive(h, start + 2 * DELAY_MS).records == ()  # nothing left to move


def test_no_preferred_elections_without_auto_rebalance() -> None:
    config = ControllerConfig(
        cluster_id="c",
        metadata_max_idle_interval_ms=0,
        preferred_leader_election_delay_ms=DELAY_MS,
        auto_leader_rebalance_enable=False,
    )
    h, _ = restarted_broker_back_in_isr(config)
    assert tick_alive(h, h.now_ms).records == () and tick_alive(h, h.now_ms + 10 * DELAY_MS).records == ()


def test_the_periodic_check_elects_unclean_leaders_where_the_topic_allows() -> None:
    h = ControllerHarness(ControllerConfig(cluster_id="c", metadata_max_idle_interval_ms=0))
    h.start_brokers([0, 1, 2])
    h.send(CreateTopicsRequest((CreatableTopic("t", assignments=((0, 1, 2), (1, 2, 0))),)))
    alter_isr(h, 0, (0,))
    h.heartbeat(0, want_shutdown=True)
    assert part(h).leader == -1  # the only ISR member left; unclean election not allowed yet
    h.heartbeat_all()
    assert all(r.partition != 0 for r in h.tick(h.now_ms).records)
    resource = ConfigResource(ConfigResourceType.TOPIC, "t")
    op = AlterConfigOp("unclean_leader_election_enable", value=True)
    h.send(IncrementalAlterConfigsRequest((AlterConfigsResource(resource, (op,)),)))
    assert part(h).leader == -1  # a config change elects nobody by itself
    h.heartbeat_all()
    h.tick(h.now_ms)
    assert part(h).leader in (1, 2)
