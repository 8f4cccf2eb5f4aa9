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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT16_MAX, INT16_MIN, INT64_MAX, INT64_MIN, check_int, show
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


# The codec is compiled once per message type from its dataclass fields: a message is a few
# dozen fields on every Raft exchange, and reading each field's declared type per call cost more
# than the rest of the decode (docs/perf-raft.md, "Where the time goes").


def _bad(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REQUEST)


def _int(value: Any, name: str) -> int:
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return check_int(value, name)  # says why; int64 at most here, codec.py holds each field to its width


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(f"{name} must be a boolean")
    return value


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string")
    return value


def _bytes(value: Any, name: str) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise _bad(f"{name} must be bytes")
    return bytes(value)


_ERROR_CODES = {int(code): code for code in ErrorCode}
_ENTRY_KINDS = {int(kind): kind for kind in EntryKind}


def _error_code(value: Any, name: str) -> ErrorCode:
    code = _ERROR_CODES.get(value) if type(value) is int else None
    if code is not None:
        return code
    try:
        return ErrorCode(check_int(value, name, INT16_MIN, INT16_MAX))
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _pair(value: Any, name: str) -> OffsetAndEpoch:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _bad(f"{name} must be [offset, epoch]")
    return OffsetAndEpoch(_int(value[0], name), _int(value[1], name))


def _ints(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise _bad(f"{name} must be a list")
    return tuple(_int(v, name) for v in value)


def _entries(value: Any, name: str) -> tuple[Entry, ...]:
    if not isinstance(value, list | tuple):
        raise _bad(f"{name} must be a list")
    out = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 4 or not isinstance(item[3], bytes):
            raise _bad(f"{name}: an entry is [offset, epoch, kind, data]")
        kind = _ENTRY_KINDS.get(item[2]) if type(item[2]) is int else None
        if kind is None:
            raise _bad(f"{name}: unknown entry kind {show(item[2])}")
        out.append(Entry(_int(item[0], name), _int(item[1], name), bytes(item[3]), kind))
    return tuple(out)


def _encode_entries(entries: tuple[Entry, ...]) -> list[list[Any]]:
    return [[e.offset, e.epoch, int(e.kind), e.data] for e in entries]


# declared field type -> (decoder, encoder); an encoder of None sends the value as it is
_KINDS: dict[str, tuple[Callable[[Any, str], Any], Callable[[Any], Any] | None]] = {
    "int": (_int, None),
    "bool": (_bool, None),
    "str": (_str, None),
    "bytes": (_bytes, None),
    "ErrorCode": (_error_code, int),
    "OffsetAndEpoch": (_pair, list),
    "tuple[int, ...]": (_ints, list),
    "tuple[Entry, ...]": (_entries, _encode_entries),
}


class _Field(NamedTuple):
    name: str
    decode: Callable[[Any, str], Any]
    encode: Callable[[Any], Any] | None
    optional: bool  # None is a value
    required: bool  # no default: a body without it is refused


def _compile(cls: type) -> tuple[_Field, ...]:
    out = []
    for field in dataclasses.fields(cls):
        kind = str(field.type)
        decode, encode = _KINDS[kind.replace(" | None", "")]  # a new field type needs its entry here
        required = field.default is dataclasses.MISSING
        out.append(_Field(field.name, decode, encode, "None" in kind, required))
    return tuple(out)


_FIELDS: dict[type, tuple[_Field, ...]] = {cls: _compile(cls) for cls in MESSAGE_TYPES.values()}
_ABSENT = object()


def to_dict(message: Message) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type(message).__name__}
    for name, _decode, encode, _optional, _required in _FIELDS[type(message)]:
        value = getattr(message, name)
        body[name] = value if encode is None or value is None else encode(value)
    return body


def from_dict(body: Any) -> Message:
    if not isinstance(body, dict):
        raise _bad("a message is a map")
    kind = body.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _bad(f"unknown message type {show(kind)}")
    kwargs: dict[str, Any] = {}
    for name, decode, _encode, optional, required in _FIELDS[cls]:
        value = body.get(name, _ABSENT)
        if value is _ABSENT:
            if required:
                raise _bad(f"{cls.__name__}.{name} is missing")
        elif value is None:
            if not optional:
                raise _bad(f"{name} is missing")
            kwargs[name] = None
        else:
            kwargs[name] = decode(value, name)
    return cls(**kwargs)
