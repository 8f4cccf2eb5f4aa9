"""Long-poll completion rules (Kafka's DelayedFetch cases)."""

from __future__ import annotations

from kraftpy.broker.replication import DelayedFetch, FetchCompletion, FetchPartitionStatus
from kraftpy.protocol.errors import ErrorCode

WAIT = DelayedFetch(min_bytes=100, max_wait_ms=500, start_ms=1_000)


def test_nothing_readable_waits_until_max_wait() -> None:
    quiet = [FetchPartitionStatus(bytes_readable=10), FetchPartitionStatus(bytes_readable=20)]
    assert WAIT.should_complete(quiet, 1_000) is None
    assert WAIT.should_complete(quiet, 1_499) is None
    assert WAIT.should_complete(quiet, 1_500) == FetchCompletion.TIMED_OUT


def test_min_bytes_summed_over_partitions_completes() -> None:
    statuses = [FetchPartitionStatus(bytes_readable=60), FetchPartitionStatus(bytes_readable=40)]
    assert WAIT.should_complete(statuses, 1_001) == FetchCompletion.ENOUGH_BYTES


def test_an_error_in_any_partition_completes_at_once() -> None:
    statuses = [FetchPartitionStatus(), FetchPartitionStatus(error=ErrorCode.FENCED_LEADER_EPOCH)]
    assert WAIT.should_complete(statuses, 1_001) == FetchCompletion.ERROR


def test_a_diverging_epoch_completes_at_once() -> None:
    assert WAIT.should_complete([FetchPartitionStatus(diverging=True)], 1_001) == FetchCompletion.DIVERGING


def test_a_truncated_log_or_a_rolled_segment_completes_at_once() -> None:
    assert WAIT.should_complete([FetchPartitionStatus(fetch_offset_beyond_end=True)], 1) == FetchCompletion.LOG_CHANGED
    assert WAIT.should_complete([FetchPartitionStatus(on_older_segment=True)], 1) == FetchCompletion.LOG_CHANGED


def test_no_wait_or_no_partitions_answers_immediately() -> None:
    assert DelayedFetch(1, 0, 0).should_complete([FetchPartitionStatus()], 0) == FetchCompletion.IMMEDIATE
    assert WAIT.should_complete([], 1_000) == FetchCompletion.IMMEDIATE


def test_min_bytes_zero_never_waits() -> None:
    assert DelayedFetch(0, 500, 0).should_complete([FetchPartitionStatus()], 0) == FetchCompletion.ENOUGH_BYTES
