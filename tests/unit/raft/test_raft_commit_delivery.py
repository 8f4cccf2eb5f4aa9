"""CommitDelivery, driven directly: which committed batches the Raft component hands out, and
when it announces a leader (its own leadership only once the log before it is applied)."""

from __future__ import annotations

from kraftpy.raft.commit_delivery import CommitDelivery, CommittedBatch, LeaderChange
from kraftpy.raft.log import ENTRY_OVERHEAD_BYTES, Entry, EntryKind
from kraftpy.raft.quorum_state import Role


def entries(*spec: tuple[int, EntryKind], start: int = 0) -> list[Entry]:
    return [Entry(start + i, epoch, f"r{start + i}".encode(), kind) for i, (epoch, kind) in enumerate(spec)]


D, LC = EntryKind.DATA, EntryKind.LEADER_CHANGE


def test_runs_split_at_leader_changes_and_epochs_and_drop_the_leader_change_entries() -> None:
    delivery = CommitDelivery(node_id=1)
    delivery.committed(7)
    log = entries((1, LC), (1, D), (1, D), (2, D), (2, LC), (2, D), (3, D))
    batches, size_bytes, end = delivery.runs(log, below_offset=7)
    assert batches == [
        CommittedBatch(1, 2, 1, [b"r1", b"r2"]),
        CommittedBatch(3, 3, 2, [b"r3"]),
        CommittedBatch(5, 5, 2, [b"r5"]),
        CommittedBatch(6, 6, 3, [b"r6"]),
    ]
    assert size_bytes == sum(e.size_bytes for e in log) and end == 7


def test_runs_stop_at_the_commit_point_and_report_nothing_when_nothing_counts() -> None:
    delivery = CommitDelivery(node_id=1)
    log = entries((1, D), (1, D), (1, D))
    batches, size_bytes, end = delivery.runs(log, below_offset=2)
    assert batches == [CommittedBatch(0, 1, 1, [b"r0", b"r1"])]
    assert size_bytes == 2 * (2 + ENTRY_OVERHEAD_BYTES) and end == 2
    assert delivery.runs(log, below_offset=0) == ([], 0, None)


def test_a_batch_counts_as_applied_before_the_listeners_see_it() -> None:
    delivery = CommitDelivery(node_id=1)
    delivery.committed(3)
    assert delivery.behind
    (batch,) = delivery.runs(entries((1, D), (1, D)), below_offset=3)[0]
    delivery.delivered(batch)
    assert delivery.applied == 2  # a listener may snapshot at offset 2 from inside handle_commit
    delivery.read_through(3)
    assert not delivery.behind


def test_a_loaded_snapshot_moves_applied_and_the_commit_target() -> None:
    delivery = CommitDelivery(node_id=1)
    delivery.start(applied=4, high_watermark=9)
    assert (delivery.applied, delivery.commit_target) == (4, 9)
    delivery.snapshot_loaded(12)
    assert (delivery.applied, delivery.commit_target) == (12, 12)
    delivery.snapshot_loaded(5)
    assert (delivery.applied, delivery.commit_target) == (12, 12)


def test_own_leadership_is_announced_once_the_log_before_it_is_applied() -> None:
    delivery = CommitDelivery(node_id=1)
    delivery.start(applied=0, high_watermark=0)
    assert delivery.role_changed(Role.LEADER, 3, 1, log_end_offset=10) is None
    assert delivery.leader_ready(Role.LEADER, 3) is None  # entries below 10 are not applied yet
    delivery.read_through(10)
    assert delivery.leader_ready(Role.LEADER, 3) is None, "its own first entry (offset 10) is not applied"
    delivery.read_through(11)
    assert delivery.leader_ready(Role.LEADER, 3) == LeaderChange(1, 3)
    assert delivery.leader_ready(Role.LEADER, 3) is None, "announced once"


def test_a_leadership_lost_before_it_was_announced_is_never_announced() -> None:
    delivery = CommitDelivery(node_id=1)
    delivery.role_changed(Role.LEADER, 3, 1, log_end_offset=0)
    delivery.read_through(5)
    assert delivery.leader_ready(Role.RESIGNED, 3) is None
    assert delivery.leader_ready(Role.LEADER, 4) is None, "a later epoch has its own first entry"
    assert delivery.role_changed(Role.RESIGNED, 3, 1, log_end_offset=5) == LeaderChange(None, 3)
    assert delivery.leader_ready(Role.LEADER, 3) is None, "the pending leadership was dropped"


def test_other_changes_are_announced_at_once_and_only_when_they_change() -> None:
    delivery = CommitDelivery(node_id=1)
    assert delivery.role_changed(Role.FOLLOWER, 2, 3, log_end_offset=0) == LeaderChange(3, 2)
    assert delivery.role_changed(Role.FOLLOWER, 2, 3, log_end_offset=4) is None
    assert delivery.role_changed(Role.PROSPECTIVE, 2, 3, log_end_offset=4) is None, "same leader, same epoch"
    assert delivery.role_changed(Role.CANDIDATE, 3, None, log_end_offset=4) == LeaderChange(None, 3)
    # a node that led epoch 4 and restarted is told nothing about itself as leader
    assert delivery.role_changed(Role.UNATTACHED, 4, 1, log_end_offset=4) == LeaderChange(None, 4)
