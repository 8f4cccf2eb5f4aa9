"""The message codec: every message survives a CBOR round trip; malformed input is refused
with INVALID_REQUEST instead of crashing the node."""

from __future__ import annotations

import cbor2
import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch
from kraftpy.raft.messages import (
    MESSAGE_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
    from_dict,
    is_request,
    to_dict,
)
from kraftpy.raft.quorum_state import QuorumState

SAMPLES = [
    VoteRequest("c", 1, 2, 10, 5, 4, 100, True),
    VoteResponse("c", 2, 1, 10, 5, None, False, True, ErrorCode.INCONSISTENT_CLUSTER_ID),
    BeginQuorumEpochRequest("c", 1, 2, 0, 5, 1),
    BeginQuorumEpochResponse("c", 2, 1, 0, 5, 1),
    EndQuorumEpochRequest("c", 1, 2, 0, 5, 1, (3, 2)),
    EndQuorumEpochResponse("c", 2, 1, 0, 5, None),
    FetchRequest("c", 2, 1, 11, 5, 100, 4, 500, 3),
    FetchResponse(
        "c",
        1,
        2,
        11,
        5,
        1,
        ErrorCode.NONE,
        100,
        90,
        (Entry(100, 5, b"x"), Entry(101, 5, b"", EntryKind.LEADER_CHANGE)),
        None,
        None,
        3,
    ),
    FetchResponse("c", 1, 2, 11, 5, 1, diverging=OffsetAndEpoch(50, 3)),
    FetchResponse("c", 1, 2, 11, 5, 1, snapshot_id=OffsetAndEpoch(80, 4)),
    FetchSnapshotRequest("c", 2, 1, 12, 5, OffsetAndEpoch(80, 4), 64, 1024),
    FetchSnapshotResponse("c", 1, 2, 12, 5, 1, ErrorCode.NONE, OffsetAndEpoch(80, 4), 64, 300, b"\x00chunk"),
]


def test_samples_cover_every_message_type() -> None:
    assert {type(m).__name__ for m in SAMPLES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_cbor_round_trip(message) -> None:
    wire = cbor2.dumps(to_dict(message))
    assert from_dict(cbor2.loads(wire)) == message


def test_requests_and_responses() -> None:
    assert [is_request(m) for m in SAMPLES[:2]] == [True, False]


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"type": "Nope"},
        {"type": "VoteRequest"},
        {**to_dict(SAMPLES[0]), "candidate_epoch": "5"},
        {**to_dict(SAMPLES[0]), "pre_vote": 1},
        {**to_dict(SAMPLES[7]), "entries": [[1, 2, 0]]},
        {**to_dict(SAMPLES[7]), "entries": [[1, 2, 9, b""]]},
        {**to_dict(SAMPLES[8]), "diverging": [1]},
        {**to_dict(SAMPLES[4]), "preferred_successors": "2,3"},
    ],
)
def test_malformed_messages_are_refused(body) -> None:
    with pytest.raises(KafkaError) as info:
        from_dict(body)
    assert info.value.code is ErrorCode.INVALID_REQUEST


def test_unknown_error_code_is_kept_as_unknown() -> None:
    body = {**to_dict(SAMPLES[1]), "error": 31337}
    assert from_dict(body).error is ErrorCode.UNKNOWN_SERVER_ERROR


def test_quorum_state_round_trip() -> None:
    state = QuorumState(7, 2, None)
    assert QuorumState.from_dict(cbor2.loads(cbor2.dumps(state.to_dict()))) == state
