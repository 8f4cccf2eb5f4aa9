"""The group APIs on Kafka's wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

The bodies the group cores make already use Kafka's JSON field names
(docs/handlers.md, Group handlers); the differences handled here are Kafka's per
version: FindCoordinator v4+ asks in `coordinator_keys`, LeaveGroup below v3
names one member at the top level, OffsetCommit's generation field is
`generation_id_or_member_epoch`. Pure; the classes come from the codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.client.wire.common import error_fields, request_class

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
BATCHED_COORDINATOR_VERSION = 4  # FindCoordinator v4 (KIP-699)
LEAVE_MANY_VERSION = 3  # LeaveGroup v3 (KIP-345)
DEFAULT_RETENTION_MS = -1  # OffsetCommit v2-v4: the broker's offsets.retention.minutes


def build_find_coordinator(body: Mapping[str, Any], version: int) -> Any:
    key = body["key"]
    return request_class(FIND_COORDINATOR)(key=key, key_type=body.get("key_type", 0), coordinator_keys=[key])


def read_find_coordinator(response: Any, version: int) -> dict[str, Any]:
    item = response
    if version >= BATCHED_COORDINATOR_VERSION:
        if not response.coordinators:
            raise ValueError("a FindCoordinator answer with no coordinator")
        item = response.coordinators[0]
    return {
        **error_fields(item.error_code, getattr(item, "error_message", None)),
        "node_id": item.node_id,
        "host": item.host,
        "port": item.port,
    }


def build_join_group(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(JOIN_GROUP)
    return cls(
        group_id=body["group_id"],
        session_timeout_ms=body["session_timeout_ms"],
        rebalance_timeout_ms=body.get("rebalance_timeout_ms", body["session_timeout_ms"]),
        member_id=body.get("member_id", ""),
        group_instance_id=body.get("group_instance_id"),
        protocol_type=body["protocol_type"],
        protocols=[cls.JoinGroupRequestProtocol(name=p["name"], metadata=p["metadata"]) for p in body["protocols"]],
        reason=body.get("reason"),
    )


def read_join_group(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "generation_id": response.generation_id,
        "protocol_type": getattr(response, "protocol_type", None),
        "protocol_name": response.protocol_name,
        "leader": response.leader,
        "skip_assignment": bool(getattr(response, "skip_assignment", False)),
        "member_id": response.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": bytes(m.metadata or b"")}
            for m in response.members or []
        ],
    }


def build_sync_group(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(SYNC_GROUP)
    return cls(
        group_id=body["group_id"],
        generation_id=body["generation_id"],
        member_id=body["member_id"],
        group_instance_id=body.get("group_instance_id"),
        protocol_type=body.get("protocol_type"),
        protocol_name=body.get("protocol_name"),
        assignments=[
            cls.SyncGroupRequestAssignment(member_id=a["member_id"], assignment=a["assignment"])
            for a in body.get("assignments") or []
        ],
    )


def read_sync_group(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "protocol_type": getattr(response, "protocol_type", None),
        "protocol_name": getattr(response, "protocol_name", None),
        "assignment": bytes(response.assignment or b""),
    }


def build_heartbeat(body: Mapping[str, Any], version: int) -> Any:
    return request_class(HEARTBEAT)(
        group_id=body["group_id"],
        generation_id=body["generation_id"],
        member_id=body["member_id"],
        group_instance_id=body.get("group_instance_id"),
    )


def read_simple(response: Any, version: int) -> dict[str, Any]:
    return error_fields(response.error_code)


def build_leave_group(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(LEAVE_GROUP)
    members = body.get("members") or []
    if version < LEAVE_MANY_VERSION:
        if len(members) != 1:
            raise ValueError(f"LeaveGroup v{version} names one member, not {len(members)}")
        return cls(group_id=body["group_id"], member_id=members[0]["member_id"])
    return cls(
        group_id=body["group_id"],
        members=[
            cls.MemberIdentity(
                member_id=m.get("member_id", ""), group_instance_id=m.get("group_instance_id"), reason=m.get("reason")
            )
            for m in members
        ],
    )


def read_leave_group(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, **error_fields(m.error_code)}
            for m in getattr(response, "members", None) or []
        ],
    }


def build_offset_commit(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(OFFSET_COMMIT)
    topic_cls = cls.OffsetCommitRequestTopic
    return cls(
        group_id=body["group_id"],
        generation_id_or_member_epoch=body.get("generation_id", -1),
        member_id=body.get("member_id", ""),
        group_instance_id=body.get("group_instance_id"),
        retention_time_ms=DEFAULT_RETENTION_MS,
        topics=[
            topic_cls(
                name=t["name"],
                partitions=[
                    topic_cls.OffsetCommitRequestPartition(
                        partition_index=p["partition_index"],
                        committed_offset=p["committed_offset"],
                        committed_leader_epoch=p.get("committed_leader_epoch", -1),
                        commit_timestamp=-1,
                        committed_metadata=p.get("committed_metadata"),
                    )
                    for p in t["partitions"]
                ],
            )
            for t in body["topics"]
        ],
    )


def _partition_errors(topics: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [{"partition_index": p.partition_index, **error_fields(p.error_code)} for p in t.partitions],
        }
        for t in topics or []
    ]


def read_offset_commit(response: Any, version: int) -> dict[str, Any]:
    return {"error_code": 0, "topics": _partition_errors(response.topics)}


def build_offset_fetch(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(OFFSET_FETCH)
    topics = body.get("topics")
    return cls(
        group_id=body["group_id"],
        topics=None
        if topics is None
        else [cls.OffsetFetchRequestTopic(name=t["name"], partition_indexes=t["partition_indexes"]) for t in topics],
        require_stable=bool(body.get("require_stable", False)),
    )


def read_offset_fetch(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(getattr(response, "error_code", 0) or 0),
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        **error_fields(p.error_code),
                        "partition_index": p.partition_index,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": getattr(p, "committed_leader_epoch", -1),
                        "metadata": p.metadata,
                    }
                    for p in t.partitions
                ],
            }
            for t in response.topics or []
        ],
    }


def build_list_groups(body: Mapping[str, Any], version: int) -> Any:
    return request_class(LIST_GROUPS)(states_filter=list(body.get("states_filter") or []), types_filter=[])


def read_list_groups(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": getattr(g, "group_state", None)}
            for g in response.groups or []
        ],
    }


def build_describe_groups(body: Mapping[str, Any], version: int) -> Any:
    return request_class(DESCRIBE_GROUPS)(groups=list(body["groups"]), include_authorized_operations=False)


def read_describe_groups(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "groups": [
            {
                **error_fields(g.error_code, getattr(g, "error_message", None)),
                "group_id": g.group_id,
                "group_state": g.group_state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": getattr(m, "group_instance_id", None),
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": bytes(m.member_metadata or b""),
                        "member_assignment": bytes(m.member_assignment or b""),
                    }
                    for m in g.members or []
                ],
            }
            for g in response.groups or []
        ],
    }


def build_delete_groups(body: Mapping[str, Any], version: int) -> Any:
    return request_class(DELETE_GROUPS)(groups_names=list(body["groups_names"]))


def read_delete_groups(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "results": [{"group_id": r.group_id, **error_fields(r.error_code)} for r in response.results or []],
    }


def build_offset_delete(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(OFFSET_DELETE)
    topic_cls = cls.OffsetDeleteRequestTopic
    return cls(
        group_id=body["group_id"],
        topics=[
            topic_cls(
                name=t["name"],
                partitions=[
                    topic_cls.OffsetDeleteRequestPartition(partition_index=p["partition_index"])
                    for p in t["partitions"]
                ],
            )
            for t in body["topics"]
        ],
    )


def read_offset_delete(response: Any, version: int) -> dict[str, Any]:
    return {**error_fields(response.error_code), "topics": _partition_errors(response.topics)}
