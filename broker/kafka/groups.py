"""The consumer-group APIs' translation: Kafka messages to the group routes' bodies, their answers back.

Pure (no I/O): each `*_body` turns a decoded Kafka request of a given version
into the dict body of the broker's group handler (`join_group`, ...; the
shapes are in broker/groups/requests.py and responses.py), each `*_response`
turns the route's answer into the Kafka response of that version. Protocol
metadata and assignments are the clients' bytes, passed through untouched.
Version differences live here: JoinGroup v0-v3 members never see
MEMBER_ID_REQUIRED (`rejoin_with_member_id`), LeaveGroup v0-v2 name one member,
OffsetFetch v8+ carries several groups, OffsetCommit and OffsetFetch v10 name
topics by id, DescribeGroups v6 answers GROUP_ID_NOT_FOUND for a group that
does not exist. Design notes: docs/kafka-listener.md, "Group APIs".
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.groups import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from kraftpy.broker.groups.group import GroupState
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
ZERO_UUID = uuid.UUID(int=0)
# Authorized operations are a bitfield, given as the set of bits; None is Kafka's "not asked for" (bit 31).
NO_AUTHORIZED_OPERATIONS = None
# With no authorizer every operation a group supports is allowed: READ (3), DELETE (6), DESCRIBE (8).
GROUP_AUTHORIZED_OPERATIONS = frozenset({3, 6, 8})
# The one group type kraftpy's coordinator runs (Kafka's "classic" protocol, KIP-848 names).
CLASSIC = "classic"
# JoinGroup v4 is where clients learn MEMBER_ID_REQUIRED (KIP-394).
MEMBER_ID_REQUIRED_SINCE = 4


def _code(answer: Mapping[str, Any]) -> int:
    return int(answer.get("error_code", 0))


def _message(answer: Mapping[str, Any]) -> str | None:
    return answer.get("message") if _code(answer) else None


# --- FindCoordinator --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    key: str
    error: ErrorCode
    message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1


def coordinator_keys(request: Any, version: int) -> tuple[int, list[str]]:
    """(key_type, keys): v0 asks for one group, v1-v3 one key of a type, v4+ a batch of keys."""
    key_type = KEY_TYPE_GROUP if version == 0 else int(request.key_type)
    keys = list(request.coordinator_keys or []) if version >= 4 else [request.key]
    return key_type, keys


def key_type_refusal(key_type: int) -> KafkaError | None:
    """Why a key type is not served, or None for groups (0) and transactions (1).

    Other types (share groups...): Kafka's INVALID_REQUEST.
    """
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return None
    return KafkaError(f"unknown coordinator type {key_type}", ErrorCode.INVALID_REQUEST)


def coordinator_at_listener(image: MetadataImage, key: str, node_id: int, listener_name: str) -> CoordinatorAnswer:
    """Broker `node_id` as reached on `listener_name` (the client's listener), not its RPC address."""
    broker = image.broker(node_id)
    for listener in broker.listeners if broker is not None else ():
        if listener.name == listener_name:
            return CoordinatorAnswer(key, ErrorCode.NONE, None, node_id, listener.host, listener.port)
    return CoordinatorAnswer(
        key,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        f"the coordinator, broker {node_id}, has no listener {listener_name!r}",
    )


def find_coordinator_response(version: int, answers: list[CoordinatorAnswer]) -> FindCoordinatorResponse:
    """v0-v3 answer one key in top-level fields; v4+ a list of coordinators."""
    if version >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=a.key,
                    node_id=a.node_id,
                    host=a.host,
                    port=a.port,
                    error_code=int(a.error),
                    error_message=a.message,
                )
                for a in answers
            ],
        )
    a = answers[0] if answers else CoordinatorAnswer("", ErrorCode.INVALID_REQUEST, "no key")
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=int(a.error),
        error_message=a.message,
        node_id=a.node_id,
        host=a.host,
        port=a.port,
    )


def find_coordinator_error(request: Any, version: int, error: KafkaError) -> FindCoordinatorResponse:
    keys = coordinator_keys(request, version)[1] if request is not None else []
    return find_coordinator_response(version, [CoordinatorAnswer(k, error.code, error.message) for k in keys])


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------------


def join_group_body(request: Any, version: int, client_id: str | None, client_host: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": request.group_id,
        "session_timeout_ms": request.session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout for both.
        "rebalance_timeout_ms": request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 5 else None,
        "protocol_type": request.protocol_type,
        "protocols": [{"name": p.name, "metadata": bytes(p.metadata)} for p in request.protocols or []],
        "client_id": client_id or "",
        "client_host": client_host,
    }
    if version >= 8 and request.reason is not None:
        body["reason"] = request.reason
    return body


def rejoin_with_member_id(version: int, body: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """For JoinGroup v0-v3, the second join a new member makes with the id MEMBER_ID_REQUIRED gave it.

    Those versions predate KIP-394, so the broker makes the round trip on the
    member's behalf (Kafka's requireKnownMemberId is false for them); None when
    the answer goes to the client as it is.
    """
    if version >= MEMBER_ID_REQUIRED_SINCE or _code(answer) != ErrorCode.MEMBER_ID_REQUIRED:
        return None
    if not answer.get("member_id"):
        return None
    return {**body, "member_id": answer["member_id"]}


def join_group_response(version: int, answer: Mapping[str, Any]) -> JoinGroupResponse:
    protocol_name = answer.get("protocol_name")
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=_code(answer),
        generation_id=int(answer.get("generation_id", -1)),
        protocol_type=answer.get("protocol_type"),
        # Nullable only from v7 on; before that Kafka writes "".
        protocol_name=protocol_name if protocol_name is not None or version >= 7 else "",
        leader=answer.get("leader") or "",
        skip_assignment=bool(answer.get("skip_assignment", False)),
        member_id=answer.get("member_id") or "",
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m["member_id"], group_instance_id=m.get("group_instance_id"), metadata=m["metadata"]
            )
            for m in answer.get("members", [])
        ],
    )


def join_group_error(request: Any, version: int, error: KafkaError) -> JoinGroupResponse:
    member_id = getattr(request, "member_id", "") or ""
    return join_group_response(version, {"error_code": int(error.code), "member_id": member_id})


def sync_group_body(request: Any, version: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": request.group_id,
        "generation_id": request.generation_id,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 3 else None,
        "assignments": [
            {"member_id": a.member_id, "assignment": bytes(a.assignment)} for a in request.assignments or []
        ],
    }
    if version >= 5:
        body["protocol_type"] = request.protocol_type
        body["protocol_name"] = request.protocol_name
    return body


def sync_group_response(version: int, answer: Mapping[str, Any]) -> SyncGroupResponse:
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=_code(answer),
        protocol_type=answer.get("protocol_type"),
        protocol_name=answer.get("protocol_name"),
        assignment=answer.get("assignment") or b"",
    )


def sync_group_error(request: Any, version: int, error: KafkaError) -> SyncGroupResponse:
    return sync_group_response(version, {"error_code": int(error.code)})


def heartbeat_body(request: Any, version: int) -> dict[str, Any]:
    return {
        "group_id": request.group_id,
        "generation_id": request.generation_id,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 3 else None,
    }


def heartbeat_response(version: int, answer: Mapping[str, Any]) -> HeartbeatResponse:
    return HeartbeatResponse(throttle_time_ms=0, error_code=_code(answer))


def heartbeat_error(request: Any, version: int, error: KafkaError) -> HeartbeatResponse:
    return heartbeat_response(version, {"error_code": int(error.code)})


def leave_group_body(request: Any, version: int) -> dict[str, Any]:
    """v0-v2 name one member; v3+ a batch (KIP-345), with a reason from v5."""
    if version < 3:
        members = [{"member_id": request.member_id, "group_instance_id": None}]
    else:
        members = []
        for m in request.members or []:
            entry = {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
            if version >= 5 and m.reason is not None:
                entry["reason"] = m.reason
            members.append(entry)
    return {"group_id": request.group_id, "members": members}


def leave_group_response(version: int, answer: Mapping[str, Any]) -> LeaveGroupResponse:
    code = _code(answer)
    members = answer.get("members", [])
    if version < 3:
        # One member, no member list: its error is the answer's (Kafka's LeaveGroupResponse for v0-v2).
        if code == 0 and members:
            code = _code(members[0])
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=code,
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=m.get("member_id", ""), group_instance_id=m.get("group_instance_id"), error_code=_code(m)
            )
            for m in members
        ],
    )


def leave_group_error(request: Any, version: int, error: KafkaError) -> LeaveGroupResponse:
    return leave_group_response(version, {"error_code": int(error.code)})


# --- OffsetCommit / OffsetFetch ----------------------------------------------------------------


@dataclass(slots=True)
class TopicRefs:
    """How a request named its topics: by id from v10 on. Partitions of ids the image lacks are answered here."""

    by_id: bool
    ids_by_name: dict[str, uuid.UUID]
    unknown: dict[uuid.UUID, list[int]]
    # Topics named that the image lacks (OffsetCommit answers them UNKNOWN_TOPIC_OR_PARTITION, as Kafka).
    missing: dict[str, list[int]] = dataclasses.field(default_factory=dict)


def resolve_topics(image: MetadataImage, topics: Iterable[Any], by_id: bool, partitions_field: str) -> TopicRefs:
    refs = TopicRefs(by_id, {}, {})
    if not by_id:
        return refs
    for topic in topics:
        found = image.topic_by_id(topic.topic_id)
        if found is None:
            refs.unknown.setdefault(topic.topic_id, []).extend(_indexes(topic, partitions_field))
        else:
            refs.ids_by_name[found.name] = topic.topic_id
    return refs


def _indexes(topic: Any, partitions_field: str) -> list[int]:
    items = getattr(topic, partitions_field) or []
    return [p if isinstance(p, int) else p.partition_index for p in items]


def _name_of(topic: Any, refs: TopicRefs, image: MetadataImage) -> str | None:
    if not refs.by_id:
        return topic.name
    found = image.topic_by_id(topic.topic_id)
    return None if found is None else found.name


def offset_commit_body(request: Any, version: int, image: MetadataImage) -> tuple[dict[str, Any], TopicRefs]:
    """The route's body and the request's topic references; topics the image lacks are left out."""
    refs = resolve_topics(image, request.topics or [], version >= 10, "partitions")
    topics = []
    for topic in request.topics or []:
        name = _name_of(topic, refs, image)
        if name is None:
            continue
        if image.topic(name) is None:
            refs.missing.setdefault(name, []).extend(p.partition_index for p in topic.partitions or [])
            continue
        partitions = []
        for p in topic.partitions or []:
            entry = {
                "partition_index": p.partition_index,
                "committed_offset": p.committed_offset,
                "committed_metadata": p.committed_metadata,
            }
            if version >= 6:
                entry["committed_leader_epoch"] = p.committed_leader_epoch
            partitions.append(entry)
        topics.append({"name": name, "partitions": partitions})
    body = {
        "group_id": request.group_id,
        "generation_id": request.generation_id_or_member_epoch,
        "member_id": request.member_id,
        "group_instance_id": request.group_instance_id if version >= 7 else None,
        "topics": topics,
    }
    return body, refs


def offset_commit_response(version: int, answer: Mapping[str, Any], refs: TopicRefs) -> OffsetCommitResponse:
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Part = Topic.OffsetCommitResponsePartition
    topics = [
        Topic(
            name=t["name"],
            topic_id=refs.ids_by_name.get(t["name"], ZERO_UUID),
            partitions=[Part(partition_index=p["partition_index"], error_code=_code(p)) for p in t["partitions"]],
        )
        for t in answer.get("topics", [])
    ]
    for topic_id, indexes in refs.unknown.items():
        parts = [Part(partition_index=i, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID)) for i in indexes]
        topics.append(Topic(name="", topic_id=topic_id, partitions=parts))
    for name, indexes in refs.missing.items():
        parts = [Part(partition_index=i, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)) for i in indexes]
        topics.append(Topic(name=name, topic_id=ZERO_UUID, partitions=parts))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def offset_commit_error(request: Any, version: int, error: KafkaError) -> OffsetCommitResponse:
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    Part = Topic.OffsetCommitResponsePartition
    topics = [
        Topic(
            name=getattr(t, "name", "") or "",
            topic_id=getattr(t, "topic_id", None) or ZERO_UUID,
            partitions=[
                Part(partition_index=p.partition_index, error_code=int(error.code)) for p in t.partitions or []
            ],
        )
        for t in request.topics or []
    ]
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


@dataclass(frozen=True, slots=True)
class FetchGroup:
    """One group of an OffsetFetch: the route's body and how its topics were named."""

    group_id: str
    body: dict[str, Any]
    refs: TopicRefs
    asked: list[tuple[str, list[int]]] | None  # the partitions asked for by name, None for all


def offset_fetch_groups(request: Any, version: int, image: MetadataImage) -> list[FetchGroup]:
    """v1-v7 ask for one group, v8+ for several (KIP-709); null topics (v2+) mean all committed offsets."""
    require_stable = bool(request.require_stable) if version >= 7 else False
    if version < 8:
        groups = [(request.group_id, request.topics)]
    else:
        groups = [(g.group_id, g.topics) for g in request.groups or []]
    out = []
    for group_id, topics in groups:
        refs = resolve_topics(image, topics or [], version >= 10, "partition_indexes")
        body: dict[str, Any] = {"group_id": group_id, "require_stable": require_stable}
        asked = None
        if topics is not None:
            asked = []
            for t in topics:
                name = _name_of(t, refs, image)
                if name is not None:
                    asked.append((name, list(t.partition_indexes or [])))
            body["topics"] = [{"name": n, "partition_indexes": ps} for n, ps in asked]
        out.append(FetchGroup(group_id, body, refs, asked))
    return out


def _fetch_topics(version: int, answer: Mapping[str, Any], group: FetchGroup, cls: Any) -> list[Any]:
    Part = next(iter(f.data_class for f in cls._struct.fields.values() if f.is_struct_array()))
    code = _code(answer)
    rows: list[tuple[str, list[dict[str, Any]]]] = [(t["name"], t["partitions"]) for t in answer.get("topics", [])]
    if code and group.asked and version < 2:
        # v0-v1 have no group-level error: it goes on every partition asked for (Kafka's v1 answer).
        rows = [(name, [{"partition_index": i, "error_code": code} for i in ps]) for name, ps in group.asked]
    # Only the v8+ topic struct has a topic id field (used from v10).
    ids = "topic_id" in cls._struct.fields

    def topic(name: str, topic_id: uuid.UUID, partitions: list[Any]) -> Any:
        return cls(name=name, partitions=partitions, **({"topic_id": topic_id} if ids else {}))

    topics = [
        topic(
            name,
            group.refs.ids_by_name.get(name, ZERO_UUID),
            [
                Part(
                    partition_index=p["partition_index"],
                    committed_offset=p.get("committed_offset", -1),
                    committed_leader_epoch=p.get("committed_leader_epoch", -1),
                    metadata=p.get("metadata", ""),
                    error_code=_code(p),
                )
                for p in parts
            ],
        )
        for name, parts in rows
    ]
    for topic_id, indexes in group.refs.unknown.items():
        parts = [
            Part(
                partition_index=i,
                committed_offset=-1,
                committed_leader_epoch=-1,
                metadata="",
                error_code=int(ErrorCode.UNKNOWN_TOPIC_ID),
            )
            for i in indexes
        ]
        topics.append(topic("", topic_id, parts))
    return topics


def offset_fetch_response(version: int, answers: list[tuple[FetchGroup, Mapping[str, Any]]]) -> OffsetFetchResponse:
    if version < 8:
        group, answer = answers[0]
        topics = _fetch_topics(version, answer, group, OffsetFetchResponse.OffsetFetchResponseTopic)
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=_code(answer))
    Group = OffsetFetchResponse.OffsetFetchResponseGroup
    return OffsetFetchResponse(
        throttle_time_ms=0,
        groups=[
            Group(
                group_id=group.group_id,
                topics=_fetch_topics(version, answer, group, Group.OffsetFetchResponseTopics),
                error_code=_code(answer),
            )
            for group, answer in answers
        ],
    )


def offset_fetch_error(request: Any, version: int, error: KafkaError) -> OffsetFetchResponse:
    if version < 8:
        groups = [(request.group_id, request.topics)]
    else:
        groups = [(g.group_id, g.topics) for g in request.groups or []]
    answers = []
    for group_id, topics in groups:
        asked = (
            None
            if topics is None
            else [(getattr(t, "name", "") or "", list(t.partition_indexes or [])) for t in topics]
        )
        refs = TopicRefs(False, {}, {})
        answers.append((FetchGroup(group_id, {}, refs, asked), {"error_code": int(error.code)}))
    return offset_fetch_response(version, answers)


# --- DescribeGroups / ListGroups / DeleteGroups / OffsetDelete ----------------------------------------


def describe_groups_body(request: Any, version: int) -> dict[str, Any]:
    return {"groups": list(request.groups or [])}


def describe_groups_response(version: int, request: Any, answer: Mapping[str, Any]) -> DescribeGroupsResponse:
    Group = DescribeGroupsResponse.DescribedGroup
    Member = Group.DescribedGroupMember
    asked_ops = version >= 3 and bool(request.include_authorized_operations)
    groups = []
    for g in answer.get("groups", []):
        code, message = _code(g), _message(g)
        if version >= 6 and code == 0 and g.get("group_state") == GroupState.DEAD.value and not g.get("members"):
            # KIP-1043: from v6 a group that does not exist is an error, not a "Dead" group.
            code, message = int(ErrorCode.GROUP_ID_NOT_FOUND), f"group {g['group_id']!r} does not exist"
        groups.append(
            Group(
                error_code=code,
                error_message=message,
                group_id=g["group_id"],
                group_state=g.get("group_state", ""),
                protocol_type=g.get("protocol_type", ""),
                protocol_data=g.get("protocol_data", ""),
                members=[
                    Member(
                        member_id=m["member_id"],
                        group_instance_id=m.get("group_instance_id"),
                        client_id=m.get("client_id", ""),
                        client_host=m.get("client_host", ""),
                        member_metadata=m.get("member_metadata", b""),
                        member_assignment=m.get("member_assignment", b""),
                    )
                    for m in g.get("members", [])
                ],
                authorized_operations=set(GROUP_AUTHORIZED_OPERATIONS) if asked_ops else NO_AUTHORIZED_OPERATIONS,
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


def describe_groups_error(request: Any, version: int, error: KafkaError) -> DescribeGroupsResponse:
    groups = [{"error_code": int(error.code), "message": error.message, "group_id": g} for g in request.groups or []]
    return describe_groups_response(version, request, {"groups": groups})


_STATES = {s.value.lower() for s in GroupState}


@dataclass(frozen=True, slots=True)
class ListGroupsAsk:
    body: dict[str, Any] | None  # None: nothing can match, answer an empty list without asking
    version: int


def list_groups_ask(request: Any, version: int) -> ListGroupsAsk:
    """States (v4+) and types (v5+) filters, case-insensitive as Kafka's; unknown names match nothing."""
    states = list(request.states_filter or []) if version >= 4 else []
    types = [t.lower() for t in request.types_filter or []] if version >= 5 else []
    if types and CLASSIC not in types:
        return ListGroupsAsk(None, version)
    known = [s for s in states if s.lower() in _STATES]
    if states and not known:
        return ListGroupsAsk(None, version)
    return ListGroupsAsk({"states_filter": known} if known else {}, version)


def list_groups_response(version: int, answer: Mapping[str, Any]) -> ListGroupsResponse:
    Listed = ListGroupsResponse.ListedGroup
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=_code(answer),
        groups=[
            Listed(
                group_id=g["group_id"],
                protocol_type=g.get("protocol_type", ""),
                group_state=g.get("group_state", ""),
                group_type=CLASSIC,
            )
            for g in answer.get("groups", [])
        ],
    )


def list_groups_error(request: Any, version: int, error: KafkaError) -> ListGroupsResponse:
    return list_groups_response(version, {"error_code": int(error.code)})


def delete_groups_body(request: Any, version: int) -> dict[str, Any]:
    return {"groups_names": list(request.groups_names or [])}


def delete_groups_response(version: int, answer: Mapping[str, Any]) -> DeleteGroupsResponse:
    Result = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[Result(group_id=r["group_id"], error_code=_code(r)) for r in answer.get("results", [])],
    )


def delete_groups_error(request: Any, version: int, error: KafkaError) -> DeleteGroupsResponse:
    results = [{"group_id": g, "error_code": int(error.code)} for g in request.groups_names or []]
    return delete_groups_response(version, {"results": results})


def offset_delete_body(request: Any, version: int) -> dict[str, Any]:
    return {
        "group_id": request.group_id,
        "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index} for p in t.partitions or []]}
            for t in request.topics or []
        ],
    }


def offset_delete_response(version: int, answer: Mapping[str, Any]) -> OffsetDeleteResponse:
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    return OffsetDeleteResponse(
        error_code=_code(answer),
        throttle_time_ms=0,
        topics=[
            Topic(
                name=t["name"],
                partitions=[
                    Topic.OffsetDeleteResponsePartition(partition_index=p["partition_index"], error_code=_code(p))
                    for p in t["partitions"]
                ],
            )
            for t in answer.get("topics", [])
        ],
    )


def offset_delete_error(request: Any, version: int, error: KafkaError) -> OffsetDeleteResponse:
    """A group-level error: Kafka puts it at the top and lists no partitions."""
    return offset_delete_response(version, {"error_code": int(error.code)})
