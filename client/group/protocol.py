"""The group APIs as the consumer sends and reads them (paths, request bodies, parsed answers).

Shapes are those of docs/handlers.md, Group handlers. Parsing is defensive: an answer
that is not what the coordinator sends becomes CORRUPT_MESSAGE on the request
(handled like a lost answer), never a crash of the membership core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.client.errors import error_from, malformed
from kraftpy.protocol.errors import ErrorCode

PATHS = {
    "find_coordinator": "/kafka/find_coordinator",
    "join_group": "/kafka/join_group",
    "sync_group": "/kafka/sync_group",
    "heartbeat": "/kafka/heartbeat",
    "leave_group": "/kafka/leave_group",
    "offset_commit": "/kafka/offset_commit",
    "offset_fetch": "/kafka/offset_fetch",
}
# JoinGroup waits for the whole rebalance, so its answer may take the rebalance timeout plus
# this much (Kafka's JOIN_GROUP_TIMEOUT_LAPSE).
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5_000
COORDINATOR_KEY_TYPE_GROUP = 0


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    code: ErrorCode
    message: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    skip_assignment: bool
    members: tuple[JoinMember, ...]


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    code: ErrorCode
    message: str
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


def _code(body: Mapping[str, Any]) -> tuple[ErrorCode, str]:
    raw = body.get("error_code", 0)
    if type(raw) is not int:
        raise malformed("group", f"error_code {raw!r}")
    err = error_from(raw, str(body.get("message") or ""))
    return err.code, err.message


def _typed(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise malformed(what, f"{name}={value!r:.60}")
    return value


def find_coordinator_body(group_id: str) -> dict[str, Any]:
    return {"key": group_id, "key_type": COORDINATOR_KEY_TYPE_GROUP}


def parse_find_coordinator(body: Mapping[str, Any]) -> tuple[ErrorCode, str, Node | None]:
    code, message = _code(body)
    if code is not ErrorCode.NONE:
        return code, message, None
    node_id = _typed(body, "node_id", int, "find_coordinator")
    host = _typed(body, "host", str, "find_coordinator")
    port = _typed(body, "port", int, "find_coordinator")
    if node_id is None or not host or port is None or not 0 < port < 65536:
        raise malformed("find_coordinator", "node_id, host and port are required")
    return code, message, Node(node_id, host, port)


def parse_join(body: Mapping[str, Any]) -> JoinAnswer:
    code, message = _code(body)
    members = []
    for entry in _typed(body, "members", list, "join_group", []) or []:
        if not isinstance(entry, Mapping):
            raise malformed("join_group", "members entries must be maps")
        members.append(
            JoinMember(
                member_id=_typed(entry, "member_id", str, "join_group", ""),
                group_instance_id=_typed(entry, "group_instance_id", str, "join_group"),
                metadata=_typed(entry, "metadata", bytes, "join_group", b""),
            )
        )
    return JoinAnswer(
        code=code,
        message=message,
        generation_id=_typed(body, "generation_id", int, "join_group", -1),
        protocol_type=_typed(body, "protocol_type", str, "join_group"),
        protocol_name=_typed(body, "protocol_name", str, "join_group"),
        leader=_typed(body, "leader", str, "join_group", "") or "",
        member_id=_typed(body, "member_id", str, "join_group", "") or "",
        skip_assignment=bool(_typed(body, "skip_assignment", bool, "join_group", False)),
        members=tuple(members),
    )


def parse_sync(body: Mapping[str, Any]) -> SyncAnswer:
    code, message = _code(body)
    return SyncAnswer(
        code=code,
        message=message,
        protocol_type=_typed(body, "protocol_type", str, "sync_group"),
        protocol_name=_typed(body, "protocol_name", str, "sync_group"),
        assignment=_typed(body, "assignment", bytes, "sync_group", b"") or b"",
    )


def parse_simple(body: Mapping[str, Any]) -> tuple[ErrorCode, str]:
    """Heartbeat and LeaveGroup: the top-level error is all that matters to the member."""
    return _code(body)
