"""The Raft wire codec: which route carries which message, and strict checks on what arrives.

Design notes: docs/raft.md, section "raft/codec.py".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX, check_int, check_list, check_str
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
    Message,
    VoteRequest,
    VoteResponse,
    from_dict,
    to_dict,
)

ROUTES: dict[type, str] = {
    VoteRequest: "/raft/vote",
    BeginQuorumEpochRequest: "/raft/begin_quorum_epoch",
    EndQuorumEpochRequest: "/raft/end_quorum_epoch",
    FetchRequest: "/raft/fetch",
    FetchSnapshotRequest: "/raft/fetch_snapshot",
}
REQUEST_BY_ROUTE: dict[str, type] = {path: cls for cls, path in ROUTES.items()}
RESPONSE_TYPE: dict[type, type] = {
    VoteRequest: VoteResponse,
    BeginQuorumEpochRequest: BeginQuorumEpochResponse,
    EndQuorumEpochRequest: EndQuorumEpochResponse,
    FetchRequest: FetchResponse,
    FetchSnapshotRequest: FetchSnapshotResponse,
}
REQUEST_FOR_RESPONSE: dict[type, type] = {resp: req for req, resp in RESPONSE_TYPE.items()}

MAX_SUCCESSORS = 1024  # a voter set is small; KRaft's quorum is a handful of nodes

# Every integer field of every message, with the range it may take (Kafka's widths: int32 ids and
# epochs, int64 offsets and positions). A high watermark may be -1 (not known yet).
_IDS = ("src", "dst", "leader_id")
_EPOCHS = ("candidate_epoch", "last_epoch", "epoch", "last_fetched_epoch")
_OFFSETS = ("end_offset", "fetch_offset", "position", "size", "correlation_id", "leader_round")
_INT32_SIZES = ("max_wait_ms", "max_bytes")
_RANGES: dict[str, tuple[int, int]] = {
    **{name: (0, INT32_MAX) for name in _IDS + _INT32_SIZES},
    **{name: (0, INT32_MAX) for name in _EPOCHS},
    **{name: (0, INT64_MAX) for name in _OFFSETS},
    "high_watermark": (-1, INT64_MAX),
}


def _bad(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REQUEST)


def encode(message: Message) -> dict[str, Any]:
    return to_dict(message)


def route_of(request: Message) -> str:
    return ROUTES[type(request)]


def _compile_ranges(cls: type) -> tuple[tuple[str, int, int, str], ...]:
    """The ranged integer fields `cls` has, with the name an error gives each (built once, not per check)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return tuple((f, low, high, f"{cls.__name__}.{f}") for f, (low, high) in _RANGES.items() if f in names)


_RANGED_FIELDS = {cls: _compile_ranges(cls) for cls in MESSAGE_TYPES.values()}


def _check_ranges(message: Message) -> None:
    for field, low, high, label in _RANGED_FIELDS[type(message)]:
        value = getattr(message, field)
        if value is not None and not (type(value) is int and low <= value <= high):
            check_int(value, label, low, high)  # raises, saying why
    name = type(message).__name__
    check_str(message.cluster_id, f"{name}.cluster_id")
    for field in ("diverging", "snapshot_id"):
        pair = getattr(message, field, None)
        if pair is not None:
            check_int(pair.offset, f"{name}.{field}.offset", 0, INT64_MAX)
            check_int(pair.epoch, f"{name}.{field}.epoch", 0, INT32_MAX)
    successors = getattr(message, "preferred_successors", ())
    check_list(successors, f"{name}.preferred_successors", MAX_SUCCESSORS)
    for voter in successors:
        check_int(voter, f"{name}.preferred_successors", 0, INT32_MAX)
    for entry in getattr(message, "entries", ()):
        if not (0 <= entry.offset <= INT64_MAX and 0 <= entry.epoch <= INT32_MAX):
            check_int(entry.offset, f"{name}.entries.offset", 0, INT64_MAX)
            check_int(entry.epoch, f"{name}.entries.epoch", 0, INT32_MAX)
    if message.src == message.dst:
        raise _bad(f"{name} from node {message.src} to itself")


def decode_request(path: str, body: Any) -> Message:
    """The request a route received, checked; KafkaError(INVALID_REQUEST) otherwise."""
    expected = REQUEST_BY_ROUTE.get(path)
    if expected is None:
        raise _bad(f"no Raft route {path}")
    message = from_dict(body)
    if type(message) is not expected:
        raise _bad(f"{path} carries {expected.__name__}, not {type(message).__name__}")
    _check_ranges(message)
    epoch = message.candidate_epoch if isinstance(message, VoteRequest) else getattr(message, "epoch", 1)
    if isinstance(message, VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest) and epoch < 1:
        raise _bad(f"{type(message).__name__} for epoch {epoch}: leader epochs start at 1")
    return message


def decode_response(request: Message, body: Any) -> Message:
    """The answer to `request`, checked against it; KafkaError(INVALID_REQUEST) otherwise."""
    message = from_dict(body)
    expected = RESPONSE_TYPE[type(request)]
    if type(message) is not expected:
        raise _bad(f"{type(request).__name__} answered with {type(message).__name__}")
    if (message.src, message.dst, message.correlation_id) != (request.dst, request.src, request.correlation_id):
        raise _bad(
            f"{type(message).__name__} from {message.src} to {message.dst} (correlation {message.correlation_id}) "
            f"does not answer the request from {request.src} to {request.dst} ({request.correlation_id})"
        )
    _check_ranges(message)
    if isinstance(message, FetchResponse):
        _check_fetch_response(message)
    elif isinstance(message, FetchSnapshotResponse):
        _check_snapshot_chunk(message)
    return message


def _check_fetch_response(message: FetchResponse) -> None:
    entries = message.entries
    if not entries:
        return
    if message.diverging is not None or message.snapshot_id is not None:
        raise _bad("a FetchResponse carries entries or a diverging epoch or a snapshot id, not several")
    previous_epoch = 0
    for i, entry in enumerate(entries):
        if entry.offset != message.fetch_offset + i:
            raise _bad(f"fetched entry {i} has offset {entry.offset}, expected {message.fetch_offset + i}")
        if entry.epoch < previous_epoch or entry.epoch > message.epoch:
            raise _bad(f"fetched entry at {entry.offset} has epoch {entry.epoch} out of order")
        previous_epoch = entry.epoch


def _check_snapshot_chunk(message: FetchSnapshotResponse) -> None:
    if message.error is not ErrorCode.NONE:
        return
    if message.snapshot_id is None:
        raise _bad("a FetchSnapshotResponse without an error names its snapshot")
    end = message.position + len(message.data)
    if end > message.size or (end < message.size and not message.data):
        raise _bad(f"snapshot chunk [{message.position}, {end}) of {message.size} bytes is out of range")


def failure_response(request: Message, epoch: int, error: ErrorCode) -> Message | None:
    """What the core is told when a fetch could not be sent or answered (KRaft answers a
    failed request with an error response too): it retries after its backoff. Votes and
    the quorum-epoch requests get nothing: the core resends them on its own timers."""
    if isinstance(request, FetchRequest):
        return FetchResponse(
            request.cluster_id,
            request.dst,
            request.src,
            request.correlation_id,
            epoch,
            None,
            error,
            request.fetch_offset,
        )
    if isinstance(request, FetchSnapshotRequest):
        return FetchSnapshotResponse(
            request.cluster_id, request.dst, request.src, request.correlation_id, epoch, None, error
        )
    return None
