"""The Raft message set: KRaft's RPCs as plain frozen dataclasses, plus a CBOR-ready codec.

Every message carries the sender (`src`), the addressee (`dst`) and the
`cluster_id`, so a node answers a peer of another cluster with
INCONSISTENT_CLUSTER_ID instead of mixing logs. Requests carry a
`correlation_id` that the answer echoes; a node ignores answers that do not
match its request in flight (duplicates, late answers, answers from before a
restart). Errors travel as `kraftpy.protocol.errors.ErrorCode`.

`to_dict` / `from_dict` turn a message into a dict of CBOR-native values (the
transport later CBOR-encodes it) and back; `from_dict` rejects anything that
is not exactly a known message with a KafkaError(INVALID_REQUEST).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT16_MAX, INT16_MIN, check_int, show
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    candidate_epoch: int  # the epoch the candidate runs for (its epoch + 1 in a pre-vote)
    last_epoch: int  # of the candidate's last entry
    end_offset: int  # the candidate's log end offset
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class VoteResponse:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int  # the voter's epoch
    leader_id: int | None
    granted: bool
    pre_vote: bool
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]  # most caught-up first


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str
    src: int  # the replica id
    dst: int
    correlation_id: int
    epoch: int  # the epoch the fetcher knows
    fetch_offset: int  # its log end offset (flushed, for a voter)
    last_fetched_epoch: int  # the epoch of its entry at fetch_offset - 1
    max_wait_ms: int
    leader_round: int = 0  # the last read round it saw from this leader (read index)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE
    fetch_offset: int = 0  # echoed
    high_watermark: int = -1  # -1: the leader does not know it yet
    entries: tuple[Entry, ...] = ()
    diverging: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None
    leader_round: int = 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    cluster_id: str
    src: int
    dst: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode = ErrorCode.NONE
    snapshot_id: OffsetAndEpoch | None = None
    position: int = 0
    size: int = 0
    data: bytes = b""


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpochRequest
    | BeginQuorumEpochResponse
    | EndQuorumEpochRequest
    | EndQuorumEpochResponse
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)

MESSAGE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        VoteRequest,
        VoteResponse,
        BeginQuorumEpochRequest,
        BeginQuorumEpochResponse,
        EndQuorumEpochRequest,
        EndQuorumEpochResponse,
        FetchRequest,
        FetchResponse,
        FetchSnapshotRequest,
        FetchSnapshotResponse,
    )
}

REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)


def is_request(message: Message) -> bool:
    return isinstance(message, REQUEST_TYPES)


def _encode(value: Any) -> Any:
    if isinstance(value, Entry):
        return [value.offset, value.epoch, int(value.kind), value.data]
    if isinstance(value, OffsetAndEpoch):
        return [value.offset, value.epoch]
    if isinstance(value, ErrorCode):
        return int(value)
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def to_dict(message: Message) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type(message).__name__}
    for field in dataclasses.fields(message):
        body[field.name] = _encode(getattr(message, field.name))
    return body


def _bad(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REQUEST)


def _int(value: Any, name: str) -> int:
    return check_int(value, name)  # int64 at most here; codec.py holds each field to its own width


def _pair(value: Any, name: str) -> OffsetAndEpoch:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _bad(f"{name} must be [offset, epoch]")
    return OffsetAndEpoch(_int(value[0], name), _int(value[1], name))


def _decode_field(name: str, kind: str, value: Any) -> Any:
    optional = "None" in kind
    if value is None:
        if optional:
            return None
        raise _bad(f"{name} is missing")
    base = kind.replace(" | None", "")
    if base == "int":
        return _int(value, name)
    if base == "bool":
        if not isinstance(value, bool):
            raise _bad(f"{name} must be a boolean")
        return value
    if base == "str":
        if not isinstance(value, str):
            raise _bad(f"{name} must be a string")
        return value
    if base == "bytes":
        if not isinstance(value, bytes | bytearray):
            raise _bad(f"{name} must be bytes")
        return bytes(value)
    if base == "ErrorCode":
        try:
            return ErrorCode(check_int(value, name, INT16_MIN, INT16_MAX))
        except ValueError:
            return ErrorCode.UNKNOWN_SERVER_ERROR
    if base == "OffsetAndEpoch":
        return _pair(value, name)
    if base == "tuple[int, ...]":
        if not isinstance(value, list | tuple):
            raise _bad(f"{name} must be a list")
        return tuple(_int(v, name) for v in value)
    if base == "tuple[Entry, ...]":
        if not isinstance(value, list | tuple):
            raise _bad(f"{name} must be a list")
        out = []
        for item in value:
            if not isinstance(item, list | tuple) or len(item) != 4 or not isinstance(item[3], bytes):
                raise _bad(f"{name}: an entry is [offset, epoch, kind, data]")
            try:
                kind_ = EntryKind(_int(item[2], name))
            except ValueError as exc:
                raise _bad(f"{name}: unknown entry kind {item[2]}") from exc
            out.append(Entry(_int(item[0], name), _int(item[1], name), bytes(item[3]), kind_))
        return tuple(out)
    raise _bad(f"{name}: unsupported field type {kind}")  # pragma: no cover


def from_dict(body: Any) -> Message:
    if not isinstance(body, dict):
        raise _bad("a message is a map")
    kind = body.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _bad(f"unknown message type {show(kind)}")
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in body:
            if field.default is not dataclasses.MISSING:
                continue
            raise _bad(f"{cls.__name__}.{field.name} is missing")
        kwargs[field.name] = _decode_field(field.name, str(field.type), body[field.name])
    return cls(**kwargs)
