"""Topic configuration: definitions, Kafka's defaults, name normalisation, validation, resolution.

Design notes: docs/metadata.md, section "metadata/configs.py".
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

LONG_MAX = INT64_MAX  # Kafka's Long.MAX_VALUE, the default of several configs


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type numbers."""

    TOPIC = 2
    BROKER = 4


class ConfigType(enum.StrEnum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"


class ConfigSource(enum.StrEnum):
    """Where a described value comes from."""

    TOPIC = "topic"  # a topic override
    BROKER = "broker"  # set on the broker resource (cluster default "" or that broker)
    DEFAULT = "default"  # Kafka's default


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None

    @property
    def kafka_name(self) -> str:
        return self.name.replace("_", ".")


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


L, INT, D, B, S, LST = (
    ConfigType.LONG,
    ConfigType.INT,
    ConfigType.DOUBLE,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("cleanup_policy", LST, "delete", "delete old segments, compact by key, or both",
              choices=("compact", "delete")),
    ConfigDef("compression_type", S, "producer", "final compression of stored batches; producer keeps theirs",
              choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigDef("delete_retention_ms", L, 86_400_000, "how long tombstones stay readable in compacted topics",
              min=0),
    ConfigDef("file_delete_delay_ms", L, 60_000, "delay before a deleted segment file is removed", min=0),
    ConfigDef("flush_messages", L, LONG_MAX, "fsync after this many messages", min=1),
    ConfigDef("flush_ms", L, LONG_MAX, "fsync when a message is older than this", min=0),
    ConfigDef("index_interval_bytes", INT, 4096, "bytes between offset-index entries", min=0),
    ConfigDef("max_compaction_lag_ms", L, LONG_MAX, "a message stays uncompacted at most this long", min=1),
    ConfigDef("max_message_bytes", INT, 1_048_588, "largest record batch accepted", min=0),
    ConfigDef("message_timestamp_after_max_ms", L, LONG_MAX,
              "largest allowed distance of a CreateTime timestamp after the broker's clock", min=0),
    ConfigDef("message_timestamp_before_max_ms", L, LONG_MAX,
              "largest allowed distance of a CreateTime timestamp before the broker's clock", min=0),
    ConfigDef("message_timestamp_type", S, "CreateTime", "which timestamp batches keep",
              choices=("CreateTime", "LogAppendTime")),
    ConfigDef("min_cleanable_dirty_ratio", D, 0.5, "dirty share of the log that triggers compaction",
              min=0.0, max=1.0),
    ConfigDef("min_compaction_lag_ms", L, 0, "a message stays uncompacted at least this long", min=0),
    ConfigDef("min_insync_replicas", INT, 1, "in-sync replicas needed for an acks=all produce", min=1),
    ConfigDef("preallocate", B, False, "preallocate segment files"),
    ConfigDef("retention_bytes", L, -1, "per-partition size above which old segments go; -1 = no limit",
              min=-1),
    ConfigDef("retention_ms", L, 604_800_000, "age after which segments go; -1 = no limit", min=-1),
    ConfigDef("segment_bytes", INT, 1_073_741_824, "segment size at which a new segment starts", min=14),
    ConfigDef("segment_index_bytes", INT, 10_485_760, "size of a segment's offset index", min=4),
    ConfigDef("segment_jitter_ms", L, 0, "random jitter subtracted from segment_ms", min=0),
    ConfigDef("segment_ms", L, 604_800_000, "age at which a new segment starts", min=1),
    ConfigDef("unclean_leader_election_enable", B, False,
              "elect an out-of-ISR replica when no ISR member is alive (may lose data)"),
)  # fmt: skip

TOPIC_CONFIG_DEFAULTS: dict[str, Any] = {d.name: d.default for d in TOPIC_CONFIGS.values()}

_INTEGER = re.compile(r"[+-]?[0-9]+")
_TYPE_BOUNDS = {ConfigType.INT: (INT32_MIN, INT32_MAX), ConfigType.LONG: (INT64_MIN, INT64_MAX)}


def invalid_config(name: str, value: Any, reason: str) -> KafkaError:
    return KafkaError(
        f"Invalid value {value!r} for configuration {name}: {reason}", ErrorCode.INVALID_CONFIG, config=name
    )


def normalize_name(key: Any, resource: ConfigResourceType = ConfigResourceType.TOPIC) -> str:
    """`retention.ms` or `retention_ms` -> `retention_ms`; unknown names are INVALID_CONFIG."""
    if not isinstance(key, str) or not key:
        raise KafkaError(f"Config names are non-empty strings, got {key!r}", ErrorCode.INVALID_CONFIG)
    name = key.replace(".", "_")
    if name not in TOPIC_CONFIGS:
        what = "topic" if resource == ConfigResourceType.TOPIC else "broker"
        raise KafkaError(f"Unknown {what} config name: {key}", ErrorCode.INVALID_CONFIG, config=key)
    return name


def _parse_int(d: ConfigDef, value: Any) -> int:
    if isinstance(value, bool):
        raise invalid_config(d.name, value, f"Expected value to be a {d.type} number, but it was a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text):
            return int(text)
    raise invalid_config(d.name, value, f"Expected value to be a {d.type} number")


def _parse_double(d: ConfigDef, value: Any) -> float:
    if isinstance(value, bool):
        raise invalid_config(d.name, value, "Expected value to be a double, but it was a boolean")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise invalid_config(d.name, value, "Expected value to be a double") from None
    if not math.isfinite(number):
        raise invalid_config(d.name, value, "Expected a finite number")
    return number


def _parse_bool(d: ConfigDef, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise invalid_config(d.name, value, "Expected value to be either true or false")


def _parse_string(d: ConfigDef, value: Any) -> str:
    if not isinstance(value, str):
        raise invalid_config(d.name, value, "Expected value to be a string")
    text = value.strip()
    if d.choices is not None and text not in d.choices:
        raise invalid_config(d.name, value, f"String must be one of: {', '.join(d.choices)}")
    return text


def _parse_list(d: ConfigDef, value: Any) -> str:
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value]
    else:
        raise invalid_config(d.name, value, "Expected a comma-separated list of strings")
    items = [item for item in items if item]
    if not items:
        raise invalid_config(d.name, value, "Expected at least one item")
    bad = [item for item in items if d.choices is not None and item not in d.choices]
    if bad:
        raise invalid_config(d.name, value, f"Invalid value(s) {', '.join(bad)}; allowed: {', '.join(d.choices or ())}")
    return ",".join(sorted(set(items)))


_PARSERS: dict[ConfigType, Callable[[ConfigDef, Any], Any]] = {
    ConfigType.INT: _parse_int,
    ConfigType.LONG: _parse_int,
    ConfigType.DOUBLE: _parse_double,
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.STRING: _parse_string,
    ConfigType.LIST: _parse_list,
}


def validate_value(name: str, value: Any) -> Any:
    """Parse, type-check and range-check `value` for the (normalised) config `name`."""
    d = TOPIC_CONFIGS[name]
    if value is None:
        raise invalid_config(name, value, "A value is required (use a delete operation to remove an override)")
    parsed = _PARSERS[d.type](d, value)
    bounds = _TYPE_BOUNDS.get(d.type)
    if bounds is not None and not bounds[0] <= parsed <= bounds[1]:
        raise invalid_config(name, value, f"Value is out of range for a {d.type}")
    if d.min is not None and parsed < d.min:
        raise invalid_config(name, value, f"Value must be at least {d.min}")
    if d.max is not None and parsed > d.max:
        raise invalid_config(name, value, f"Value must be no more than {d.max}")
    return parsed


def validate_configs(
    configs: Mapping[str, Any], resource: ConfigResourceType = ConfigResourceType.TOPIC
) -> dict[str, Any]:
    """A whole set of settings (CreateTopics): names normalised, values validated, no name twice."""
    out: dict[str, Any] = {}
    for key, value in configs.items():
        name = normalize_name(key, resource)
        if name in out:
            raise KafkaError(f"Config {name} is given twice (as {key!r} too)", ErrorCode.INVALID_CONFIG, config=name)
        out[name] = validate_value(name, value)
    check_consistency(out, out)
    return out


def check_consistency(effective: Mapping[str, Any], changed: Mapping[str, Any]) -> None:
    """Cross-config rules (Kafka's LogConfig.validateValues) over the effective values."""
    lo = effective.get("min_compaction_lag_ms", TOPIC_CONFIG_DEFAULTS["min_compaction_lag_ms"])
    hi = effective.get("max_compaction_lag_ms", TOPIC_CONFIG_DEFAULTS["max_compaction_lag_ms"])
    if lo > hi:
        name = "min_compaction_lag_ms" if "min_compaction_lag_ms" in changed else "max_compaction_lag_ms"
        reason = f"min_compaction_lag_ms ({lo}) must not exceed max_compaction_lag_ms ({hi})"
        raise invalid_config(name, effective.get(name), reason)


def resolve(
    name: str, topic_overrides: Mapping[str, Any] | None, broker_defaults: Mapping[str, Any] | None
) -> tuple[Any, ConfigSource]:
    """The effective value of a topic config and where it comes from."""
    if topic_overrides is not None and name in topic_overrides:
        return topic_overrides[name], ConfigSource.TOPIC
    if broker_defaults is not None and name in broker_defaults:
        return broker_defaults[name], ConfigSource.BROKER
    return TOPIC_CONFIGS[name].default, ConfigSource.DEFAULT


def effective(topic_overrides: Mapping[str, Any] | None, broker_defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every topic config's effective value (topic override > broker default > Kafka default)."""
    out = dict(TOPIC_CONFIG_DEFAULTS)
    if broker_defaults:
        out.update(broker_defaults)
    if topic_overrides:
        out.update(topic_overrides)
    return out
