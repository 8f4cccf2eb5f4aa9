"""AlterPartition, ElectLeaders, automatic preferred-leader rebalance and producer-id blocks."""

from __future__ import annotations

import pytest

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    ConfigResource,
    CreatableTopic,
    CreateTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.records import PartitionChangeRecord, ProducerIdsRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError

CONFIG = ControllerConfig(
    cluster_id="test-cluster", auto_leader_rebalance_enable=False, metadata_max_idle_interval_ms=0
)


@pytest.fixture
def h() -> ControllerHarness:
    harness = ControllerHarness(CONFIG)
    harness.start_brokers([0, 1, 2])
    result = harness.send(CreateTopicsRequest((CreatableTopic("t", assignments=((0, 1, 2), (1, 2, 0))),)))
    assert result.response.results[0].error is None
    return harness


def topic_id(h):
    return h.committed.topic("t").topic_id


def part(h, p: int = 0):
    return h.committed.topic("t").partitions[p]


def alter_isr(h, broker: int, isr, *, p: int = 0, leader_epoch=None, partition_epoch=None, broker_epoch=None):
    current = part(h, p)
    item = AlterPartitionItem(
        topic_id(h),
        p,
        current.leader_epoch if leader_epoch is None else leader_epoch,
        tuple(isr),
        current.partition_epoch if partition_epoch is None else partition_epoch,
    )
    epoch = h.broker_epochs[broker] if broker_epoch is None else broker_epoch
    return h.send(AlterPartitionRequest(broker, epoch, (item,)))


# --- AlterPartition --------------------------------------------------------------------------------


def test_leader_shrinks_and_expands_the_isr(h) -> None:
    result = alter_isr(h, 0, (0, 2))
    (item,) = result.response.results
    assert item.error is None and result.records == (PartitionChangeRecord(topic_id(h), 0, isr=(0, 2)),)
    assert (item.leader, item.leader_epoch, item.isr, item.partition_epoch) == (0, 0, (0, 2), 1)
    assert part(h).isr == (0, 2) and part(h).partition_epoch == 1 and part(h).leader_epoch == 0
    result = alter_isr(h, 0, (0, 2, 1))
    assert result.response.results[0].error is None and part(h).isr == (0, 2, 1) and part(h).partition_epoch == 2


def test_unchanged_isr_writes_nothing(h) -> None:
    result = alter_isr(h, 0, (0, 1, 2))
    assert result.records == () and result.response.results[0].partition_epoch == 0


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"leader_epoch": -1}, ErrorCode.FENCED_LEADER_EPOCH),
        ({"leader_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"partition_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"broker": 1}, ErrorCode.INVALID_REQUEST),
        ({"isr": (0, 7)}, ErrorCode.INVALID_REQUEST),
        ({"isr": (0, 0)}, ErrorCode.INVALID_REQUEST),
        ({"isr": (1, 2)}, ErrorCode.INVALID_REQUEST),
        ({"isr": ()}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_alter_partition_rejections(h, kwargs, code) -> None:
    args = {"broker": 0, "isr": (0, 1)} | kwargs
    broker, isr = args.pop("broker"), args.pop("isr")
    result = alter_isr(h, broker, isr, **args)
    (item,) = result.response.results
    assert item.error.code == code and result.records == ()


def test_stale_partition_epoch_is_invalid_update_version(h) -> None:
    alter_isr(h, 0, (0, 1))
    result = alter_isr(h, 0, (0,), partition_epoch=0)
    assert result.response.results[0].error.code == ErrorCode.INVALID_UPDATE_VERSION


def test_deposed_leader_gets_fenced_leader_epoch(h) -> None:
    h.send(ElectLeadersRequest(ElectionType.PREFERRED, (("t", 0),)))
    alter_isr(h, 0, (0, 1))
    h.register(0, incarnation="restart")  # leadership moves to 1, epoch 1
    result = alter_isr(h, 0, (0,), leader_epoch=0, broker_epoch=h.broker_epochs[0])
    assert result.response.results[0].error.code == ErrorCode.FENCED_LEADER_EPOCH


def test_expanding_with_a_fenced_broker_is_ineligible_replica(h) -> None:
    alter_isr(h, 0, (0, 1))
    h.heartbeat(2, want_shutdown=True)
    result = alter_isr(h, 0, (0, 1, 2))
    assert result.response.results[0].error.code == ErrorCode.INELIGIBLE_REPLICA


def test_unknown_partitions_and_broker_checks(h) -> None:
    import uuid

    request = AlterPartitionRequest(
        0,
        h.broker_epochs[0],
        (
            AlterPartitionItem(uuid.UUID(int=99), 0, 0, (0,), 0),
            AlterPartitionItem(topic_id(h), 9, 0, (0,), 0),
        ),
    )
    codes = [r.error.code for r in h.send(request).response.results]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    stale = h.send(AlterPartitionRequest(0, 999, ()))
    assert isinstance(stale.response, KafkaError) and stale.response.code == ErrorCode.STALE_BROKER_EPOCH
    unknown = h.send(AlterPartitionRequest(7, 1, ()))
    assert unknown.response.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_two_changes_to_one_partition_in_one_request_chain(h) -> None:
    tid = topic_id(h)
    request = AlterPartitionRequest(
        0,
        h.broker_epochs[0],
        (
            AlterPartitionItem(tid, 0, 0, (0, 1), 0),
            AlterPartitionItem(tid, 0, 0, (0,), 1),
        ),
    )
    result = h.send(request)
    assert [r.error for r in result.response.results] == [None, None] and part(h).isr == (0,)


# --- ElectLeaders ----------------------------------------------------------------------------------


def elect(h, kind, partitions=(("t", 0),)):
    result = h.send(ElectLeadersRequest(kind, partitions))
    return result, result.response.results


def test_preferred_election(h) -> None:
    _, (item,) = elect(h, ElectionType.PREFERRED)
    assert item.error.code == ErrorCode.ELECTION_NOT_NEEDED
    h.register(0, incarnation="restart")  # leadership moves away from 0
    assert part(h).leader == 1
    _, (item,) = elect(h, ElectionType.PREFERRED)
    assert item.error.code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # 0 is fenced and out of the ISR
    h.heartbeat(0)  # unfenced, but not back in the ISR yet
    _, (item,) = elect(h, ElectionType.PREFERRED)
    assert item.error.code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    alter_isr(h, 1, (1, 2, 0))
    _result, (item,) = elect(h, ElectionType.PREFERRED)
    assert item.error is None and item.leader == 0 and part(h).leader == 0 and part(h).leader_epoch == 2
    _, items = elect(h, ElectionType.PREFERRED, (("t", 5), ("nope", 0)))
    assert [i.error.code for i in items] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2


def test_unclean_election(h) -> None:
    _, (item,) = elect(h, ElectionType.UNCLEAN)
    assert item.error.code == ErrorCode.ELECTION_NOT_NEEDED  # it has a leader
    alter_isr(h, 0, (0,))
    h.heartbeat(0, want_shutdown=True)  # 0 leaves; the partition is leaderless, 0 an eligible leader
    assert (part(h).leader, part(h).isr, part(h).elr) == (-1, (), (0,))
    _, (item,) = elect(h, ElectionType.PREFERRED)
    assert item.error.code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    _result, (item,) = elect(h, ElectionType.UNCLEAN)
    assert item.error is None and item.leader == 1 and (part(h).leader, part(h).isr, part(h).elr) == (1, (1,), ())


def test_unclean_election_without_live_replicas(h) -> None:
    alter_isr(h, 0, (0,))
    for b in (0, 1, 2):
        h.heartbeat(b, want_shutdown=True)
    _, (item,) = elect(h, ElectionType.UNCLEAN)
    assert item.error.code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_elect_all_partitions_skips_those_already_preferred(h) -> None:
    h.register(0, incarnation="restart")
    h.heartbeat(0)
    alter_isr(h, 1, (1, 2, 0))
    _result, results = elect(h, ElectionType.PREFERRED, None)
    assert [(r.topic, r.partition, r.error, r.leader) for r in results] == [("t", 0, None, 0)]


def test_automatic_unclean_election_follows_the_topic_config(h) -> None:
    resource = ConfigResource(ConfigResourceType.TOPIC, "t")
    h.send(
        IncrementalAlterConfigsRequest(
            (AlterConfigsResource(resource, (AlterConfigOp("unclean_leader_election_enable", value=True),)),)
        )
    )
    alter_isr(h, 0, (0,))
    h.heartbeat(0, want_shutdown=True)
    assert (part(h).leader, part(h).isr) == (1, (1,))  # unclean: an out-of-ISR live replica leads


# --- automatic rebalance -----------------------------------------------------------------------------


def test_auto_rebalance_moves_leadership_back_to_preferred_replicas() -> None:
    config = ControllerConfig(cluster_id="test-cluster", metadata_max_idle_interval_ms=0)
    h = ControllerHarness(config)
    h.start_brokers([0, 1, 2])
    h.send(CreateTopicsRequest((CreatableTopic("r", 9, 3),)))
    h.register(0, incarnation="restart")
    h.heartbeat(0)
    parts = h.committed.topic("r").partitions
    moved = [p for p, reg in enumerate(parts) if reg.replicas[0] == 0]
    assert all(parts[p].leader != 0 for p in moved)
    tid = h.committed.topic("r").topic_id
    for p in moved:  # the new leaders let 0 back into the ISR
        reg = h.committed.topic("r").partitions[p]
        item = AlterPartitionItem(tid, p, reg.leader_epoch, (*reg.isr, 0), reg.partition_epoch)
        h.send(AlterPartitionRequest(reg.leader, h.broker_epochs[reg.leader], (item,)))
    h.now_ms = 299_000
    h.heartbeat_all()
    assert h.tick(299_999).records == ()
    result = h.tick(300_000)
    assert len(result.records) == len(moved) and all(r.leader == 0 for r in result.records)
    assert all(h.committed.topic("r").partitions[p].leader == 0 for p in moved)
    assert h.controller.next_deadline_ms(h.now_ms) <= 600_000


def test_rebalance_respects_the_per_broker_threshold() -> None:
    from kraftpy.metadata.controller.replication_control import imbalanced_partitions

    h = ControllerHarness(CONFIG)
    h.start_brokers([0, 1])
    h.send(CreateTopicsRequest((CreatableTopic("r", assignments=((0, 1),) * 10),)))
    tid = h.committed.topic("r").topic_id
    h.send(ElectLeadersRequest(ElectionType.PREFERRED, None))
    # Move one of broker 0's ten preferred partitions to 1: 10% is not above the 10% threshold.
    from kraftpy.metadata.image.metadata_delta import apply_records
    from kraftpy.metadata.records import PartitionChangeRecord as Change

    image = apply_records(h.committed, [Change(tid, 0, leader=1)])
    assert imbalanced_partitions(image, 10, 1) == []
    image = apply_records(image, [Change(tid, 1, leader=1)])
    assert [c.partition for c in imbalanced_partitions(image, 10, 1)] == [0, 1]


# --- producer ids --------------------------------------------------------------------------------------


def test_producer_id_blocks_are_monotonic_across_failover(h) -> None:
    first = h.send(AllocateProducerIdsRequest(1, h.broker_epochs[1]))
    assert first.response == AllocateProducerIdsResponse(0, 1000)
    assert first.records == (ProducerIdsRecord(1, h.broker_epochs[1], 1000),)
    h.auto_commit = False
    lost = h.send(AllocateProducerIdsRequest(2, h.broker_epochs[2]))
    assert lost.response == AllocateProducerIdsResponse(1000, 1000)
    h.fail_over()  # the uncommitted block was never answered
    h.auto_commit = True
    again = h.send(AllocateProducerIdsRequest(2, h.broker_epochs[2]))
    assert again.response == AllocateProducerIdsResponse(1000, 1000)
    assert h.send(AllocateProducerIdsRequest(2, h.broker_epochs[2])).response.producer_id_start == 2000
    stale = h.send(AllocateProducerIdsRequest(2, 12345))
    assert stale.response.code == ErrorCode.STALE_BROKER_EPOCH
