"""Consumer positions: resets via list_offsets, validation after leader changes and truncation (KIP-320)."""

from __future__ import annotations

import pytest

from kraftpy.client.consumer.offset_fetcher import OffsetFetcher
from kraftpy.client.consumer.position_validator import PositionValidator
from kraftpy.client.consumer.subscription import FetchPosition, FetchState, OffsetResetStrategy, SubscriptionState
from kraftpy.client.errors import IllegalStateError, LogTruncationError, NoOffsetForPartitionError
from kraftpy.client.metadata import LeaderAndEpoch
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import fresh_metadata, metadata_body

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {("t", 0): (1, 5), ("t", 1): (2, 7)}


def setup(reset: str = "latest"):
    md = fresh_metadata(LEADERS)
    subs = SubscriptionState(OffsetResetStrategy(reset))
    subs.assign_from_user([T0, T1])
    offsets = OffsetFetcher(subs, md, request_timeout_ms=30_000, retry_backoff_ms=100)
    validator = PositionValidator(subs, md, request_timeout_ms=30_000, retry_backoff_ms=100)
    return md, subs, offsets, validator


def list_offsets_answer(entries: dict[TopicPartition, dict]) -> dict:
    topics: dict[str, list] = {}
    for tp, fields in entries.items():
        topics.setdefault(tp.topic, []).append({"partition": tp.partition, "error_code": 0, **fields})
    return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def epoch_answer(entries: dict[TopicPartition, dict]) -> dict:
    return list_offsets_answer(entries)


def position_at(subs, md, tp, offset, epoch):
    subs.seek_validated(tp, FetchPosition(offset, epoch, md.current_leader(tp)))


def test_assigned_partitions_start_without_a_position_and_reset_by_policy() -> None:
    _md, subs, offsets, _ = setup("earliest")
    assert subs.state(T0).fetch_state is FetchState.INITIALIZING and subs.position(T0) is None
    assert subs.reset_initializing_positions() == []
    requests = offsets.prepare_requests(0)
    assert {r.node_id for r in requests} == {1, 2}
    by_node = {r.node_id: r for r in requests}
    assert by_node[1].body == {
        "replica_id": -1,
        "topics": [{"name": "t", "partitions": [{"partition": 0, "current_leader_epoch": 5, "timestamp": -2}]}],
    }
    assert offsets.prepare_requests(1) == [], "not again while the lookup runs"
    offsets.handle_response(by_node[1], list_offsets_answer({T0: {"offset": 40, "leader_epoch": 5}}), 2)
    assert subs.position(T0) == FetchPosition(40, None, LeaderAndEpoch(1, 5))
    assert subs.has_valid_position(T0)


def test_no_reset_policy_means_no_offset_for_partition() -> None:
    _, subs, _, _ = setup("none")
    stuck = subs.reset_initializing_positions()
    assert sorted(stuck) == [T0, T1]
    err = NoOffsetForPartitionError(stuck)
    assert "t-0, t-1" in str(err)


def test_seek_to_end_and_a_stale_reset_answer_after_a_seek() -> None:
    _md, subs, offsets, _ = setup()
    subs.request_offset_reset(T0, OffsetResetStrategy.LATEST)
    (req,) = [r for r in offsets.prepare_requests(0) if r.node_id == 1]
    assert req.body["topics"][0]["partitions"][0]["timestamp"] == -1
    subs.seek(T0, 7)  # the application decided meanwhile
    offsets.handle_response(req, list_offsets_answer({T0: {"offset": 99, "leader_epoch": 5}}), 1)
    assert subs.position(T0).offset == 7


def test_failed_resets_retry_after_backoff_and_refresh_metadata() -> None:
    md, subs, offsets, _ = setup()
    subs.request_offset_reset(T0)
    (req,) = [r for r in offsets.prepare_requests(0) if r.node_id == 1]
    md.update(metadata_body(LEADERS), 0)
    offsets.handle_response(req, list_offsets_answer({T0: {"error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)}}), 10)
    assert md.update_requested
    assert [r for r in offsets.prepare_requests(50) if r.node_id == 1] == []
    assert [r for r in offsets.prepare_requests(110) if r.node_id == 1] != []


def test_an_unretriable_reset_error_reaches_the_application() -> None:
    _md, subs, offsets, _ = setup()
    subs.request_offset_reset(T0)
    (req,) = [r for r in offsets.prepare_requests(0) if r.node_id == 1]
    code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    offsets.handle_response(req, list_offsets_answer({T0: {"error_code": code}}), 1)
    err = offsets.take_error()
    assert err is not None and err.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and "t-0" in str(err)


def test_a_position_without_epoch_is_not_validated_on_leader_change() -> None:
    md, subs, _, validator = setup()
    subs.seek(T0, 10)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    assert [r for r in validator.prepare_requests(11) if T0 in r.positions] == []
    assert subs.has_valid_position(T0) and subs.position(T0).current_leader == LeaderAndEpoch(3, 6)


def test_leader_change_triggers_validation_which_passes_when_the_epoch_reaches_our_position() -> None:
    md, subs, _, validator = setup()
    position_at(subs, md, T0, 100, 5)
    assert validator.prepare_requests(0) == [], "same leader: nothing to check"
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    assert subs.state(T0).fetch_state is FetchState.AWAIT_VALIDATION and not subs.has_valid_position(T0)
    assert req.node_id == 3
    assert req.body == {
        "topics": [{"name": "t", "partitions": [{"partition": 0, "current_leader_epoch": 6, "leader_epoch": 5}]}]
    }
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": 5, "end_offset": 120}}), 12)
    assert subs.has_valid_position(T0) and subs.position(T0).offset == 100
    assert validator.take_truncations() == []


def test_truncation_without_reset_policy_is_reported_with_position_and_divergence() -> None:
    md, subs, _, validator = setup("none")
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": 5, "end_offset": 90}}), 12)
    (truncation,) = validator.take_truncations()
    assert (truncation.tp, truncation.position.offset, truncation.divergent_offset) == (T0, 100, 90)
    err = LogTruncationError({truncation.tp: (truncation.position.offset, truncation.divergent_offset)})
    assert "t-0 at position 100 (diverges at offset 90)" in str(err)
    assert err.divergent_offsets == {T0: 90} and err.positions == {T0: 100}
    assert subs.state(T0).fetch_state is FetchState.AWAIT_VALIDATION, "no fetching until the application seeks"
    subs.seek(T0, 90)
    assert subs.has_valid_position(T0)


def test_truncation_with_a_reset_policy_resumes_at_the_divergence_point() -> None:
    md, subs, _, validator = setup("earliest")
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": 4, "end_offset": 90}}), 12)
    assert validator.take_truncations() == []
    assert subs.position(T0) == FetchPosition(90, 4, LeaderAndEpoch(3, 6))
    assert subs.has_valid_position(T0)


def test_an_epoch_unknown_to_the_leader_resets_by_policy_or_reports_an_unknown_divergence() -> None:
    md, subs, _, validator = setup("latest")
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": -1, "end_offset": -1}}), 12)
    assert subs.state(T0).fetch_state is FetchState.AWAIT_RESET

    md, subs, _, validator = setup("none")
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": -1, "end_offset": -1}}), 12)
    (truncation,) = validator.take_truncations()
    assert truncation.divergent_offset is None
    assert "diverges at an unknown offset" in str(LogTruncationError({T0: (100, None)}))


def test_validation_errors_retry_after_backoff_with_fresh_metadata() -> None:
    md, subs, _, validator = setup()
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    code = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    validator.handle_response(req, epoch_answer({T0: {"error_code": code}}), 12)
    assert md.update_requested and subs.awaiting_validation(T0)
    assert [r for r in validator.prepare_requests(50) if T0 in r.positions] == []
    assert [r for r in validator.prepare_requests(120) if T0 in r.positions] != []


def test_an_answer_for_a_position_that_moved_is_ignored() -> None:
    md, subs, _, validator = setup("none")
    position_at(subs, md, T0, 100, 5)
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6)}), 10)
    (req,) = [r for r in validator.prepare_requests(11) if T0 in r.positions]
    subs.seek(T0, 50)
    validator.handle_response(req, epoch_answer({T0: {"leader_epoch": 5, "end_offset": 10}}), 12)
    assert validator.take_truncations() == [] and subs.position(T0).offset == 50


def test_reassignment_keeps_positions_of_partitions_that_stay() -> None:
    _md, subs, _, _ = setup()
    subs.seek(T0, 5)
    subs.assign_from_user([T0])
    assert subs.position(T0).offset == 5 and not subs.is_assigned(T1)
    with pytest.raises(IllegalStateError, match="no current assignment for partition t-1"):
        subs.seek(T1, 0)
