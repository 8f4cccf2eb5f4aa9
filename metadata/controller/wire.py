"""The `/controller/*` wire format: CBOR maps of docs/protocol.md <-> the request/response classes.

Sans-I/O and total: `decode_request(route, body)` either returns the request
object the QuorumController takes or raises INVALID_REQUEST naming the field
(with its path, e.g. `topics[2].num_partitions`); `encode_response(route,
response)` turns a decision's response into the answer map. Unknown fields
are ignored (a newer client may send more). The broker's side of the
lifecycle routes (registration, heartbeat) is here too, so one module owns
the contract in both directions.

Topic ids travel as their canonical UUID text ("0f1e..."); a 16-byte string
is accepted on input, as metadata records store them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    RegisterWriteRequest,
    RegisterWriteResponse,
)
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT16_MAX, INT32_MAX, INT64_MAX, INT64_MIN, check_int, check_str, field, show

# Bounds on list lengths: a request's size is already capped by the HTTP body limit; these keep
# one request's decision (and its record batch) to a size the Raft log takes in one append.
MAX_ITEMS = 10_000
MAX_NAME_LEN = 1024
MAX_ISR = 1024

RESOURCE_TYPES = {"topic": ConfigResourceType.TOPIC, "broker": ConfigResourceType.BROKER}
RESOURCE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}
ALTER_OPS = {"set": AlterConfigOpType.SET, "delete": AlterConfigOpType.DELETE}
ELECTION_TYPES = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}


def _invalid(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REQUEST)


def _at(where: str, fn: Callable[[], Any]) -> Any:
    """Run a field check; prefix its INVALID_REQUEST message with the item's path."""
    try:
        return fn()
    except KafkaError as e:
        if not where or e.code != ErrorCode.INVALID_REQUEST:
            raise
        raise _invalid(f"{where}: {e.message}") from None


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _invalid(f"{where} must be a map, got {type(value).__name__}")
    return value


def _list(body: Mapping[str, Any], name: str, where: str = "", *, nullable: bool = False, default: Any = ...) -> Any:
    kwargs: dict[str, Any] = {"nullable": nullable, "max_len": MAX_ITEMS}
    if default is not ...:
        kwargs["default"] = default
    return _at(where, lambda: field(body, name, list, **kwargs))


def _int(body: Mapping[str, Any], name: str, where: str = "", **kwargs: Any) -> int:
    return _at(where, lambda: field(body, name, int, **kwargs))


def _str(body: Mapping[str, Any], name: str, where: str = "", **kwargs: Any) -> str:
    return _at(where, lambda: field(body, name, str, max_len=MAX_NAME_LEN, **kwargs))


def _bool(body: Mapping[str, Any], name: str, where: str = "", default: bool = False) -> bool:
    return _at(where, lambda: field(body, name, bool, default=default))


def _int_list(values: Any, where: str, max_len: int = MAX_ISR) -> tuple[int, ...]:
    """A list of int32 ids or indexes (broker ids, partitions): non-negative, as Kafka's schemas."""
    if not isinstance(values, list):
        raise _invalid(f"{where} must be a list of integers, got {type(values).__name__}")
    if len(values) > max_len:
        raise _invalid(f"{where} has {len(values)} entries; at most {max_len} allowed")
    for v in values:
        check_int(v, where, 0, INT32_MAX)
    return tuple(values)


def _id(body: Mapping[str, Any], name: str, where: str = "", **kwargs: Any) -> int:
    """An int32 id or partition index (Kafka: brokerId, partitionIndex), never negative."""
    return _int(body, name, where, min_value=0, max_value=INT32_MAX, **kwargs)


def _int32(body: Mapping[str, Any], name: str, where: str = "", **kwargs: Any) -> int:
    """An int32 epoch or count; -1 is Kafka's "none" / "default"."""
    return _int(body, name, where, min_value=-1, max_value=INT32_MAX, **kwargs)


def parse_topic_id(value: Any, where: str) -> uuid.UUID:
    if isinstance(value, bytes) and len(value) == 16:
        return uuid.UUID(bytes=value)
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise _invalid(f"{where} must be a topic id (UUID text or 16 bytes), got {show(value)}")


def error_fields(error: KafkaError | None) -> dict[str, Any]:
    """`error_code` (0 on success) plus `error` and `message` for a failed item."""
    if error is None:
        return {"error_code": 0}
    out: dict[str, Any] = {"error_code": int(error.code), "error": error.code.name, "message": error.message}
    if error.details:
        out["details"] = dict(error.details)
    return out


# --- requests -------------------------------------------------------------------------------------


def _broker_registration(body: Mapping[str, Any]) -> BrokerRegistrationRequest:
    broker_id = _id(body, "broker_id")
    cluster_id = _str(body, "cluster_id")
    incarnation_id = _str(body, "incarnation_id")
    listeners = []
    for i, item in enumerate(_list(body, "listeners")):
        where = f"listeners[{i}]"
        m = _map(item, where)
        port = _int(m, "port", where, min_value=1, max_value=65535)
        listeners.append(Listener(_str(m, "name", where), _str(m, "host", where), port))
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=incarnation_id,
        listeners=tuple(listeners),
        rack=_str(body, "rack", nullable=True, default=None),
        previous_broker_epoch=_int(body, "previous_broker_epoch", min_value=-1, default=-1),
    )


def _broker_heartbeat(body: Mapping[str, Any]) -> BrokerHeartbeatRequest:
    _bool(body, "want_fence")  # checked for type; the controller fences on its own lease
    return BrokerHeartbeatRequest(
        broker_id=_id(body, "broker_id"),
        broker_epoch=_int(body, "broker_epoch"),
        current_metadata_offset=_int(body, "current_metadata_offset", min_value=-1),
        want_shutdown=_bool(body, "want_shut_down"),
        offline_replicas=_offline_replicas(body),
    )


def _offline_replicas(body: Mapping[str, Any]) -> tuple[tuple[uuid.UUID, int], ...]:
    """`offline_replicas`: [{topic_id, partition}], absent from older brokers."""
    out = []
    for i, item in enumerate(_list(body, "offline_replicas", default=[])):
        where = f"offline_replicas[{i}]"
        m = _map(item, where)
        topic_id = parse_topic_id(m.get("topic_id"), f"{where}.topic_id")
        out.append((topic_id, _int(m, "partition", where, min_value=0, max_value=INT32_MAX)))
    return tuple(out)


def _alter_partition(body: Mapping[str, Any]) -> AlterPartitionRequest:
    items: list[AlterPartitionItem] = []
    for i, topic in enumerate(_list(body, "topics")):
        where = f"topics[{i}]"
        t = _map(topic, where)
        topic_id = parse_topic_id(t.get("topic_id"), f"{where}.topic_id")
        for j, part in enumerate(_list(t, "partitions", where)):
            pwhere = f"{where}.partitions[{j}]"
            p = _map(part, pwhere)
            items.append(
                AlterPartitionItem(
                    topic_id=topic_id,
                    partition=_id(p, "partition", pwhere),
                    leader_epoch=_int32(p, "leader_epoch", pwhere),
                    new_isr=_int_list(p.get("new_isr"), f"{pwhere}.new_isr"),
                    partition_epoch=_int32(p, "partition_epoch", pwhere),
                )
            )
            if len(items) > MAX_ITEMS:
                raise _invalid(f"more than {MAX_ITEMS} partitions in one request")
    return AlterPartitionRequest(
        broker_id=_id(body, "broker_id"),
        broker_epoch=_int(body, "broker_epoch"),
        partitions=tuple(items),
    )


def _allocate_producer_ids(body: Mapping[str, Any]) -> AllocateProducerIdsRequest:
    return AllocateProducerIdsRequest(_id(body, "broker_id"), _int(body, "broker_epoch"))


MAX_REGISTER_KEY_LEN = 255


def _register_write(body: Mapping[str, Any]) -> RegisterWriteRequest:
    key = _at("", lambda: field(body, "key", str, max_len=MAX_REGISTER_KEY_LEN))
    value = _at("", lambda: field(body, "value", int, min_value=INT64_MIN, max_value=INT64_MAX))
    if "from" not in body:
        return RegisterWriteRequest(key, value)
    expected = _at("", lambda: field(body, "from", int, nullable=True, min_value=INT64_MIN, max_value=INT64_MAX))
    return RegisterWriteRequest(key, value, cas=True, expected=expected)


def register_read_key(body: Any) -> str:
    """The key of a `/controller/register_read` request (the read is the shell's: read index, image)."""
    return _at("", lambda: field(_map(body, "request body"), "key", str, max_len=MAX_REGISTER_KEY_LEN))


def _configs_map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    m = _map(value, where)
    for k, v in m.items():
        if not isinstance(k, str):
            raise _invalid(f"{where} keys must be strings, got {show(k)}")
        _config_value(v, f"{where}.{k:.{MAX_NAME_LEN}}")
    return dict(m)


def _config_value(value: Any, where: str) -> Any:
    """A config value as sent: a string, number or boolean; a number within int64 (Kafka's LONG)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int(value, where)
    if isinstance(value, str):
        return check_str(value, where)
    if not isinstance(value, float | bool):
        raise _invalid(f"{where} must be a string, number or boolean, got {show(value)}")
    return value


def _assignments(value: Any, where: str) -> tuple[tuple[int, ...], ...] | None:
    """[{partition, broker_ids}] in partition order 0..n-1; an empty list means "none given"."""
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise _invalid(f"{where} must be a list, got {type(value).__name__}")
    by_partition: dict[int, tuple[int, ...]] = {}
    for i, item in enumerate(value):
        iwhere = f"{where}[{i}]"
        m = _map(item, iwhere)
        index = _id(m, "partition", iwhere)
        if index in by_partition:
            raise _invalid(f"{iwhere}: partition {index} is assigned twice")
        by_partition[index] = _int_list(m.get("broker_ids"), f"{iwhere}.broker_ids")
    return tuple(by_partition[p] for p in sorted(by_partition))


def _create_topics(body: Mapping[str, Any]) -> CreateTopicsRequest:
    topics = []
    for i, item in enumerate(_list(body, "topics")):
        where = f"topics[{i}]"
        t = _map(item, where)
        # The name is validated by the controller (INVALID_TOPIC_EXCEPTION), only its type here.
        name = _at(where, lambda t=t: field(t, "name", str, max_len=MAX_NAME_LEN))
        topics.append(
            CreatableTopic(
                name=name,
                num_partitions=_int32(t, "num_partitions", where, default=-1),
                replication_factor=_int(t, "replication_factor", where, default=-1, min_value=-1, max_value=INT16_MAX),
                assignments=_assignments(t.get("assignments"), f"{where}.assignments"),
                configs=_configs_map(t.get("configs"), f"{where}.configs"),
            )
        )
    return CreateTopicsRequest(tuple(topics), _bool(body, "validate_only"))


def _delete_topics(body: Mapping[str, Any]) -> DeleteTopicsRequest:
    names = _list(body, "topic_names", default=[])
    for i, name in enumerate(names):
        check_str(name, f"topic_names[{i}]", MAX_NAME_LEN)
    ids = tuple(parse_topic_id(v, f"topic_ids[{i}]") for i, v in enumerate(_list(body, "topic_ids", default=[])))
    if not names and not ids:
        raise _invalid("name at least one topic in 'topic_names' (or 'topic_ids')")
    return DeleteTopicsRequest(tuple(names), ids)


def _create_partitions(body: Mapping[str, Any]) -> CreatePartitionsRequest:
    topics = []
    for i, item in enumerate(_list(body, "topics")):
        where = f"topics[{i}]"
        t = _map(item, where)
        topics.append(
            CreatePartitionsTopic(
                _str(t, "name", where),
                _int32(t, "count", where),
                _assignments(t.get("assignments"), f"{where}.assignments"),
            )
        )
    return CreatePartitionsRequest(tuple(topics), _bool(body, "validate_only"))


def _resource(m: Mapping[str, Any], where: str) -> ConfigResource:
    kind = _str(m, "resource_type", where)
    if kind not in RESOURCE_TYPES:
        raise _invalid(f'{where}.resource_type must be "topic" or "broker", got {kind!r:.40}')
    return ConfigResource(RESOURCE_TYPES[kind], _str(m, "resource_name", where))


def _describe_configs(body: Mapping[str, Any]) -> DescribeConfigsRequest:
    resources = tuple(
        _resource(_map(r, f"resources[{i}]"), f"resources[{i}]") for i, r in enumerate(_list(body, "resources"))
    )
    keys = _list(body, "configuration_keys", nullable=True, default=None)
    if keys is not None:
        for i, k in enumerate(keys):
            check_str(k, f"configuration_keys[{i}]", MAX_NAME_LEN)
        keys = tuple(keys)
    return DescribeConfigsRequest(resources, keys)


def _incremental_alter_configs(body: Mapping[str, Any]) -> IncrementalAlterConfigsRequest:
    resources = []
    for i, item in enumerate(_list(body, "resources")):
        where = f"resources[{i}]"
        m = _map(item, where)
        resource = _resource(m, where)
        ops = []
        for j, c in enumerate(_list(m, "configs", where)):
            cwhere = f"{where}.configs[{j}]"
            cm = _map(c, cwhere)
            op = _str(cm, "op", cwhere, default="set")
            if op not in ALTER_OPS:
                raise _invalid(f'{cwhere}.op must be "set" or "delete", got {op!r:.40}')
            value = cm.get("value")
            if op == "set":
                _config_value(value, f"{cwhere}.value")
            ops.append(AlterConfigOp(_str(cm, "name", cwhere), ALTER_OPS[op], value))
        resources.append(AlterConfigsResource(resource, tuple(ops)))
    return IncrementalAlterConfigsRequest(tuple(resources), _bool(body, "validate_only"))


def _elect_leaders(body: Mapping[str, Any]) -> ElectLeadersRequest:
    kind = _str(body, "election_type", default="preferred")
    if kind not in ELECTION_TYPES:
        raise _invalid(f'election_type must be "preferred" or "unclean", got {kind!r:.40}')
    topics = _list(body, "topic_partitions", nullable=True, default=None)
    partitions: tuple[tuple[str, int], ...] | None = None
    if topics is not None:
        out: list[tuple[str, int]] = []
        for i, item in enumerate(topics):
            where = f"topic_partitions[{i}]"
            m = _map(item, where)
            name = _str(m, "topic", where)
            out.extend((name, p) for p in _int_list(m.get("partitions"), f"{where}.partitions", MAX_ITEMS))
        partitions = tuple(out)
    return ElectLeadersRequest(ELECTION_TYPES[kind], partitions)


# --- responses ------------------------------------------------------------------------------------


def _topic_id_text(topic_id: uuid.UUID | None) -> str | None:
    return None if topic_id is None else str(topic_id)


def _enc_registration(r: BrokerRegistrationResponse) -> dict[str, Any]:
    return {"broker_epoch": r.broker_epoch}


def _enc_heartbeat(r: BrokerHeartbeatResponse) -> dict[str, Any]:
    return {"is_caught_up": r.is_caught_up, "is_fenced": r.is_fenced, "should_shut_down": r.should_shut_down}


def _enc_alter_partition(r: AlterPartitionResponse) -> dict[str, Any]:
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for item in r.results:
        topics.setdefault(item.topic_id, []).append(
            {
                "partition": item.partition,
                **error_fields(item.error),
                "leader_id": item.leader,
                "leader_epoch": item.leader_epoch,
                "isr": list(item.isr),
                "partition_epoch": item.partition_epoch,
            }
        )
    return {"topics": [{"topic_id": str(t), "partitions": ps} for t, ps in topics.items()]}


def _enc_producer_ids(r: AllocateProducerIdsResponse) -> dict[str, Any]:
    return {"producer_id_start": r.producer_id_start, "producer_id_len": r.producer_id_len}


def _enc_register_write(r: RegisterWriteResponse) -> dict[str, Any]:
    return {"previous": r.previous}


def _enc_create_topics(r: CreateTopicsResponse) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": t.name,
                "topic_id": _topic_id_text(t.topic_id),
                **error_fields(t.error),
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
            }
            for t in r.results
        ]
    }


def _enc_delete_topics(r: DeleteTopicsResponse) -> dict[str, Any]:
    return {
        "topics": [{"name": t.name, "topic_id": _topic_id_text(t.topic_id), **error_fields(t.error)} for t in r.results]
    }


def _enc_create_partitions(r: CreatePartitionsResponse) -> dict[str, Any]:
    return {"topics": [{"name": t.name, **error_fields(t.error)} for t in r.results]}


def _resource_fields(resource: ConfigResource) -> dict[str, Any]:
    kind = RESOURCE_NAMES.get(resource.type, str(resource.type))
    return {"resource_type": kind, "resource_name": resource.name}


def _enc_describe_configs(r: DescribeConfigsResponse) -> dict[str, Any]:
    return {
        "resources": [
            {
                **_resource_fields(res.resource),
                **error_fields(res.error),
                "configs": [
                    {
                        "name": e.name,
                        "value": e.value,
                        "source": str(e.source),
                        "is_default": e.is_default,
                        "type": e.type,
                        "doc": e.doc,
                    }
                    for e in res.entries
                ],
            }
            for res in r.results
        ]
    }


def _enc_alter_configs(r: IncrementalAlterConfigsResponse) -> dict[str, Any]:
    return {"resources": [{**_resource_fields(res.resource), **error_fields(res.error)} for res in r.results]}


def _enc_elect_leaders(r: ElectLeadersResponse) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for item in r.results:
        topics.setdefault(item.topic, []).append(
            {"partition": item.partition, **error_fields(item.error), "leader_id": item.leader}
        )
    return {"topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


# route name (the part after /controller/) -> (decode request, response type, encode response)
ROUTES: dict[str, tuple[Callable[[Mapping[str, Any]], Any], type, Callable[[Any], dict[str, Any]]]] = {
    "broker_registration": (_broker_registration, BrokerRegistrationResponse, _enc_registration),
    "broker_heartbeat": (_broker_heartbeat, BrokerHeartbeatResponse, _enc_heartbeat),
    "alter_partition": (_alter_partition, AlterPartitionResponse, _enc_alter_partition),
    "allocate_producer_ids": (_allocate_producer_ids, AllocateProducerIdsResponse, _enc_producer_ids),
    "create_topics": (_create_topics, CreateTopicsResponse, _enc_create_topics),
    "delete_topics": (_delete_topics, DeleteTopicsResponse, _enc_delete_topics),
    "create_partitions": (_create_partitions, CreatePartitionsResponse, _enc_create_partitions),
    "describe_configs": (_describe_configs, DescribeConfigsResponse, _enc_describe_configs),
    "incremental_alter_configs": (_incremental_alter_configs, IncrementalAlterConfigsResponse, _enc_alter_configs),
    "elect_leaders": (_elect_leaders, ElectLeadersResponse, _enc_elect_leaders),
    "register_write": (_register_write, RegisterWriteResponse, _enc_register_write),
}


def decode_request(route: str, body: Mapping[str, Any]) -> Any:
    """The request object for `route`, or INVALID_REQUEST naming the bad field."""
    entry = ROUTES.get(route)
    if entry is None:
        raise _invalid(f"unknown controller request {route!r}")
    return entry[0](_map(body, "request body"))


def encode_response(route: str, response: Any) -> dict[str, Any]:
    """The answer map for a decision's response; a KafkaError response is raised (a whole-request error)."""
    if isinstance(response, KafkaError):
        raise response
    _, kind, encode = ROUTES[route]
    if not isinstance(response, kind):
        raise KafkaError(f"controller answered {route} with {type(response).__name__}", ErrorCode.UNKNOWN_SERVER_ERROR)
    return encode(response)


# --- the broker's side of the lifecycle routes ------------------------------------------------------


def broker_registration_body(request: BrokerRegistrationRequest) -> dict[str, Any]:
    return {
        "broker_id": request.broker_id,
        "cluster_id": request.cluster_id,
        "incarnation_id": request.incarnation_id,
        "listeners": [{"name": x.name, "host": x.host, "port": x.port} for x in request.listeners],
        "rack": request.rack,
        "previous_broker_epoch": request.previous_broker_epoch,
    }


def broker_heartbeat_body(request: BrokerHeartbeatRequest) -> dict[str, Any]:
    body = {
        "broker_id": request.broker_id,
        "broker_epoch": request.broker_epoch,
        "current_metadata_offset": request.current_metadata_offset,
        "want_fence": False,
        "want_shut_down": request.want_shutdown,
    }
    if request.offline_replicas:  # absent means none, as from a broker that predates the field
        body["offline_replicas"] = [{"topic_id": str(t), "partition": p} for t, p in request.offline_replicas]
    return body


def _answer_field(body: Mapping[str, Any], name: str, kind: type) -> Any:
    value = body.get(name) if isinstance(body, Mapping) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise KafkaError(f"controller answer: {name} is {value!r:.40}", ErrorCode.CORRUPT_MESSAGE)
    return value


def parse_registration_answer(body: Mapping[str, Any]) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(_answer_field(body, "broker_epoch", int))


def parse_heartbeat_answer(body: Mapping[str, Any]) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(
        _answer_field(body, "is_caught_up", bool),
        _answer_field(body, "is_fenced", bool),
        _answer_field(body, "should_shut_down", bool),
    )
