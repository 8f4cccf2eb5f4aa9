"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: Kafka's names, sources and operations <-> kraftpy's.

Pure translation. Topic configs travel under Kafka's dotted names
(`retention.ms`), broker resources under Kafka's broker synonyms
(`log.retention.ms`); values as Kafka's strings; sources as Kafka's numbers.
The controller's routes decide; legacy AlterConfigs (a full replace) and
APPEND / SUBTRACT become its SET / DELETE here. Notes: docs/kafka-listener.md,
"Admin APIs".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from kraftpy.metadata.configs import TOPIC_CONFIGS, ConfigDef, ConfigResourceType, ConfigType
from kraftpy.protocol.config_names import BROKER_SYNONYMS, kafka_value
from kraftpy.protocol.errors import ErrorCode, KafkaError

DescribeResult = DescribeConfigsResponse.DescribeConfigsResult
DescribeEntry = DescribeResult.DescribeConfigsResourceResult
Synonym = DescribeEntry.DescribeConfigsSynonym
AlterResult = AlterConfigsResponse.AlterConfigsResourceResponse
IncrementalResult = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class OpType(enum.IntEnum):
    """Kafka's IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# Kafka's DescribeConfigsResponse.ConfigType (v3+).
KAFKA_CONFIG_TYPES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
}

assert set(BROKER_SYNONYMS) == set(TOPIC_CONFIGS), "every topic config needs its broker synonym"

TOPIC = int(ConfigResourceType.TOPIC)
BROKER = int(ConfigResourceType.BROKER)
_WIRE_TYPES = {TOPIC: "topic", BROKER: "broker"}
_BY_TOPIC_NAME = {d.kafka_name: n for n, d in TOPIC_CONFIGS.items()}
_BY_BROKER_NAME = {kafka: n for n, kafka in BROKER_SYNONYMS.items()}


def kafka_name(resource_type: int, name: str) -> str:
    """The Kafka name of kraftpy config `name` (`retention_ms`) on a resource of this type."""
    return BROKER_SYNONYMS[name] if resource_type == BROKER else TOPIC_CONFIGS[name].kafka_name


def kraftpy_name(resource_type: int, key: str) -> str:
    """The kraftpy name of a Kafka config name, or INVALID_CONFIG as Kafka answers an unknown name."""
    names = _BY_BROKER_NAME if resource_type == BROKER else _BY_TOPIC_NAME
    name = names.get(key) if isinstance(key, str) else None
    if name is None:
        what = "broker" if resource_type == BROKER else "topic"
        raise KafkaError(f"Unknown {what} config name: {key}", ErrorCode.INVALID_CONFIG)
    return name


def _check_resource(resource_type: int, name: str, broker_id: int, *, describe: bool) -> None:
    """Kafka's resource checks before the controller sees the request (ConfigHelper / ControllerApis)."""
    if resource_type not in _WIRE_TYPES:
        raise KafkaError(
            f"Unsupported resource type {resource_type} (TOPIC=2 and BROKER=4 are)", ErrorCode.INVALID_REQUEST
        )
    if resource_type == BROKER and name != "":
        if not name.isdecimal():
            raise KafkaError(
                f"Invalid broker id {name!r}: a broker id, or '' for the default", ErrorCode.INVALID_REQUEST
            )
        if describe and int(name) != broker_id:
            # A broker describes only itself (or the cluster default), as Kafka's ConfigHelper.
            raise KafkaError(
                f"Unexpected broker id, expected {broker_id} or empty string, but received {name}",
                ErrorCode.INVALID_REQUEST,
            )


def error_of(item: Mapping[str, Any]) -> KafkaError | None:
    """The KafkaError a controller answer item carries (error_code / message), or None."""
    code = item.get("error_code", 0)
    if not code:
        return None
    try:
        error_code = ErrorCode(code)
    except ValueError:
        error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return KafkaError(str(item.get("message") or error_code.name), error_code)


def _key(resource_type: int, name: str) -> tuple[str, str]:
    return _WIRE_TYPES.get(resource_type, str(resource_type)), name


# --- DescribeConfigs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribePlan:
    """What to ask the controller (`body`, None when nothing) and the errors found before asking."""

    body: dict[str, Any] | None
    errors: dict[int, KafkaError] = field(default_factory=dict)  # resource index -> its error


def describe_configs_plan(request: DescribeConfigsRequest, broker_id: int) -> DescribePlan:
    errors: dict[int, KafkaError] = {}
    resources = []
    for i, r in enumerate(request.resources or []):
        try:
            _check_resource(r.resource_type, r.resource_name, broker_id, describe=True)
        except KafkaError as exc:
            errors[i] = exc
            continue
        resources.append({"resource_type": _WIRE_TYPES[r.resource_type], "resource_name": r.resource_name})
    if resources:
        # The cluster-wide broker resource too: its answer says exactly which defaults are set (for sources
        # and synonyms), fresher than this broker's image. Every config is asked for; each resource's own
        # keys are picked from the answer.
        resources.append({"resource_type": "broker", "resource_name": ""})
    body = {"resources": resources, "configuration_keys": None} if resources else None
    return DescribePlan(body, errors)


CLUSTER_DEFAULTS_BODY = {"resources": [{"resource_type": "broker", "resource_name": ""}], "configuration_keys": None}


def cluster_defaults(answer: Mapping[str, Any] | None) -> dict[str, Any]:
    """The values set on the cluster-wide broker resource, from the controller's answer to CLUSTER_DEFAULTS_BODY."""
    items = (answer or {}).get("resources", []) or []
    return _set_on(items[0] if items else None, "broker")


def _set_on(item: Mapping[str, Any] | None, wire_source: str) -> dict[str, Any]:
    """The values a describe answer item says are set on the resource itself (source `wire_source`)."""
    if item is None or item.get("error_code"):
        return {}
    return {c["name"]: c.get("value") for c in item.get("configs", []) or [] if c.get("source") == wire_source}


def _own_overrides(
    r: Any, item: Mapping[str, Any], cluster_defaults: Mapping[str, Any], image_own: Mapping[str, Any]
) -> dict[str, Any]:
    """What is set on the resource itself, from the controller's answer (the image only where it cannot tell)."""
    if r.resource_type == TOPIC:
        return _set_on(item, "topic")
    if r.resource_name == "":
        return dict(cluster_defaults)
    # A broker's "broker"-sourced value is its own or the cluster-wide one; a value other than the
    # cluster-wide one is its own; an equal one is its own when the image says so.
    return {
        name: value
        for name, value in _set_on(item, "broker").items()
        if name not in cluster_defaults or cluster_defaults[name] != value or name in image_own
    }


def _wanted(resource_type: int, keys: Sequence[str] | None) -> set[str] | None:
    """kraftpy names of the keys asked for; None = all. Unknown names are left out (Kafka's answer)."""
    if not keys:  # null or empty: every config, as Kafka
        return None
    names = _BY_BROKER_NAME if resource_type == BROKER else _BY_TOPIC_NAME
    return {names[k] for k in keys if k in names}


def _source(
    resource_type: int, name: str, wire_source: str, own: Mapping[str, Any], resource_name: str
) -> ConfigSource:
    if wire_source == "topic":
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if wire_source == "broker":
        if resource_type == BROKER and resource_name != "" and name in own:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return ConfigSource.DEFAULT_CONFIG


def _synonyms(
    resource_type: int,
    resource_name: str,
    name: str,
    own: Mapping[str, Any],
    cluster_defaults: Mapping[str, Any],
) -> list[Synonym]:
    """Every value that could apply, in Kafka's precedence order, each with its source."""
    out = []
    broker_name = BROKER_SYNONYMS[name]
    if name in own:
        source = ConfigSource.DYNAMIC_TOPIC_CONFIG if resource_type == TOPIC else ConfigSource.DYNAMIC_BROKER_CONFIG
        if not (resource_type == BROKER and resource_name == ""):
            out.append(Synonym(name=kafka_name(resource_type, name), value=kafka_value(own[name]), source=int(source)))
    if name in cluster_defaults:
        out.append(
            Synonym(
                name=broker_name,
                value=kafka_value(cluster_defaults[name]),
                source=int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            )
        )
    default = TOPIC_CONFIGS[name].default
    out.append(Synonym(name=broker_name, value=kafka_value(default), source=int(ConfigSource.DEFAULT_CONFIG)))
    return out


def _entry(
    r: Any,
    item: Mapping[str, Any],
    request: DescribeConfigsRequest,
    version: int,
    own: Mapping[str, Any],
    cluster_defaults: Mapping[str, Any],
) -> DescribeEntry | None:
    name = item.get("name")
    definition: ConfigDef | None = TOPIC_CONFIGS.get(name) if isinstance(name, str) else None
    if definition is None:
        return None
    source = _source(r.resource_type, name, str(item.get("source")), own, r.resource_name)
    if r.resource_type == BROKER and r.resource_name == "" and source == ConfigSource.DEFAULT_CONFIG:
        return None  # the default resource lists only what is set on it, as Kafka
    synonyms = (
        _synonyms(r.resource_type, r.resource_name, name, own, cluster_defaults)
        if version >= 1 and request.include_synonyms
        else []
    )
    include_doc = version >= 3 and request.include_documentation
    return DescribeEntry(
        name=kafka_name(r.resource_type, name),
        value=kafka_value(item.get("value")),
        read_only=False,
        config_source=int(source),
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=KAFKA_CONFIG_TYPES.get(definition.type, 0),
        documentation=definition.doc if include_doc else None,
    )


def describe_configs_response(
    request: DescribeConfigsRequest,
    version: int,
    plan: DescribePlan,
    answer: Mapping[str, Any] | None,
    image_overrides: Mapping[tuple[int, str], Mapping[str, Any]],
) -> DescribeConfigsResponse:
    """The response, in request order; `image_overrides` (by (type, name)) only settle an equal broker value."""
    answered = {(a.get("resource_type"), a.get("resource_name")): a for a in (answer or {}).get("resources", []) or []}
    cluster_defaults = _set_on(answered.get(("broker", "")), "broker")
    results = []
    for i, r in enumerate(request.resources or []):
        error = plan.errors.get(i)
        item = answered.get(_key(r.resource_type, r.resource_name)) if error is None else None
        if error is None and item is None:
            error = KafkaError("the controller gave no answer for this resource", ErrorCode.UNKNOWN_SERVER_ERROR)
        if error is None and item is not None:
            error = error_of(item)
        if error is not None:
            results.append(_describe_error(r, error))
            continue
        wanted = _wanted(r.resource_type, r.configuration_keys)
        image_own = image_overrides.get((r.resource_type, r.resource_name), {})
        own = _own_overrides(r, item, cluster_defaults, image_own)
        entries = []
        for config in item.get("configs", []) or []:
            if wanted is not None and config.get("name") not in wanted:
                continue
            entry = _entry(r, config, request, version, own, cluster_defaults)
            if entry is not None:
                entries.append(entry)
        results.append(
            DescribeResult(
                error_code=0,
                error_message=None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=entries,
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _describe_error(r: Any, error: KafkaError) -> DescribeResult:
    return DescribeResult(
        error_code=int(error.code),
        error_message=error.message,
        resource_type=r.resource_type,
        resource_name=r.resource_name,
        configs=[],
    )


def describe_configs_error(request: DescribeConfigsRequest, version: int, error: KafkaError) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        throttle_time_ms=0, results=[_describe_error(r, error) for r in request.resources or []]
    )


# --- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPlan:
    """The controller's IncrementalAlterConfigs body (None when nothing is left to send) and early errors."""

    body: dict[str, Any] | None
    errors: dict[int, KafkaError] = field(default_factory=dict)


def _list_items(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


def _incremental_ops(resource_type: int, configs: Sequence[Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    seen: set[str] = set()
    for c in configs:
        name = kraftpy_name(resource_type, c.name)
        if name in seen:  # Kafka: INVALID_REQUEST "Error due to duplicate config keys"
            raise KafkaError(f"Error due to duplicate config keys: {c.name}", ErrorCode.INVALID_REQUEST)
        seen.add(name)
        op = c.config_operation
        if op == OpType.SET:
            if c.value is None:
                raise KafkaError(f"Null value not supported for : {c.name}", ErrorCode.INVALID_REQUEST)
            ops.append({"name": name, "op": "set", "value": c.value})
        elif op == OpType.DELETE:
            ops.append({"name": name, "op": "delete"})
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            if TOPIC_CONFIGS[name].type != ConfigType.LIST:
                verb = "append" if op == OpType.APPEND else "subtract"
                raise KafkaError(
                    f"Config value {verb} is not allowed for config key: {c.name}", ErrorCode.INVALID_CONFIG
                )
            items = _list_items(kafka_value(current.get(name, TOPIC_CONFIGS[name].default)))
            given = _list_items(c.value)
            if op == OpType.APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            # An empty list is what SUBTRACT of everything leaves: the override goes, the default applies.
            ops.append(
                {"name": name, "op": "set", "value": ",".join(items)} if items else {"name": name, "op": "delete"}
            )
        else:
            raise KafkaError(f"Unknown config operation {op} for {c.name}", ErrorCode.INVALID_REQUEST)
    return ops


def needs_current_values(request: IncrementalAlterConfigsRequest) -> bool:
    """True when APPEND or SUBTRACT need the current values (a describe before the alter)."""
    return any(
        c.config_operation in (OpType.APPEND, OpType.SUBTRACT) for r in request.resources or [] for c in r.configs or []
    )


def current_values_body(request: IncrementalAlterConfigsRequest) -> dict[str, Any]:
    resources = [
        {"resource_type": _WIRE_TYPES[r.resource_type], "resource_name": r.resource_name}
        for r in request.resources or []
        if r.resource_type in _WIRE_TYPES
    ]
    return {"resources": resources, "configuration_keys": None}


def current_values(answer: Mapping[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """Effective values by (wire type, name) from a controller describe answer."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for a in (answer or {}).get("resources", []) or []:
        if not a.get("error_code"):
            out[(a.get("resource_type"), a.get("resource_name"))] = {
                c["name"]: c.get("value") for c in a.get("configs", []) or [] if "name" in c
            }
    return out


def _duplicates(resources: Sequence[Any]) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    twice: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


def incremental_alter_plan(
    request: IncrementalAlterConfigsRequest,
    broker_id: int,
    current: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> AlterPlan:
    """The controller body of an IncrementalAlterConfigs; `current` (effective values) serves APPEND / SUBTRACT."""
    return _alter_plan(
        request,
        broker_id,
        lambda r: _incremental_ops(
            r.resource_type, r.configs or [], (current or {}).get(_key(r.resource_type, r.resource_name), {})
        ),
    )


def _legacy_ops(resource_type: int, configs: Sequence[Any]) -> list[dict[str, Any]]:
    """Legacy AlterConfigs replaces the resource's whole set: what is not given is deleted."""
    given: dict[str, Any] = {}
    for c in configs:
        name = kraftpy_name(resource_type, c.name)
        if name in given:
            raise KafkaError(f"Error due to duplicate config keys: {c.name}", ErrorCode.INVALID_REQUEST)
        given[name] = c.value
    ops = [{"name": n, "op": "set", "value": v} for n, v in given.items() if v is not None]
    # Deleting an override that is not there writes nothing (the controller records only changes).
    ops += [{"name": n, "op": "delete"} for n in sorted(TOPIC_CONFIGS) if given.get(n) is None]
    return ops


def legacy_alter_plan(request: AlterConfigsRequest, broker_id: int) -> AlterPlan:
    return _alter_plan(request, broker_id, lambda r: _legacy_ops(r.resource_type, r.configs or []))


def _alter_plan(request: Any, broker_id: int, ops_of: Any) -> AlterPlan:
    errors: dict[int, KafkaError] = {}
    resources = []
    twice = _duplicates(request.resources or [])
    for i, r in enumerate(request.resources or []):
        try:
            if (r.resource_type, r.resource_name) in twice:
                raise KafkaError(f"Resource {r.resource_name!r} is named more than once", ErrorCode.INVALID_REQUEST)
            _check_resource(r.resource_type, r.resource_name, broker_id, describe=False)
            ops = ops_of(r)
        except KafkaError as exc:
            errors[i] = exc
            continue
        resources.append(
            {"resource_type": _WIRE_TYPES[r.resource_type], "resource_name": r.resource_name, "configs": ops}
        )
    body = {"resources": resources, "validate_only": bool(request.validate_only)} if resources else None
    return AlterPlan(body, errors)


def _alter_results(request: Any, plan: AlterPlan, answer: Mapping[str, Any] | None, cls: type) -> list[Any]:
    answered = {(a.get("resource_type"), a.get("resource_name")): a for a in (answer or {}).get("resources", []) or []}
    out = []
    for i, r in enumerate(request.resources or []):
        error = plan.errors.get(i)
        if error is None:
            item = answered.get(_key(r.resource_type, r.resource_name))
            if item is None:
                error = KafkaError("the controller gave no answer for this resource", ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                error = error_of(item)
        out.append(
            cls(
                error_code=0 if error is None else int(error.code),
                error_message=None if error is None else error.message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return out


def incremental_alter_response(
    request: IncrementalAlterConfigsRequest, plan: AlterPlan, answer: Mapping[str, Any] | None
) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(
        throttle_time_ms=0, responses=_alter_results(request, plan, answer, IncrementalResult)
    )


def legacy_alter_response(
    request: AlterConfigsRequest, plan: AlterPlan, answer: Mapping[str, Any] | None
) -> AlterConfigsResponse:
    return AlterConfigsResponse(throttle_time_ms=0, responses=_alter_results(request, plan, answer, AlterResult))


def incremental_alter_error(
    request: IncrementalAlterConfigsRequest, version: int, error: KafkaError
) -> IncrementalAlterConfigsResponse:
    plan = AlterPlan(None, {i: error for i in range(len(request.resources or []))})
    return incremental_alter_response(request, plan, None)


def legacy_alter_error(request: AlterConfigsRequest, version: int, error: KafkaError) -> AlterConfigsResponse:
    plan = AlterPlan(None, {i: error for i in range(len(request.resources or []))})
    return legacy_alter_response(request, plan, None)
