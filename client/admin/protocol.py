"""Admin requests and answers (sans-I/O): bodies per docs/handlers.md, parsed results, the controller's address.

Topic and config calls go to the active controller; consumer-group calls go to
the group's coordinator (`coordinator_error` tells which answers mean "find
the coordinator again" or "wait"), except ListGroups, which every broker
answers for the groups it coordinates. ControllerLocator picks the target:
the last leader hint (NOT_CONTROLLER answers carry details.leader_address),
else the controller named by metadata (controller_id, when it is also a
broker), else any known server, which answers NOT_CONTROLLER with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kraftpy.client.admin.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    CreateTopicResult,
    MemberDescription,
    NewTopic,
    OperationResult,
    QuorumInfo,
    ReplicaState,
)
from kraftpy.client.errors import error_from, malformed
from kraftpy.client.group.protocol import PATHS as GROUP_PATHS
from kraftpy.client.metadata import Address, Metadata
from kraftpy.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition, parse_address

CONTROLLER = "/controller/"
GROUP_ADMIN_PATHS = {
    **GROUP_PATHS,
    "list_groups": "/kafka/list_groups",
    "describe_groups": "/kafka/describe_groups",
    "delete_groups": "/kafka/delete_groups",
}
# The coordinator moved or is not there yet: look it up again (Kafka's markCoordinatorUnknown).
FIND_AGAIN = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
# Worth another try at the same coordinator after a backoff.
WAIT = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def _items(body: Mapping[str, Any], *keys: str) -> list[Mapping[str, Any]]:
    """The per-item list of an answer, under the first of `keys` present (Kafka's names vary by API)."""
    for key in keys:
        value = body.get(key)
        if isinstance(value, list):
            return [v for v in value if isinstance(v, Mapping)]
    return []


def _error(item: Mapping[str, Any]) -> KafkaError | None:
    code = item.get("error_code", 0) or 0
    if not code:
        return None
    return error_from(code, str(item.get("message") or item.get("error_message") or ""))


# Topics --------------------------------------------------------------------


def create_topics_request(topics: Sequence[NewTopic], validate_only: bool) -> dict[str, Any]:
    out = []
    for t in topics:
        assignments = [
            {"partition": p, "broker_ids": list(ids)} for p, ids in sorted((t.replica_assignments or {}).items())
        ]
        out.append(
            {
                "name": t.name,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "assignments": assignments,
                "configs": {str(k): str(v) for k, v in t.configs.items()},
            }
        )
    return {"topics": out, "validate_only": validate_only}


def parse_create_topics(body: Mapping[str, Any]) -> dict[str, CreateTopicResult]:
    return {
        str(item.get("name")): CreateTopicResult(
            name=str(item.get("name")),
            error=_error(item),
            topic_id=item.get("topic_id"),
            num_partitions=int(item.get("num_partitions", -1) or -1),
            replication_factor=int(item.get("replication_factor", -1) or -1),
        )
        for item in _items(body, "topics", "results", "responses")
    }


def parse_named_results(body: Mapping[str, Any]) -> dict[str, OperationResult]:
    """delete_topics / create_partitions: per topic `name, error_code, message`."""
    return {
        str(item.get("name")): OperationResult(str(item.get("name")), _error(item))
        for item in _items(body, "topics", "results", "responses")
    }


# Configs -------------------------------------------------------------------


def describe_configs_request(resources: Iterable[ConfigResource]) -> dict[str, Any]:
    return {"resources": [{"resource_type": r.resource_type, "resource_name": r.name} for r in resources]}


def parse_describe_configs(
    body: Mapping[str, Any], asked: Sequence[ConfigResource]
) -> dict[ConfigResource, list[ConfigEntry] | KafkaError]:
    out: dict[ConfigResource, list[ConfigEntry] | KafkaError] = {}
    items = _items(body, "resources", "results")
    for i, item in enumerate(items):
        name, kind = item.get("resource_name"), item.get("resource_type")
        resource = ConfigResource(str(kind), str(name)) if name is not None and kind else asked[i]
        error = _error(item)
        if error is not None:
            out[resource] = error
            continue
        out[resource] = [
            ConfigEntry(str(c.get("name")), c.get("value"), c.get("source"), bool(c.get("is_default", False)))
            for c in item.get("configs") or []
        ]
    return out


def alter_configs_request(changes: Mapping[ConfigResource, Sequence[AlterConfigOp]], validate_only: bool) -> dict:
    return {
        "resources": [
            {
                "resource_type": r.resource_type,
                "resource_name": r.name,
                "configs": [{"name": op.name, "op": op.op, "value": op.value} for op in ops],
            }
            for r, ops in changes.items()
        ],
        "validate_only": validate_only,
    }


def parse_alter_configs(
    body: Mapping[str, Any], asked: Sequence[ConfigResource]
) -> dict[ConfigResource, OperationResult]:
    out = {}
    for i, item in enumerate(_items(body, "resources", "results", "responses")):
        name, kind = item.get("resource_name"), item.get("resource_type")
        resource = ConfigResource(str(kind), str(name)) if name is not None and kind else asked[i]
        out[resource] = OperationResult(resource.name, _error(item))
    return out


# Leaders and quorum --------------------------------------------------------


def elect_leaders_request(election_type: str, partitions: Iterable[TopicPartition] | None) -> dict[str, Any]:
    if election_type not in ("preferred", "unclean"):
        raise ValueError(f'election_type must be "preferred" or "unclean", not {election_type!r}')
    if partitions is None:
        return {"election_type": election_type, "topic_partitions": None}
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {
        "election_type": election_type,
        "topic_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())],
    }


def parse_elect_leaders(body: Mapping[str, Any]) -> dict[TopicPartition, OperationResult]:
    out = {}
    for topic in _items(body, "topics", "replica_election_results", "topic_partitions", "results"):
        name = str(topic.get("topic", topic.get("name")))
        for part in topic.get("partitions") or topic.get("partition_result") or []:
            index = part.get("partition", part.get("partition_id"))
            tp = TopicPartition(name, int(index))
            out[tp] = OperationResult(str(tp), _error(part))
    return out


def _replica(item: Mapping[str, Any]) -> ReplicaState:
    return ReplicaState(
        node_id=int(item.get("node_id", -1)),
        log_end_offset=int(item.get("log_end_offset", -1)),
        lag=item.get("lag"),
        last_fetch_ms_ago=item.get("last_fetch_ms_ago"),
    )


def parse_describe_quorum(body: Mapping[str, Any]) -> QuorumInfo:
    leader = body.get("leader_id")
    return QuorumInfo(
        leader_id=leader if isinstance(leader, int) and leader >= 0 else None,
        epoch=int(body.get("epoch", -1)),
        high_watermark=int(body.get("high_watermark", -1)),
        voters=tuple(_replica(v) for v in _items(body, "voters")),
        observers=tuple(_replica(v) for v in _items(body, "observers")),
    )


# Consumer groups -----------------------------------------------------------


def coordinator_error(body: Mapping[str, Any]) -> KafkaError | None:
    """The first coordinator-level error of a one-group answer (top level, per group or per partition), if any."""
    entries: list[Mapping[str, Any]] = [body, *_items(body, "groups", "results", "transaction_states")]
    for topic in _items(body, "topics"):
        entries += [p for p in topic.get("partitions") or [] if isinstance(p, Mapping)]
    for entry in entries:
        error = _error(entry)
        if error is not None and error.code in FIND_AGAIN | WAIT:
            return error
    return None


def top_level_error(body: Mapping[str, Any]) -> KafkaError | None:
    return _error(body)


def list_groups_request(states: Iterable[str] | None) -> dict[str, Any]:
    return {} if states is None else {"states_filter": list(states)}


def parse_list_groups(body: Mapping[str, Any]) -> list[ConsumerGroupListing]:
    """Consumer groups only: protocol type "consumer", or "" for groups that only hold offsets (as Kafka)."""
    out = []
    for item in _items(body, "groups"):
        protocol_type = str(item.get("protocol_type") or "")
        if protocol_type not in (PROTOCOL_TYPE, ""):
            continue
        out.append(ConsumerGroupListing(str(item.get("group_id")), str(item.get("group_state") or ""), protocol_type))
    return out


def merge_group_listings(per_broker: Iterable[Iterable[ConsumerGroupListing]]) -> tuple[ConsumerGroupListing, ...]:
    """One entry per group id, sorted (a group whose coordinator just moved may be named by two brokers)."""
    merged: dict[str, ConsumerGroupListing] = {}
    for listings in per_broker:
        for listing in listings:
            merged.setdefault(listing.group_id, listing)
    return tuple(merged[g] for g in sorted(merged))


def _member(item: Mapping[str, Any], consumer: bool) -> MemberDescription:
    raw = item.get("member_assignment") or b""
    assignment = decode_assignment(raw).partitions if consumer and isinstance(raw, bytes) else ()
    instance = item.get("group_instance_id")
    return MemberDescription(
        member_id=str(item.get("member_id") or ""),
        group_instance_id=instance if isinstance(instance, str) else None,
        client_id=str(item.get("client_id") or ""),
        host=str(item.get("client_host") or ""),
        assignment=tuple(sorted(assignment)),
    )


def parse_describe_group(
    body: Mapping[str, Any], group_id: str, coordinator: int | None = None
) -> ConsumerGroupDescription | KafkaError:
    """One group of a DescribeGroups answer; its error, or a member assignment that does not decode, as KafkaError."""
    item = next((g for g in _items(body, "groups") if g.get("group_id") == group_id), None)
    if item is None:
        return KafkaError(f"the answer does not describe group {group_id!r}", ErrorCode.CORRUPT_MESSAGE)
    error = _error(item)
    if error is not None:
        return error
    protocol_type = str(item.get("protocol_type") or "")
    if protocol_type not in (PROTOCOL_TYPE, ""):
        return KafkaError(f"group {group_id!r} is not a consumer group (protocol type {protocol_type!r})")
    try:
        members = tuple(_member(m, protocol_type == PROTOCOL_TYPE) for m in _items(item, "members"))
    except ConsumerProtocolError as exc:
        return KafkaError(f"group {group_id!r} has a member assignment that does not decode: {exc.message}", exc.code)
    return ConsumerGroupDescription(
        group_id=group_id,
        state=str(item.get("group_state") or ""),
        protocol_type=protocol_type,
        partition_assignor=str(item.get("protocol_data") or ""),
        members=members,
        coordinator=coordinator,
    )


def delete_groups_request(group_ids: Iterable[str]) -> dict[str, Any]:
    return {"groups_names": list(group_ids)}


def parse_delete_groups(body: Mapping[str, Any]) -> dict[str, OperationResult]:
    return {
        str(item.get("group_id")): OperationResult(str(item.get("group_id")), _error(item))
        for item in _items(body, "results")
    }


def parse_offset_commit_results(body: Mapping[str, Any]) -> dict[TopicPartition, OperationResult]:
    """OffsetCommit: each partition's outcome (a top-level error applies to all of them)."""
    top = _error(body)
    out = {}
    for topic in _items(body, "topics"):
        for part in topic.get("partitions") or []:
            if not isinstance(part, Mapping) or type(part.get("partition_index")) is not int:
                raise malformed("offset_commit", "partition entry")
            tp = TopicPartition(str(topic.get("name")), part["partition_index"])
            out[tp] = OperationResult(str(tp), top or _error(part))
    return out


# Finding the active controller ----------------------------------------------


class ControllerLocator:
    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        self.hint: Address | None = None

    def target(self, now_ms: int) -> Address:
        if self.hint is not None:
            return self.hint
        controller = self.metadata.cluster.controller()
        if controller is not None:
            return controller.address
        return self.metadata.candidates(now_ms)[0]

    def on_not_controller(self, error: KafkaError, tried: Address, now_ms: int) -> bool:
        """Follow the leader hint; True when there is a new address to try at once."""
        hint = parse_address(error.details.get("leader_address"))
        if hint is not None and hint != tried:
            self.hint = hint
            return True
        leader_id = error.details.get("leader_id")
        node = self.metadata.cluster.node(leader_id) if isinstance(leader_id, int) else None
        if node is not None and node.address != tried:
            self.hint = node.address
            return True
        # No usable hint (an election is running): forget the target and ask metadata again.
        self.hint = None
        self.metadata.request_update()
        self.metadata.node_failed(tried, now_ms)
        return False

    def on_unreachable(self, address: Address, now_ms: int) -> None:
        if self.hint == address:
            self.hint = None
        self.metadata.node_failed(address, now_ms)
        self.metadata.request_update()

    def on_success(self, address: Address) -> None:
        self.hint = address
        self.metadata.node_succeeded(address)


def is_not_controller(error: KafkaError) -> bool:
    return error.code == ErrorCode.NOT_CONTROLLER


def not_controller_in(answer: Mapping[str, Any]) -> KafkaError | None:
    """NOT_CONTROLLER on any result of an admin answer, as one error (else None).

    A broker answers its forwarded admin request so while the controller is being elected; Kafka's
    AdminClient then retries the whole call (handleNotControllerError), and so does ours.
    """
    for item in _items(answer, "topics", "results", "responses", "resources"):
        error = _error(item)
        if error is not None and is_not_controller(error):
            return error
    return None
