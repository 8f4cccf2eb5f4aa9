"""The group APIs' answers as CBOR-ready maps, one builder per API so every answer has the same shape.

Field names are Kafka's (snake_case). A failed answer carries `error_code`,
`error` (the code's name) and `message`, as every kraftpy answer does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode

NO_GENERATION = -1


def error_fields(code: ErrorCode, message: str = "") -> dict[str, Any]:
    if code is ErrorCode.NONE:
        return {"error_code": 0}
    return {"error_code": int(code), "error": code.name, "message": message or code.name}


def join_response(
    code: ErrorCode,
    *,
    member_id: str = "",
    generation_id: int = NO_GENERATION,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str | None = None,
    skip_assignment: bool = False,
    members: Iterable[tuple[str, str | None, bytes]] = (),
    message: str = "",
) -> dict[str, Any]:
    return {
        **error_fields(code, message),
        "generation_id": generation_id,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "leader": leader or "",
        "skip_assignment": skip_assignment,
        "member_id": member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": data} for m, i, data in members],
    }


def sync_response(
    code: ErrorCode,
    *,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
    message: str = "",
) -> dict[str, Any]:
    return {
        **error_fields(code, message),
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "assignment": assignment,
    }


def heartbeat_response(code: ErrorCode, message: str = "") -> dict[str, Any]:
    return error_fields(code, message)


def leave_response(
    code: ErrorCode, members: Iterable[tuple[str, str | None, ErrorCode]] = (), message: str = ""
) -> dict[str, Any]:
    return {
        **error_fields(code, message),
        "members": [{"member_id": m, "group_instance_id": i, **error_fields(c)} for m, i, c in members],
    }


def offset_commit_response(
    results: Mapping[tuple[str, int], ErrorCode], messages: Mapping[tuple[str, int], str] | None = None
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in results.items():
        message = (messages or {}).get((topic, partition), "")
        by_topic.setdefault(topic, []).append({"partition_index": partition, **error_fields(code, message)})
    return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def offset_fetch_response(
    code: ErrorCode,
    partitions: Iterable[tuple[str, int, int, int, str, ErrorCode]] = (),
    message: str = "",
) -> dict[str, Any]:
    """partitions: (topic, partition, committed_offset, committed_leader_epoch, metadata, error)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, epoch, metadata, part_code in partitions:
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": epoch,
                "metadata": metadata,
                **error_fields(part_code),
            }
        )
    return {**error_fields(code, message), "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def list_groups_response(code: ErrorCode, groups: Iterable[tuple[str, str, str]], message: str = "") -> dict[str, Any]:
    return {
        **error_fields(code, message),
        "groups": [{"group_id": g, "protocol_type": p, "group_state": s} for g, p, s in groups],
    }


def describe_groups_response(groups: list[dict[str, Any]]) -> dict[str, Any]:
    return {"error_code": 0, "groups": groups}


def delete_groups_response(results: Iterable[tuple[str, ErrorCode]]) -> dict[str, Any]:
    return {"error_code": 0, "results": [{"group_id": g, **error_fields(c)} for g, c in results]}


def offset_delete_response(
    code: ErrorCode, results: Mapping[tuple[str, int], ErrorCode] | None = None, message: str = ""
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), part_code in (results or {}).items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, **error_fields(part_code)})
    return {**error_fields(code, message), "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def storage_error(code: ErrorCode) -> ErrorCode:
    """What a failed write of group metadata tells the member (Kafka's storeGroup mapping)."""
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def commit_storage_error(code: ErrorCode) -> ErrorCode:
    """What a failed write of offsets, or a failed verification of a TxnOffsetCommit, tells the committer
    (Kafka's maybeConvertOffsetCommitError)."""
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return storage_error(code)
