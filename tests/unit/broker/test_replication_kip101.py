"""KIP-101's two failure scenarios, KIP-279's back-to-back failover, and an unclean election, step by step.

Each test drives real cores (Partition) over in-memory logs that lose their
unflushed tail on crash; the test plays the controller and the network.
Every scenario also computes what truncation to the high watermark (the
pre-KIP-101 rule) would have done, to show the case really needs epochs.
"""

from __future__ import annotations

from kraftpy.broker.replication import EpochEndOffset, PartitionRegistration, ReplicationConfig
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from tests.simulation.replication_sim import ScriptedReplica

A, B = 0, 1


def batch(value: str) -> bytes:
    return build_batch([(None, value.encode(), (), 1_000)])


def reg(leader: int, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int) -> PartitionRegistration:
    return PartitionRegistration((A, B), isr, leader, leader_epoch, partition_epoch)


def replicas() -> tuple[ScriptedReplica, ScriptedReplica]:
    config = ReplicationConfig(min_insync_replicas=1)
    return ScriptedReplica(A, config), ScriptedReplica(B, config)


def assert_identical_below_high_watermarks(*nodes: ScriptedReplica) -> None:
    """No two replicas hold different records at an offset below both their HWs."""
    for x in nodes:
        for y in nodes:
            for offset in range(min(x.log.high_watermark, y.log.high_watermark)):
                assert x.log.batch_at(offset) == y.log.batch_at(offset), (x.id, y.id, offset)


def test_scenario_1_restarted_follower_keeps_the_committed_record_and_leads_with_it() -> None:
    a, b = replicas()
    a.become(reg(A, 0, (A, B), 0))
    b.become(reg(A, 0, (A, B), 0))
    a.produce("m1", batch("m1"))
    a.produce("m2", batch("m2"))
    b.fetch_from(a)  # B gets m1, m2
    b.log.flush()  # both records are on B's disk; B's HW checkpoint says 0
    assert b.log.high_watermark == 0
    b.fetch_from(a)  # B's fetch at offset 2 lets A's HW reach 2: m2 is acknowledged ...
    assert a.log.high_watermark == 2 and a.completed["m2"].error == ErrorCode.NONE
    # ... but B crashes before its HW checkpoint catches up: after the restart its HW is stale.
    b.crash()
    b.restart()
    assert b.log.high_watermark == 0 and b.log.log_end_offset == 2
    # Pre-KIP-101, B would now truncate to its HW (0) and lose m1 and m2.
    b.become(reg(A, 0, (A, B), 0))
    assert b.truncations == [] and b.log.log_end_offset == 2
    # A dies before B fetches again; B (still in the ISR) is elected.
    b.become(reg(B, 1, (B,), 1))
    assert b.records() == [(0, b"m1"), (1, b"m2")]
    assert b.log.high_watermark == 2  # alone in the ISR, its HW covers its log
    assert b.log.cache.entries[-1].epoch == 1 and b.log.cache.entries[-1].start_offset == 2


def test_scenario_2_replicas_with_different_unflushed_tails_never_diverge_below_the_hw() -> None:
    a, b = replicas()
    a.become(reg(A, 0, (A, B), 0))
    b.become(reg(A, 0, (A, B), 0))
    a.produce("m1", batch("m1"))
    b.fetch_from(a)
    b.fetch_from(a)
    a.log.flush()
    b.log.flush()  # m1 is on both disks, HW 1 everywhere
    a.produce("m2", batch("m2"))
    b.fetch_from(a)  # B holds m2 in memory only
    b.fetch_from(a)  # A's HW -> 2 (m2 committed); B learns HW 2 too
    a.log.flush()  # A's disk has m2 and HW checkpoint 2; B's disk does not
    assert a.log.high_watermark == 2
    # Power loss: both crash. B keeps only m1; A keeps m1, m2 with HW 2.
    a.crash()
    b.crash()
    assert b.records() == [(0, b"m1")] and a.records() == [(0, b"m1"), (1, b"m2")]
    a.restart()
    b.restart()
    # B comes back first and is elected; it writes m3 at offset 1.
    b.become(reg(B, 1, (B,), 1))
    b.produce("m3", batch("m3"))
    assert b.records() == [(0, b"m1"), (1, b"m3")]
    # Pre-KIP-101, A would truncate to its HW (2): it keeps m2 at offset 1, B has m3 there, both HWs 2.
    assert a.log.high_watermark == 2 and a.log.batch_at(1) != b.log.batch_at(1)
    a.become(reg(B, 1, (B, A), 2))
    b.become(reg(B, 1, (B, A), 2))
    first = a.fetch_from(b)
    assert first.diverging_epoch == EpochEndOffset(0, 1)
    assert a.truncations == [1]
    assert_identical_below_high_watermarks(a, b)
    a.fetch_from(b)
    a.fetch_from(b)
    assert_identical_below_high_watermarks(a, b)
    assert a.records() == b.records() == [(0, b"m1"), (1, b"m3")]
    assert a.log.high_watermark == b.log.high_watermark == 2


def test_kip_279_back_to_back_failover_detects_divergence_across_epochs() -> None:
    a, b = replicas()
    a.become(reg(A, 1, (A, B), 0))
    b.become(reg(A, 1, (A, B), 0))
    a.produce("m1", batch("m1"))
    b.fetch_from(a)
    b.fetch_from(a)  # both hold m1 (epoch 1), HW 1
    a.produce("m2", batch("m2"))  # offset 1, epoch 1, not replicated
    # Fast failover: B leads epoch 2 and writes m3 at offset 1, replicated nowhere ...
    b.become(reg(B, 2, (B, A), 1))
    b.produce("m3", batch("m3"))
    # ... and at once A leads epoch 3 (B never served a fetch) and writes m4 at offset 2.
    a.become(reg(A, 3, (A, B), 2))
    a.produce("m4", batch("m4"))
    assert a.records() == [(0, b"m1"), (1, b"m2"), (2, b"m4")]
    assert b.records() == [(0, b"m1"), (1, b"m3")]
    b.become(reg(A, 3, (A, B), 2))
    # B fetches at 2 with last epoch 2. A never saw epoch 2: its answer is (1, 2), the end of epoch 1 on A.
    # Pre-KIP-279 B would truncate to that offset, 2 = its LEO, keep m3 and diverge forever.
    answer = b.fetch_from(a)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (1, 2)
    # KIP-279: B truncates to min(A's end of epoch 1, B's own end of epoch 1) = 1, dropping m3.
    assert b.truncations == [1]
    b.fetch_from(a)
    b.fetch_from(a)
    assert b.records() == a.records() == [(0, b"m1"), (1, b"m2"), (2, b"m4")]
    assert a.log.high_watermark == 3 and b.log.high_watermark == 3


def test_divergence_in_an_epoch_the_follower_never_saw_takes_two_rounds() -> None:
    a, b = replicas()
    a.become(reg(A, 1, (A, B), 0))
    b.become(reg(A, 1, (A, B), 0))
    for i in range(4):
        a.produce(f"e1-{i}", batch(f"e1-{i}"))
    b.fetch_from(a)
    b.fetch_from(a)  # offsets 0..3 (epoch 1) on both
    a.become(reg(A, 2, (A, B), 1))
    a.produce("e2-4", batch("e2-4"))
    a.produce("e2-5", batch("e2-5"))  # offsets 4, 5 in epoch 2, only on A
    b.become(reg(B, 3, (B, A), 2))
    for i in range(4, 7):
        b.produce(f"e3-{i}", batch(f"e3-{i}"))  # offsets 4..6 in epoch 3, only on B
    a.become(reg(A, 4, (A, B), 3))
    a.produce("e4-6", batch("e4-6"))
    a.produce("e4-7", batch("e4-7"))
    b.become(reg(A, 4, (A, B), 3))
    # Round 1: A answers epoch 2 ends at 6; B has no epoch 2, so it cuts to the end of its epoch 1 (4) and asks again.
    first = b.fetch_from(a)
    assert (first.diverging_epoch.epoch, first.diverging_epoch.end_offset) == (2, 6)
    assert b.truncations == [4] and b.log.cache.latest_epoch == 1
    # Round 2: with last epoch 1 at offset 4 the logs agree; B fetches A's epochs 2 and 4.
    second = b.fetch_from(a)
    assert second.diverging_epoch is None and second.error == ErrorCode.NONE
    b.fetch_from(a)
    assert b.log.batches == a.log.batches
    assert [e.epoch for e in b.log.cache.entries] == [1, 2, 4]


def test_unclean_leader_with_a_shorter_log_truncates_the_others_through_diverging_epoch() -> None:
    a, b = replicas()
    a.become(reg(A, 0, (A, B), 0))
    b.become(reg(A, 0, (A, B), 0))
    for i in range(2):
        a.produce(f"m{i}", batch(f"m{i}"))
    b.fetch_from(a)
    b.fetch_from(a)  # B holds m0, m1 ...
    a.become(reg(A, 0, (A,), 1))  # ... then drops out of the ISR
    for i in range(2, 5):
        a.produce(f"m{i}", batch(f"m{i}"))
    assert a.log.high_watermark == 5  # committed on A alone
    # A dies; the topic allows unclean election, so out-of-ISR B leads with a log shorter than the old HW.
    b.become(reg(B, 1, (B,), 2))
    leader = b.partition.leader
    assert leader.high_watermark == 2 and leader.high_watermark_known
    b.produce("n2", batch("n2"))
    # A comes back as a follower with HW 5 and m2..m4; B's history of epoch 0 ends at 2.
    a.become(reg(B, 1, (B, A), 3))
    answer = a.fetch_from(b)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, 2)
    assert a.truncations == [2] and a.log.high_watermark == 2  # HW never above the log
    a.fetch_from(b)
    a.fetch_from(b)
    # m2..m4 were committed and are gone: the price of unclean election.
    assert a.records() == b.records() == [(0, b"m0"), (1, b"m1"), (2, b"n2")]
    assert_identical_below_high_watermarks(a, b)
