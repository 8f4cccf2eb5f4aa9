"""When a node snapshots its metadata image (metadata/controller/snapshot_policy.py): at either
bound, exactly; one snapshot at a time; what is applied meanwhile counts toward the next; a failed
snapshot changes nothing but lets the next bound try again; the last snapshot offset only grows."""

from __future__ import annotations

import pytest

from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy


@pytest.mark.parametrize(("max_bytes", "max_records"), [(0, 1), (1, 0), (-5, 10)])
def test_bounds_must_be_positive(max_bytes: int, max_records: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        SnapshotPolicy(max_new_record_bytes=max_bytes, max_new_records=max_records)
    SnapshotPolicy(max_new_record_bytes=1, max_new_records=1)  # the least allowed


def test_a_snapshot_is_due_at_either_bound_exactly() -> None:
    by_bytes = SnapshotPolicy(max_new_record_bytes=1000, max_new_records=100)
    by_bytes.on_applied(records=1, size_bytes=999)
    assert not by_bytes.should_snapshot()
    by_bytes.on_applied(records=1, size_bytes=1)
    assert by_bytes.should_snapshot()
    by_records = SnapshotPolicy(max_new_record_bytes=1000, max_new_records=100)
    by_records.on_applied(records=99, size_bytes=10)
    assert not by_records.should_snapshot()
    by_records.on_applied(records=1, size_bytes=1)
    assert by_records.should_snapshot()


def test_one_at_a_time_and_what_is_applied_meanwhile_counts_toward_the_next() -> None:
    policy = SnapshotPolicy(max_new_record_bytes=1000, max_new_records=100)
    policy.on_applied(records=100, size_bytes=50)
    policy.started()
    assert policy.in_progress and (policy.new_records, policy.new_bytes) == (0, 0)
    policy.on_applied(records=100, size_bytes=2000)  # past both bounds while the first is written
    assert not policy.should_snapshot(), "one snapshot at a time"
    policy.finished(120)
    assert not policy.in_progress and policy.last_snapshot_offset == 120
    assert policy.should_snapshot(), "what was applied meanwhile is due now"


def test_a_failed_snapshot_leaves_the_offset_and_tries_again_at_the_next_bound() -> None:
    policy = SnapshotPolicy(max_new_record_bytes=1000, max_new_records=100)
    policy.started()
    policy.finished(50)
    policy.on_applied(records=100, size_bytes=1)
    policy.started()
    policy.finished(None)
    assert not policy.in_progress and policy.last_snapshot_offset == 50
    assert not policy.should_snapshot()
    policy.on_applied(records=100, size_bytes=1)
    assert policy.should_snapshot()


def test_the_last_snapshot_offset_only_grows_and_a_loaded_snapshot_restarts_the_count() -> None:
    policy = SnapshotPolicy(max_new_record_bytes=1000, max_new_records=100)
    policy.on_snapshot_loaded(300)
    policy.on_applied(records=99, size_bytes=999)
    policy.on_snapshot_loaded(200)  # an older one (a FetchSnapshot racing a restart): the offset stays
    assert policy.last_snapshot_offset == 300 and (policy.new_records, policy.new_bytes) == (0, 0)
    assert not policy.should_snapshot()
    policy.started()
    policy.finished(250)
    assert policy.last_snapshot_offset == 300
