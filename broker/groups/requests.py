"""The group APIs' requests: CBOR bodies checked field by field into plain values.

Field names are Kafka's JSON schema names in snake_case. Anything malformed
raises KafkaError(INVALID_REQUEST) naming the field, before the coordinator
looks at its state; semantic problems (unknown member, bad session timeout,
...) are the coordinator's to answer with their own codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.groups.config import GroupCoordinatorConfig
from kraftpy.protocol.validate import INT16_MAX, INT32_MAX, INT64_MAX, field, invalid

MAX_ITEMS = 100_000  # topics, partitions, members or groups in one request


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str = ""
    client_host: str = ""
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: tuple[CommitPartition, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """OffsetCommit inside a transaction (Kafka's TxnOffsetCommit): held until the transaction ends."""

    commit: OffsetCommitRequest
    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every committed offset of the group
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    groups_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...]


GroupRequest = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | TxnOffsetCommitRequest
    | OffsetFetchRequest
    | ListGroupsRequest
    | DescribeGroupsRequest
    | DeleteGroupsRequest
    | OffsetDeleteRequest
)


def _items(body: Mapping[str, Any], name: str, *, default: Any = None, nullable: bool = False) -> list[Any] | None:
    kwargs: dict[str, Any] = {"nullable": nullable, "max_len": MAX_ITEMS}
    if default is not None:
        kwargs["default"] = default
    return field(body, name, list, **kwargs)


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid(f"{where} entries must be maps, got {type(value).__name__}")
    return value


def _strings(body: Mapping[str, Any], name: str, max_len: int) -> tuple[str, ...]:
    values = _items(body, name)
    assert values is not None
    for value in values:
        if not isinstance(value, str) or len(value) > max_len:
            raise invalid(f"field {name!r} must hold strings of at most {max_len} characters")
    return tuple(values)


class RequestParser:
    """Parses bodies with the size bounds of one coordinator's config."""

    def __init__(self, config: GroupCoordinatorConfig) -> None:
        self.config = config

    def _id(self, body: Mapping[str, Any], name: str, **kwargs: Any) -> Any:
        return field(body, name, str, max_len=self.config.max_id_length, **kwargs)

    def _common(self, body: Mapping[str, Any]) -> tuple[str, int, str, str | None]:
        return (
            self._id(body, "group_id"),
            field(body, "generation_id", int, default=-1, min_value=-1, max_value=INT32_MAX),
            self._id(body, "member_id", default=""),
            self._id(body, "group_instance_id", default=None, nullable=True),
        )

    def join_group(self, body: Mapping[str, Any]) -> JoinGroupRequest:
        session = field(body, "session_timeout_ms", int, min_value=0, max_value=INT32_MAX)
        rebalance = field(body, "rebalance_timeout_ms", int, default=session, min_value=0, max_value=INT32_MAX)
        raw = _items(body, "protocols")
        assert raw is not None
        if len(raw) > self.config.max_protocols_per_member:
            raise invalid(f"at most {self.config.max_protocols_per_member} protocols per member, got {len(raw)}")
        protocols: list[tuple[str, bytes]] = []
        for entry in raw:
            entry = _map(entry, "protocols")
            name = self._id(entry, "name")
            metadata = field(entry, "metadata", bytes, max_len=self.config.max_protocol_metadata_bytes)
            if any(name == seen for seen, _ in protocols):
                raise invalid(f"protocol {name!r} is listed twice")
            protocols.append((name, metadata))
        return JoinGroupRequest(
            group_id=self._id(body, "group_id"),
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            member_id=self._id(body, "member_id", default=""),
            group_instance_id=self._id(body, "group_instance_id", default=None, nullable=True),
            protocol_type=self._id(body, "protocol_type"),
            protocols=tuple(protocols),
            client_id=self._id(body, "client_id", default=""),
            client_host=self._id(body, "client_host", default=""),
            reason=field(body, "reason", str, default=None, nullable=True, max_len=self.config.max_id_length),
        )

    def sync_group(self, body: Mapping[str, Any]) -> SyncGroupRequest:
        group_id, generation, member_id, instance = self._common(body)
        assignments: list[tuple[str, bytes]] = []
        seen: set[str] = set()
        for entry in _items(body, "assignments", default=[]) or []:
            entry = _map(entry, "assignments")
            target = self._id(entry, "member_id")
            data = field(entry, "assignment", bytes, max_len=self.config.max_protocol_metadata_bytes)
            if target in seen:
                raise invalid(f"member {target!r} has two assignments")
            seen.add(target)
            assignments.append((target, data))
        return SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=self._id(body, "protocol_type", default=None, nullable=True),
            protocol_name=self._id(body, "protocol_name", default=None, nullable=True),
            assignments=tuple(assignments),
        )

    def heartbeat(self, body: Mapping[str, Any]) -> HeartbeatRequest:
        return HeartbeatRequest(*self._common(body))

    def leave_group(self, body: Mapping[str, Any]) -> LeaveGroupRequest:
        members = []
        for entry in _items(body, "members") or []:
            entry = _map(entry, "members")
            members.append(
                LeavingMember(
                    member_id=self._id(entry, "member_id", default=""),
                    group_instance_id=self._id(entry, "group_instance_id", default=None, nullable=True),
                    reason=field(entry, "reason", str, default=None, nullable=True, max_len=self.config.max_id_length),
                )
            )
        if not members:
            raise invalid("field 'members' must name at least one member")
        return LeaveGroupRequest(self._id(body, "group_id"), tuple(members))

    def offset_commit(self, body: Mapping[str, Any]) -> OffsetCommitRequest:
        group_id, generation, member_id, instance = self._common(body)
        partitions: list[CommitPartition] = []
        seen: set[tuple[str, int]] = set()
        for topic in _items(body, "topics") or []:
            topic = _map(topic, "topics")
            name = self._id(topic, "name")
            for part in _items(topic, "partitions") or []:
                part = _map(part, "partitions")
                index = field(part, "partition_index", int, min_value=0, max_value=INT32_MAX)
                if (name, index) in seen:
                    raise invalid(f"partition {name}-{index} is committed twice")
                seen.add((name, index))
                epoch = field(part, "committed_leader_epoch", int, default=-1, min_value=-1, max_value=INT32_MAX)
                # The metadata bound is checked per partition (OFFSET_METADATA_TOO_LARGE), not here;
                # this cap only keeps a hostile string from being held at all.
                metadata = field(part, "committed_metadata", str, default=None, nullable=True, max_len=1_048_576)
                partitions.append(
                    CommitPartition(
                        topic=name,
                        partition=index,
                        offset=field(part, "committed_offset", int, min_value=0, max_value=INT64_MAX),
                        leader_epoch=None if epoch < 0 else epoch,
                        metadata=metadata or "",
                    )
                )
        return OffsetCommitRequest(group_id, generation, member_id, instance, tuple(partitions))

    def txn_offset_commit(self, body: Mapping[str, Any]) -> TxnOffsetCommitRequest:
        return TxnOffsetCommitRequest(
            commit=self.offset_commit(body),
            transactional_id=self._id(body, "transactional_id"),
            producer_id=field(body, "producer_id", int, min_value=0, max_value=INT64_MAX),
            producer_epoch=field(body, "producer_epoch", int, min_value=0, max_value=INT16_MAX),
        )

    def offset_fetch(self, body: Mapping[str, Any]) -> OffsetFetchRequest:
        # Missing or null topics: every committed offset of the group, as Kafka's null.
        topics = _items(body, "topics", nullable=True) if "topics" in body else None
        partitions: list[tuple[str, int]] | None = None
        if topics is not None:
            partitions = []
            for topic in topics:
                topic = _map(topic, "topics")
                name = self._id(topic, "name")
                for index in _items(topic, "partition_indexes") or []:
                    if type(index) is not int or not 0 <= index <= INT32_MAX:
                        raise invalid(f"partition_indexes of {name!r} must be non-negative integers")
                    partitions.append((name, index))
        return OffsetFetchRequest(
            group_id=self._id(body, "group_id"),
            partitions=None if partitions is None else tuple(dict.fromkeys(partitions)),
            require_stable=field(body, "require_stable", bool, default=False),
        )

    def list_groups(self, body: Mapping[str, Any]) -> ListGroupsRequest:
        if "states_filter" not in body:
            return ListGroupsRequest()
        return ListGroupsRequest(_strings(body, "states_filter", 64))

    def describe_groups(self, body: Mapping[str, Any]) -> DescribeGroupsRequest:
        return DescribeGroupsRequest(_strings(body, "groups", self.config.max_id_length))

    def delete_groups(self, body: Mapping[str, Any]) -> DeleteGroupsRequest:
        return DeleteGroupsRequest(_strings(body, "groups_names", self.config.max_id_length))

    def offset_delete(self, body: Mapping[str, Any]) -> OffsetDeleteRequest:
        partitions: list[tuple[str, int]] = []
        for topic in _items(body, "topics") or []:
            topic = _map(topic, "topics")
            name = self._id(topic, "name")
            for part in _items(topic, "partitions") or []:
                part = _map(part, "partitions")
                partitions.append((name, field(part, "partition_index", int, min_value=0, max_value=INT32_MAX)))
        return OffsetDeleteRequest(self._id(body, "group_id"), tuple(dict.fromkeys(partitions)))

    def parse(self, api: str, body: Mapping[str, Any]) -> GroupRequest:
        parser = getattr(self, api, None) if api in GROUP_APIS else None
        if parser is None:
            raise invalid(f"unknown group API {api!r}; expected one of {', '.join(GROUP_APIS)}")
        if not isinstance(body, Mapping):
            raise invalid(f"request body must be a map, got {type(body).__name__}")
        return parser(body)


GROUP_APIS = (
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "txn_offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
)
