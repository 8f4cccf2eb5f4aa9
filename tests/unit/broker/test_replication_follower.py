"""The follower core: fetch state, appends and HW, truncation by epoch, out-of-range, errors and backoff."""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import (
    AppendAsFollower,
    EpochEndOffset,
    FetchPartitionResponse,
    LogState,
    Partition,
    PartitionRegistration,
    RebuildProducerState,
    ReplicationConfig,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.follower import truncation_offset
from kraftpy.broker.replication.model import UNDEFINED_EPOCH_END
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch

LEADER_EPOCH = 6
BACKOFF = 100


def follower(log: LogState, broker_epoch: int = 3) -> Partition:
    partition = Partition(1, ReplicationConfig(replica_fetch_backoff_ms=BACKOFF), broker_epoch=broker_epoch)
    partition.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, LEADER_EPOCH, 2), log, 0)
    return partition


def batches(base: int, counts: list[int], epoch: int = LEADER_EPOCH, producer_id: int = -1) -> bytes:
    out, offset, seq = [], base, 0
    for count in counts:
        records = [(None, b"x", (), 1_000)] * count
        pid_args = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": seq} if producer_id >= 0 else {}
        out.append(build_batch(records, base_offset=offset, partition_leader_epoch=epoch, **pid_args))
        offset += count
        seq += count
    return b"".join(out)


def test_the_fetch_carries_the_log_end_the_last_epoch_and_the_known_leader_epoch() -> None:
    partition = follower(LogState(2, 10, 5, latest_epoch=4))
    request = partition.build_fetch(LogState(2, 10, 5, 4), now_ms=0)
    assert (request.replica_id, request.fetch_offset, request.last_fetched_epoch) == (1, 10, 4)
    assert (request.current_leader_epoch, request.log_start_offset, request.broker_epoch) == (LEADER_EPOCH, 2, 3)
    assert partition.build_fetch(LogState(2, 10, 5, 4), now_ms=0) is None  # one in flight


def test_data_is_appended_and_the_hw_is_the_leaders_capped_by_the_new_log_end() -> None:
    partition = follower(LogState(0, 10, 5, 4))
    request = partition.build_fetch(LogState(0, 10, 5, 4), 0)
    records = batches(10, [2, 3], producer_id=77)
    actions = partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=40, records=records), 1)
    assert actions == [AppendAsFollower(records, 10, 14, LEADER_EPOCH), UpdateHighWatermark(15)]
    assert partition.producers.entry(77).last_seq == 4  # follower appends keep the producer state current


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    partition = follower(LogState(0, 0, 0))
    request = partition.build_fetch(LogState(0, 0, 0), 0)
    whole = batches(0, [1, 1])
    actions = partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=1, records=whole[:-5]), 1)
    assert actions[0] == AppendAsFollower(whole[: len(whole) // 2], 0, 0, LEADER_EPOCH)


def test_the_follower_hw_follows_a_new_leaders_lower_hw() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    actions = partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=6), 1)
    assert actions == [UpdateHighWatermark(6)] and partition.high_watermark == 6


def test_an_answer_to_another_request_is_ignored() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    old = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    partition.on_fetch_error(old, 1)
    newer = partition.build_fetch(LogState(0, 10, 8, 4), 1 + BACKOFF)
    assert partition.on_fetch_response(old, FetchPartitionResponse(high_watermark=9, records=batches(10, [1])), 2) == []
    assert partition.follower.inflight is newer


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
    ],
)
def test_errors_back_off_and_change_nothing(error: ErrorCode) -> None:
    partition = follower(LogState(0, 10, 8, 4))
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    assert partition.on_fetch_response(request, FetchPartitionResponse(error=error), 50) == []
    assert partition.follower.last_error == error
    assert partition.build_fetch(LogState(0, 10, 8, 4), 50 + BACKOFF - 1) is None
    assert partition.build_fetch(LogState(0, 10, 8, 4), 50 + BACKOFF) is not None


def test_a_lost_fetch_backs_off_too() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    partition.on_fetch_error(request, 20)
    assert partition.build_fetch(LogState(0, 10, 8, 4), 20 + BACKOFF - 1) is None


def test_truncation_offset_rules() -> None:
    # Both know the epoch: the earlier end wins, never beyond the log end.
    assert truncation_offset(EpochEndOffset(3, 7), EpochEndOffset(3, 9), 12) == (7, True)
    assert truncation_offset(EpochEndOffset(3, 9), EpochEndOffset(3, 7), 12) == (7, True)
    assert truncation_offset(EpochEndOffset(3, 9), EpochEndOffset(3, 9), 5) == (5, True)
    # The follower never saw epoch 3: cut to the end of its own largest epoch below (2 ends at 6), ask again.
    assert truncation_offset(EpochEndOffset(3, 9), EpochEndOffset(2, 6), 12) == (6, False)
    # The follower knows no epoch at or below 3: trust the leader's end.
    assert truncation_offset(EpochEndOffset(3, 9), UNDEFINED_EPOCH_END, 12) == (9, True)


def test_diverging_epoch_truncates_rebuilds_producer_state_and_lowers_the_hw() -> None:
    partition = follower(LogState(0, 12, 11, 5))
    request = partition.build_fetch(LogState(0, 12, 11, 5), 0)
    response = FetchPartitionResponse(high_watermark=9, diverging_epoch=EpochEndOffset(4, 8))
    actions = partition.on_fetch_response(request, response, 1, own_epoch_end=EpochEndOffset(4, 10))
    assert actions == [TruncateTo(8), RebuildProducerState(8), UpdateHighWatermark(8)]


def test_diverging_epoch_needs_the_followers_own_answer() -> None:
    partition = follower(LogState(0, 12, 11, 5))
    request = partition.build_fetch(LogState(0, 12, 11, 5), 0)
    response = FetchPartitionResponse(diverging_epoch=EpochEndOffset(4, 8))
    with pytest.raises(ValueError, match="end_offset_for"):
        partition.on_fetch_response(request, response, 1)


def test_an_undefined_diverging_answer_is_not_guessed_at() -> None:
    partition = follower(LogState(0, 12, 11, 5))
    request = partition.build_fetch(LogState(0, 12, 11, 5), 0)
    response = FetchPartitionResponse(diverging_epoch=UNDEFINED_EPOCH_END)
    assert partition.on_fetch_response(request, response, 1, UNDEFINED_EPOCH_END) == []
    assert partition.follower.last_error == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_an_empty_epoch_at_the_log_end_is_trimmed_and_a_repeat_without_progress_backs_off() -> None:
    """This replica began epoch 5 as leader at offset 12 and wrote nothing; the leader never saw epoch 5."""
    log = LogState(0, 12, 11, latest_epoch=5)
    partition = follower(log)
    answer = FetchPartitionResponse(diverging_epoch=EpochEndOffset(4, 20))
    request = partition.build_fetch(log, 0)
    # Its own end of epoch 4 is 12 (= the LEO): nothing to cut, but storage must drop the empty epoch entry.
    actions = partition.on_fetch_response(request, answer, 1, own_epoch_end=EpochEndOffset(4, 12))
    assert actions == [TruncateTo(12), RebuildProducerState(12)]
    # If storage failed to trim it, the same question comes back: back off instead of spinning.
    request = partition.build_fetch(log, 2)
    assert partition.on_fetch_response(request, answer, 3, own_epoch_end=EpochEndOffset(4, 12)) == []
    assert partition.build_fetch(log, 4) is None


def test_behind_the_leaders_log_start_truncates_fully_and_starts_there() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    response = FetchPartitionResponse(ErrorCode.OFFSET_OUT_OF_RANGE, 60, log_start_offset=50, log_end_offset=70)
    actions = partition.on_fetch_response(request, response, 1)
    assert actions == [TruncateFullyAndStartAt(50), RebuildProducerState(50), UpdateHighWatermark(50)]


def test_beyond_the_leaders_log_end_truncates_to_it() -> None:
    # An empty log (no epochs) starting at 30, after an unclean election left the leader at 20.
    partition = follower(LogState(30, 30, 30, -1))
    request = partition.build_fetch(LogState(30, 30, 30, -1), 0)
    response = FetchPartitionResponse(ErrorCode.OFFSET_OUT_OF_RANGE, 20, log_start_offset=0, log_end_offset=20)
    actions = partition.on_fetch_response(request, response, 1)
    assert actions == [TruncateFullyAndStartAt(20), RebuildProducerState(20), UpdateHighWatermark(20)]
    # With a log start below the leader's end, a plain truncation does; a high watermark above the
    # new end comes down to it (never above the log), one below it stays.
    partition = follower(LogState(10, 30, 25, -1))
    request = partition.build_fetch(LogState(10, 30, 25, -1), 0)
    actions = partition.on_fetch_response(request, response, 1)
    assert actions == [TruncateTo(20), RebuildProducerState(20), UpdateHighWatermark(20)]
    partition = follower(LogState(10, 30, 12, -1))
    request = partition.build_fetch(LogState(10, 30, 12, -1), 0)
    assert partition.on_fetch_response(request, response, 1) == [TruncateTo(20), RebuildProducerState(20)]


def test_beyond_an_empty_leaders_log_truncates_to_nothing() -> None:
    # The leader's end is 0 (an unclean election to an empty replica): everything here goes.
    partition = follower(LogState(0, 5, 0, -1))
    request = partition.build_fetch(LogState(0, 5, 0, -1), 0)
    response = FetchPartitionResponse(ErrorCode.OFFSET_OUT_OF_RANGE, 0, log_start_offset=0, log_end_offset=0)
    assert partition.on_fetch_response(request, response, 1)[:2] == [TruncateTo(0), RebuildProducerState(0)]


def test_out_of_range_inside_the_leaders_range_just_retries() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    response = FetchPartitionResponse(ErrorCode.OFFSET_OUT_OF_RANGE, 8, log_start_offset=0, log_end_offset=12)
    assert partition.on_fetch_response(request, response, 1) == []
    assert partition.follower.last_error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_corrupt_or_misplaced_data_is_not_appended() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    good = batches(10, [1])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    assert partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=9, records=corrupt), 1) == []
    assert partition.follower.last_error == ErrorCode.CORRUPT_MESSAGE
    request = partition.build_fetch(LogState(0, 10, 8, 4), 1 + BACKOFF)
    misplaced = batches(11, [1])
    assert partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=9, records=misplaced), 2) == []


def test_a_refused_answer_is_counted_and_the_same_offset_fetched_again_after_the_backoff() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    good = batches(10, [2])
    corrupt = good[:-1] + bytes([good[-1] ^ 0x01])
    request = partition.build_fetch(LogState(0, 10, 8, 4), 0)
    assert partition.on_fetch_response(request, FetchPartitionResponse(high_watermark=9, records=corrupt), 1) == []
    assert partition.follower.corrupt_answers == 1
    assert partition.build_fetch(LogState(0, 10, 8, 4), BACKOFF) is None  # backs off
    again = partition.build_fetch(LogState(0, 10, 8, 4), 1 + BACKOFF)
    assert again is not None and again.fetch_offset == 10
    actions = partition.on_fetch_response(again, FetchPartitionResponse(high_watermark=12, records=good), 2)
    assert any(isinstance(a, AppendAsFollower) and a.records == good for a in actions)
    assert partition.follower.corrupt_answers == 1 and partition.follower.last_error == ErrorCode.NONE


def test_a_follower_of_the_same_leader_and_epoch_is_kept_on_an_isr_change() -> None:
    partition = follower(LogState(0, 10, 8, 4))
    core = partition.follower
    actions = partition.apply_registration(
        PartitionRegistration((0, 1), (0,), 0, LEADER_EPOCH, 3), LogState(0, 10, 8), 1
    )
    assert actions == [] and partition.follower is core and core.partition_epoch == 3
