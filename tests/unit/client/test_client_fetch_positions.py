"""FetchPositions driven directly: where a partition without a position starts, and what poll() raises."""

from __future__ import annotations

from kraftpy.client.consumer.fetch_positions import FetchPositions
from kraftpy.client.consumer.offset_fetcher import OffsetFetcher
from kraftpy.client.consumer.position_validator import PositionValidator
from kraftpy.client.consumer.subscription import FetchPosition, FetchState, OffsetResetStrategy, SubscriptionState
from kraftpy.client.errors import LogTruncationError, NoOffsetForPartitionError
from kraftpy.client.group.commits import GroupOperation, OffsetAndMetadata
from kraftpy.client.metadata import LeaderAndEpoch
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import fresh_metadata, metadata_body
from tests.unit.client.test_client_positions import epoch_answer, list_offsets_answer

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {("t", 0): (1, 5), ("t", 1): (2, 7)}


def setup(reset: str = "earliest", *, group: bool = False):
    md = fresh_metadata(LEADERS)
    subs = SubscriptionState(OffsetResetStrategy(reset))
    subs.assign_from_user([T0, T1])
    offsets = OffsetFetcher(subs, md, request_timeout_ms=30_000, retry_backoff_ms=100)
    validator = PositionValidator(subs, md, request_timeout_ms=30_000, retry_backoff_ms=100)
    return md, subs, FetchPositions(subs, md, offsets, validator, use_committed=group)


def reset_partitions(work) -> dict[TopicPartition, int]:
    return {tp: ts for request in work.resets for tp, ts in request.timestamps.items()}


def lookup_done(positions: FetchPositions, result=None, error: KafkaError | None = None) -> None:
    op = GroupOperation("fetch", partitions=tuple(result or ()))
    op.result = dict(result or {})
    op.finish(error)
    positions.lookup_started(op)


# --- without a group: auto_offset_reset ------------------------------------------------------------


def test_without_a_group_new_partitions_reset_by_policy_at_once() -> None:
    _, subs, positions = setup("earliest")
    work = positions.update(0)
    assert work.error is None and work.lookup == [] and work.validations == []
    assert reset_partitions(work) == {T0: -2, T1: -2}
    assert subs.state(T0).fetch_state is FetchState.AWAIT_RESET
    assert positions.update(1).resets == [], "not again while the lookups run"


def test_without_a_group_policy_none_raises_no_offset_and_sends_no_reset() -> None:
    _, _, positions = setup("none")
    work = positions.update(0)
    assert isinstance(work.error, NoOffsetForPartitionError) and work.resets == []
    assert "t-0, t-1" in str(work.error)


# --- with a group: the committed offset first -------------------------------------------------------


def test_with_a_group_partitions_wait_for_the_committed_offsets_then_start_there_or_reset() -> None:
    _, subs, positions = setup("latest", group=True)
    work = positions.update(0)
    assert sorted(work.lookup) == [T0, T1] and work.resets == [] and work.error is None
    positions.lookup_started(GroupOperation("fetch", partitions=(T0, T1)))
    assert positions.update(1).lookup == [], "one lookup at a time"
    positions.lookup.result = {T0: OffsetAndMetadata(40, leader_epoch=5), T1: None}
    positions.lookup.finish()
    work = positions.update(2)
    assert work.error is None and work.lookup == []
    # T0 starts at its committed offset, to be validated against the leader (it carries an epoch) ...
    assert subs.position(T0) == FetchPosition(40, 5, LeaderAndEpoch(1, 5))
    assert subs.state(T0).fetch_state is FetchState.AWAIT_VALIDATION
    # ... and only T1, with nothing committed, gets auto_offset_reset.
    assert reset_partitions(work) == {T1: -1}
    (validation,) = positions.update(3).validations
    assert validation.node_id == 1 and set(validation.positions) == {T0}
    assert positions.lookup is None


def test_with_a_group_policy_none_raises_for_partitions_without_a_committed_offset_and_asks_again() -> None:
    _, subs, positions = setup("none", group=True)
    lookup_done(positions, {T0: OffsetAndMetadata(7), T1: None})
    work = positions.update(0)
    assert isinstance(work.error, NoOffsetForPartitionError) and "t-1" in str(work.error)
    assert subs.position(T0).offset == 7 and subs.has_valid_position(T0)  # no epoch: nothing to validate
    assert work.lookup == [T1] and work.resets == []


def test_a_partition_the_application_seeked_meanwhile_keeps_its_position() -> None:
    _, subs, positions = setup(group=True)
    positions.update(0)
    subs.seek(T0, 99)
    lookup_done(positions, {T0: OffsetAndMetadata(40), T1: OffsetAndMetadata(3)})
    assert positions.update(1).error is None
    assert subs.position(T0).offset == 99 and subs.position(T1).offset == 3


def test_a_failed_lookup_retries_when_retriable_and_reaches_the_application_otherwise() -> None:
    _, _, positions = setup(group=True)
    lookup_done(positions, error=KafkaError("moving", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    work = positions.update(0)
    assert work.error is None and sorted(work.lookup) == [T0, T1]
    lookup_done(positions, error=KafkaError("no", ErrorCode.GROUP_AUTHORIZATION_FAILED))
    work = positions.update(1)
    assert work.error.code == ErrorCode.GROUP_AUTHORIZATION_FAILED and work.lookup == []
    assert sorted(positions.update(2).lookup) == [T0, T1], "the next poll asks again"


# --- validation after a leader change, and truncation ---------------------------------------------


def truncated(reset: str = "none"):
    md, subs, positions = setup(reset)
    subs.seek_validated(T0, FetchPosition(100, 5, md.current_leader(T0)))
    subs.seek(T1, 0)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (request,) = positions.update(11).validations  # the leader moved: check the position first
    assert request.node_id == 3 and set(request.positions) == {T0}
    positions.validator.handle_response(request, epoch_answer({T0: {"leader_epoch": 5, "end_offset": 90}}), 12)
    return subs, positions


def test_a_truncation_is_raised_at_every_update_until_the_application_seeks() -> None:
    subs, positions = truncated()
    for now in (13, 14):
        work = positions.update(now)
        assert isinstance(work.error, LogTruncationError) and work.error.divergent_offsets == {T0: 90}
        assert work.validations == [] and work.resets == []
    subs.seek(T0, 90)
    assert positions.update(15).error is None


def test_a_truncation_is_dropped_once_the_position_moves_or_is_valid_again() -> None:
    subs, positions = truncated()
    assert isinstance(positions.update(13).error, LogTruncationError)
    position = subs.position(T0)
    subs.seek_validated(T0, position)  # the same position, now valid
    assert positions.update(14).error is None

    subs, positions = truncated()
    assert isinstance(positions.update(13).error, LogTruncationError)
    subs.seek_unvalidated(T0, FetchPosition(80, 4, position.current_leader))  # moved, still to be validated
    assert not subs.has_valid_position(T0) and positions.update(14).error is None


def test_a_truncation_is_dropped_once_the_partition_leaves_the_assignment() -> None:
    subs, positions = truncated()
    subs.assign_from_user([T1])
    assert positions.update(13).error is None


def test_forget_settles_a_truncation() -> None:
    _, positions = truncated()
    assert isinstance(positions.update(13).error, LogTruncationError)
    positions.forget({T0})
    assert positions.update(14).error is None


def test_with_a_reset_policy_validation_resumes_at_the_divergence_point_without_raising() -> None:
    subs, positions = truncated("earliest")
    assert positions.update(13).error is None
    assert subs.position(T0).offset == 90 and subs.has_valid_position(T0)


def test_an_error_a_reset_left_reaches_the_application_before_anything_is_sent() -> None:
    _, _, positions = setup("earliest")
    (request, *_) = positions.update(0).resets
    tp = next(iter(request.timestamps))
    answer = list_offsets_answer({tp: {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)}})
    positions.offsets.handle_response(request, answer, 1)
    work = positions.update(2)
    assert work.error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and work.validations == [] and work.resets == []
    assert positions.update(3).error is None, "raised once"
