"""The leader's HW advances only while the committed ISR is at the effective min ISR (Kafka 4.x, KIP-966).

Eligible leader replicas rest on it: a replica that leaves an ISR below min ISR holds every committed record.
test_replication_produce.py has the acks=all side; here the HW itself, for every way the ISR, the replicas
or min ISR can change, and what consumers see meanwhile.
"""

from __future__ import annotations

from kraftpy.broker.replication import (
    AlterPartitionResponse,
    CompleteProduce,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ReplicationConfig,
    SendAlterPartition,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.model import CONSUMER_REPLICA_ID
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import parse_header

EPOCH = 4
REPLICAS = (0, 1, 2)


def reg(isr: tuple[int, ...], partition_epoch: int = 1, replicas: tuple[int, ...] = REPLICAS) -> PartitionRegistration:
    return PartitionRegistration(replicas, isr, 0, EPOCH, partition_epoch)


def leader(isr: tuple[int, ...], min_isr: int = 2, leo: int = 0, hw: int = 0, replicas=REPLICAS) -> Partition:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=1_000))
    partition.apply_registration(reg(isr, replicas=replicas), LogState(0, leo, hw), 0)
    return partition


def produce(partition: Partition, rid: str, acks: int, count: int = 1) -> list:
    header = parse_header(build_batch([(None, b"v", (), 1_000)] * count))
    return partition.handle_produce(ProduceRequest(rid, header, acks=acks, timeout_ms=5_000), 0)


def fetch(partition: Partition, replica: int, offset: int, now: int = 1) -> list:
    return list(partition.handle_fetch(FetchPartition(replica, offset, EPOCH), None, now).actions)


def consumer_bound(partition: Partition) -> int:
    """How far a consumer may read (Kafka: up to the HW)."""
    return partition.handle_fetch(FetchPartition(CONSUMER_REPLICA_ID, 0, EPOCH), None, 1).max_offset


def proposals(actions: list) -> list:
    return [a.request for a in actions if isinstance(a, SendAlterPartition)]


def test_acks_1_and_0_records_below_min_isr_are_answered_but_consumers_see_them_only_at_min_isr() -> None:
    partition = leader(isr=(0,))
    answers = {a.request_id: a for a in produce(partition, "one", 1, 2) + produce(partition, "zero", 0)}
    assert (answers["one"].error, answers["zero"].error) == (ErrorCode.NONE, ErrorCode.NONE)
    assert partition.leader.log_end_offset == 3
    # Alone in the ISR the leader would hold the only copy: nothing is committed, nothing is readable.
    assert partition.high_watermark == 0 and consumer_bound(partition) == 0
    [expand] = proposals(fetch(partition, 1, 3))
    assert partition.high_watermark == 0  # the follower counts only once the controller committed it
    actions = partition.on_alter_partition_response(expand, AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1), 2), 2)
    assert UpdateHighWatermark(3) in actions and consumer_bound(partition) == 3


def test_a_shrink_to_min_isr_still_moves_the_hw_and_one_below_stops_it() -> None:
    partition = leader(isr=(0, 1, 2))
    produce(partition, "a", 1)
    fetch(partition, 1, 1)
    shrink = proposals(partition.tick(1_001))  # 1 fetched at the leader's end: 2 lags
    assert [r.isr for r in shrink] == [(0, 1)]
    partition.on_alter_partition_response(shrink[0], AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1), 2), 1_002)
    assert partition.high_watermark == 1  # ISR {0, 1} is at min ISR 2
    produce(partition, "b", 1)
    shrink = proposals(partition.tick(2_100))  # now 1 lags too
    assert [r.isr for r in shrink] == [(0,)]
    partition.on_alter_partition_response(shrink[0], AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0,), 3), 2_101)
    # Without the rule the HW would jump to the leader's end (2): follower 1 would lack a committed record.
    assert partition.high_watermark == 1 and partition.leader.log_end_offset == 2


def test_an_isr_grown_back_by_the_metadata_log_moves_the_hw_to_what_the_isr_holds() -> None:
    """The controller's PartitionChange may arrive before its AlterPartition answer: same re-check."""
    partition = leader(isr=(0,), leo=3)
    [expand] = proposals(fetch(partition, 1, 3))
    assert expand.isr == (0, 1) and partition.high_watermark == 0
    produce(partition, "later", 1, 2)  # the leader is at 5, follower 1 still at 3
    actions = partition.apply_registration(reg((0, 1), partition_epoch=2), LogState(0, 5, 0), 2)
    assert UpdateHighWatermark(3) in actions and partition.high_watermark == 3
    fetch(partition, 1, 5)
    assert partition.high_watermark == 5


def test_a_new_leader_below_min_isr_keeps_its_follower_time_hw() -> None:
    """An eligible leader replica elected into an ISR of itself (KIP-966) must not commit its own tail."""
    partition = leader(isr=(0,), leo=7, hw=2)
    assert partition.high_watermark == 2 and consumer_bound(partition) == 2
    assert partition.list_offsets_latest() == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)


def test_min_isr_above_the_replica_count_counts_as_the_replica_count() -> None:
    partition = leader(isr=(0, 1), min_isr=3, replicas=(0, 1))
    # acks=all is accepted with both replicas in the ISR (Kafka's effectiveMinIsr), and succeeds.
    assert not [a for a in produce(partition, "all", -1) if isinstance(a, CompleteProduce)]
    [done] = [a for a in fetch(partition, 1, 1) if isinstance(a, CompleteProduce)]
    assert done.error == ErrorCode.NONE and partition.high_watermark == 1
    produce(partition, "one", 1)
    [shrink] = proposals(partition.tick(1_002))
    partition.on_alter_partition_response(shrink, AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0,), 2), 1_003)
    assert partition.high_watermark == 1 and partition.leader.log_end_offset == 2  # one of two: below


def test_raising_min_isr_stops_the_hw_and_lowering_it_lets_it_move_at_once() -> None:
    partition = leader(isr=(0, 1), min_isr=2)
    produce(partition, "a", 1)
    assert partition.update_config(ReplicationConfig(min_insync_replicas=3)) == []
    fetch(partition, 1, 1)
    assert partition.high_watermark == 0  # ISR {0, 1} is below min ISR 3 now
    actions = partition.update_config(ReplicationConfig(min_insync_replicas=2))
    assert actions == [UpdateHighWatermark(1)] and consumer_bound(partition) == 1


def test_a_waiting_acks_all_produce_completes_when_min_isr_is_lowered() -> None:
    partition = leader(isr=(0, 1), min_isr=2)
    produce(partition, "all", -1)
    shrink = proposals(partition.tick(1_001))
    partition.on_alter_partition_response(shrink[0], AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0,), 2), 1_002)
    assert partition.high_watermark == 0
    done = [
        a for a in partition.update_config(ReplicationConfig(min_insync_replicas=1)) if isinstance(a, CompleteProduce)
    ]
    assert [(d.request_id, d.error) for d in done] == [("all", ErrorCode.NONE)]


def test_under_min_isr_is_an_isr_smaller_than_min_isr_not_equal_to_it() -> None:
    assert not leader(isr=(0, 1), min_isr=2).leader.under_min_isr
    assert leader(isr=(0,), min_isr=2).leader.under_min_isr
    assert not leader(isr=(0, 1, 2), min_isr=3).leader.under_min_isr
    assert leader(isr=(0, 1), min_isr=3).leader.under_min_isr
    # min ISR is capped at the replica count: three replicas all in sync are never under it
    assert not leader(isr=(0, 1, 2), min_isr=5).leader.under_min_isr
    assert leader(isr=(0, 1), min_isr=5).leader.under_min_isr
