"""Client configuration: Kafka's names in snake_case, Kafka's defaults, checked up front.

Each client takes keyword arguments (`Producer(servers, linger_ms=10)`); a
misspelt key, a value of the wrong type or out of range raises ConfigError
naming the key, before any connection is made. The tables below are the
single source of the defaults that docs/client.md lists.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.client.errors import ConfigError
from kraftpy.client.group.assignors import DEFAULT_ASSIGNORS, PartitionAssignor, make_assignors
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX


@dataclass(frozen=True)
class Option:
    """One config key: its default, a checker that returns the normalized value, and its meaning."""

    default: Any
    check: Callable[[str, Any], Any]
    doc: str


def _int(low: int, high: int = INT64_MAX) -> Callable[[str, Any], int]:
    def check(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"must be an integer, got {value!r}")
        if not low <= value <= high:
            bound = f"at least {low}" if high == INT64_MAX else f"between {low} and {high}"
            raise ConfigError(key, f"must be {bound}, got {value}")
        return value

    return check


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ConfigError(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value.lower()

    return check


def _optional_str(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {value!r}")
    return value


def _acks(key: str, value: Any) -> int:
    # Kafka accepts "all", "-1", "0", "1"; "all" and -1 are the same setting.
    normalized = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}.get(
        value.lower() if isinstance(value, str) else value if not isinstance(value, bool) else None
    )
    if normalized is None:
        raise ConfigError(key, f'must be "all" (-1), 0 or 1, got {value!r}')
    return normalized


def _compression(key: str, value: Any) -> CompressionType:
    if isinstance(value, CompressionType):
        return value
    if isinstance(value, str):
        try:
            return CompressionType[value.upper()]
        except KeyError:
            pass
    names = ", ".join(c.name.lower() for c in CompressionType)
    raise ConfigError(key, f"must be one of {names}, got {value!r}")


def _anything(key: str, value: Any) -> Any:
    return value


def _callable_or_name(key: str, value: Any) -> Any:
    if value is None or callable(value) or isinstance(value, str):
        return value
    raise ConfigError(key, f"must be a name (bytes, str, json, cbor) or a callable, got {value!r}")


def _optional_callable(key: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    raise ConfigError(key, f"must be a callable or None, got {value!r}")


def _assignors(key: str, value: Any) -> tuple[Any, ...]:
    items = (value,) if isinstance(value, str | PartitionAssignor) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(key, f"must be a list of assignor names or PartitionAssignor objects, got {value!r}")
    try:
        make_assignors(items)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return tuple(items)


def _interceptors(key: str, value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    items = tuple(value) if isinstance(value, list | tuple) else (value,)
    return items


_COMMON: dict[str, Option] = {
    "client_id": Option(None, _optional_str, "A name for this client in broker logs."),
    "request_timeout_ms": Option(30_000, _int(1, INT32_MAX), "How long to wait for the answer to one request."),
    "retry_backoff_ms": Option(100, _int(0, INT32_MAX), "First wait before retrying a failed request."),
    "retry_backoff_max_ms": Option(1_000, _int(0, INT32_MAX), "Cap of the exponential retry backoff."),
    "metadata_max_age_ms": Option(300_000, _int(0, INT32_MAX), "Refresh metadata at least this often."),
}

PRODUCER_OPTIONS: dict[str, Option] = {
    **_COMMON,
    "acks": Option(-1, _acks, 'Acknowledgements the leader waits for: 0, 1 or "all" (-1).'),
    "batch_size": Option(16_384, _int(0, INT32_MAX), "Upper bound of a batch's bytes per partition."),
    "linger_ms": Option(5, _int(0, INT32_MAX), "How long a batch waits for more records before it is sendable."),
    "buffer_memory": Option(33_554_432, _int(0), "Bytes of records buffered before send() blocks."),
    "max_block_ms": Option(60_000, _int(0), "How long send() waits for metadata or buffer memory."),
    "retries": Option(INT32_MAX, _int(0, INT32_MAX), "Retries of a failed batch (delivery_timeout_ms bounds them)."),
    "delivery_timeout_ms": Option(120_000, _int(0, INT32_MAX), "Bound on the time from send() to the outcome."),
    "max_in_flight_requests_per_connection": Option(
        5, _int(1, INT32_MAX), "Unanswered produce requests per broker (at most 5 with idempotence)."
    ),
    "enable_idempotence": Option(True, _bool, "Producer id + sequence numbers: no duplicates, order kept."),
    "transactional_id": Option(
        None, _optional_str, "Makes the producer transactional (init_transactions() first); implies idempotence."
    ),
    "transaction_timeout_ms": Option(
        60_000, _int(1, INT32_MAX), "The coordinator aborts a transaction left open this long."
    ),
    "compression_type": Option(CompressionType.NONE, _compression, "none, gzip, snappy, lz4 or zstd."),
    "max_request_size": Option(1_048_576, _int(1, INT32_MAX), "Largest produce request, and so largest record."),
    "key_serializer": Option(None, _callable_or_name, "bytes (default), str, json, cbor or a callable."),
    "value_serializer": Option(None, _callable_or_name, "bytes (default), str, json, cbor or a callable."),
    "partitioner": Option(None, _optional_callable, "callable(topic, key, partitions, available) -> partition."),
    "interceptors": Option((), _interceptors, "Objects with on_send(record) and on_acknowledgement(md, err)."),
}

CONSUMER_OPTIONS: dict[str, Option] = {
    **_COMMON,
    "group_id": Option(None, _optional_str, "The consumer group; needed for subscribe() and committed offsets."),
    "group_instance_id": Option(None, _optional_str, "A static member's id (KIP-345): restarts without a rebalance."),
    "session_timeout_ms": Option(45_000, _int(1, INT32_MAX), "No heartbeat for this long: the member is removed."),
    "heartbeat_interval_ms": Option(3_000, _int(1, INT32_MAX), "How often the member heartbeats to the coordinator."),
    "max_poll_interval_ms": Option(
        300_000, _int(1, INT32_MAX), "Most time between two poll()s before leaving the group; the rebalance timeout."
    ),
    "enable_auto_commit": Option(True, _bool, "Commit positions every auto_commit_interval_ms (needs group_id)."),
    "auto_commit_interval_ms": Option(5_000, _int(1, INT32_MAX), "How often positions are auto-committed."),
    "partition_assignment_strategy": Option(
        DEFAULT_ASSIGNORS, _assignors, "Assignor names (or PartitionAssignor objects), by preference."
    ),
    "exclude_internal_topics": Option(True, _bool, "A subscribed pattern never matches internal topics."),
    "fetch_min_bytes": Option(1, _int(0, INT32_MAX), "Bytes the broker waits for before answering a fetch."),
    "fetch_max_wait_ms": Option(500, _int(0, INT32_MAX), "How long the broker may hold a fetch for min bytes."),
    "fetch_max_bytes": Option(52_428_800, _int(0, INT32_MAX), "Upper bound of one fetch answer's bytes."),
    "max_partition_fetch_bytes": Option(1_048_576, _int(0, INT32_MAX), "Upper bound of bytes per partition."),
    "max_poll_records": Option(500, _int(1, INT32_MAX), "Records one poll() returns at most."),
    "auto_offset_reset": Option("latest", _choice("latest", "earliest", "none"), "Where to start without a position."),
    "isolation_level": Option(
        "read_uncommitted",
        _choice("read_uncommitted", "read_committed"),
        "read_committed: only committed transactions' records, up to the last stable offset.",
    ),
    "check_crcs": Option(True, _bool, "Verify fetched batches' CRC32C; off skips only the CRC, not structure checks."),
    "default_api_timeout_ms": Option(60_000, _int(0, INT32_MAX), "Bound of blocking calls such as position()."),
    "key_deserializer": Option(None, _callable_or_name, "bytes (default), str, json, cbor or a callable."),
    "value_deserializer": Option(None, _callable_or_name, "bytes (default), str, json, cbor or a callable."),
    "interceptors": Option((), _interceptors, "Objects with on_consume(records) -> records."),
}


ADMIN_OPTIONS: dict[str, Option] = {
    **_COMMON,
    "default_api_timeout_ms": Option(60_000, _int(0, INT32_MAX), "Bound of each admin call, retries included."),
}


def resolve(options: Mapping[str, Option], given: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Defaults overlaid with `given`, every value checked; unknown keys are an error with a suggestion."""
    out: dict[str, Any] = {}
    for key in given:
        if key not in options:
            close = difflib.get_close_matches(key, list(options), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            article = "an" if what[0] in "aeiou" else "a"
            raise ConfigError(key, f"is not {article} {what} config{hint}")
    for key, option in options.items():
        value = given.get(key, option.default)
        out[key] = option.check(key, value)
    return out


@dataclass(frozen=True)
class ProducerConfig:
    values: dict[str, Any]
    idempotence_explicit: bool

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def guarantee_message_order(self) -> bool:
        """Kafka mutes a partition while a batch is in flight when only one request may be in flight."""
        return self.values["max_in_flight_requests_per_connection"] == 1


def producer_config(given: Mapping[str, Any]) -> ProducerConfig:
    """Check a producer's settings, including Kafka's cross-key rules for idempotence and timeouts."""
    values = resolve(PRODUCER_OPTIONS, given, "producer")
    explicit = "enable_idempotence" in given
    if values["transactional_id"] is not None:
        # Kafka: a transactional id needs idempotence, so the settings it conflicts with are errors.
        if values["transactional_id"] == "":
            raise ConfigError("transactional_id", "must be a non-empty string or None")
        if explicit and not values["enable_idempotence"]:
            raise ConfigError("enable_idempotence", "cannot be False with a transactional_id")
        explicit = True
    conflicts = []
    if values["acks"] != -1:
        conflicts.append(("acks", f'must be "all" with idempotence, got {values["acks"]}'))
    if values["retries"] == 0:
        conflicts.append(("retries", "must be above 0 with idempotence"))
    if values["max_in_flight_requests_per_connection"] > 5:
        conflicts.append(("max_in_flight_requests_per_connection", "must be at most 5 with idempotence"))
    if values["enable_idempotence"] and conflicts:
        if explicit:
            key, message = conflicts[0]
            why = (
                "a transactional_id is set"
                if values["transactional_id"] is not None
                else "enable_idempotence=True was set explicitly"
            )
            raise ConfigError(key, f"{message} ({why})")
        # Kafka 3.2+: idempotence is on by default but yields silently to settings that contradict it.
        values["enable_idempotence"] = False
    floor = values["linger_ms"] + values["request_timeout_ms"]
    if values["delivery_timeout_ms"] < floor:
        raise ConfigError(
            "delivery_timeout_ms",
            f"must be at least linger_ms + request_timeout_ms = {floor}, got {values['delivery_timeout_ms']}",
        )
    if values["retry_backoff_max_ms"] < values["retry_backoff_ms"]:
        values["retry_backoff_max_ms"] = values["retry_backoff_ms"]  # Kafka takes the larger of the two
    return ProducerConfig(values, explicit)


def consumer_config(given: Mapping[str, Any]) -> dict[str, Any]:
    """Check a consumer's settings, with Kafka's cross-key rules for groups."""
    values = resolve(CONSUMER_OPTIONS, given, "consumer")
    if values["group_id"] == "":
        raise ConfigError("group_id", "must be a non-empty string, or None for a consumer without a group")
    if values["group_instance_id"] is not None:
        if values["group_instance_id"] == "":
            raise ConfigError("group_instance_id", "must be a non-empty string or None")
        if values["group_id"] is None:
            raise ConfigError("group_instance_id", "needs a group_id")
    if values["heartbeat_interval_ms"] >= values["session_timeout_ms"]:
        raise ConfigError(
            "heartbeat_interval_ms",
            f"must be lower than session_timeout_ms ({values['session_timeout_ms']}), "
            f"got {values['heartbeat_interval_ms']}",
        )
    if values["group_id"] is None:
        # Kafka: auto-commit needs a group; on by default only when there is one, an explicit True is an error.
        if given.get("enable_auto_commit") is True:
            raise ConfigError("enable_auto_commit", "needs a group_id (there is nowhere to commit without a group)")
        values["enable_auto_commit"] = False
    if values["retry_backoff_max_ms"] < values["retry_backoff_ms"]:
        values["retry_backoff_max_ms"] = values["retry_backoff_ms"]
    return values


def admin_config(given: Mapping[str, Any]) -> dict[str, Any]:
    values = resolve(ADMIN_OPTIONS, given, "admin client")
    if values["retry_backoff_max_ms"] < values["retry_backoff_ms"]:
        values["retry_backoff_max_ms"] = values["retry_backoff_ms"]
    return values


def parse_bootstrap_servers(servers: Any) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2', ['h1:p1', ...] or [(h1, p1), ...] -> [(h1, p1), ...]; ConfigError otherwise."""
    key = "bootstrap_servers"
    items: list[Any]
    if isinstance(servers, str):
        items = [s for s in (part.strip() for part in servers.split(",")) if s]
    elif isinstance(servers, list | tuple):
        items = list(servers)
    else:
        raise ConfigError(key, f"must be 'host:port[,host:port...]' or a list of them, got {servers!r}")
    out: list[tuple[str, int]] = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int):
            host, port = item
        elif isinstance(item, str):
            host, sep, port_text = item.strip().rpartition(":")
            if not sep or not host or not port_text.isdigit():
                raise ConfigError(key, f"{item!r} is not host:port")
            port = int(port_text)
        else:
            raise ConfigError(key, f"{item!r} is not host:port or a (host, port) pair")
        if not 0 < port < 65536:
            raise ConfigError(key, f"port {port} of {item!r} is out of range 1-65535")
        out.append((host.strip("[]"), port))
    if not out:
        raise ConfigError(key, "no servers given")
    return out
