"""A node's configuration: Kafka's KRaft settings in snake_case, read from TOML, overridable by flags.

Every value is validated on load; a bad value is an INVALID_CONFIG error that
names the key, what it must be and what was given. Times carry `_ms`.

Besides its own fields, a node config takes every setting the broker's
components declare (ReplicaManagerSettings, GroupShellSettings,
GroupCoordinatorConfig, TxnShellSettings, TransactionCoordinatorConfig:
retention and cleaner intervals, fetcher limits, ...),
typed and checked by the component itself, and keeps them in `extra`; the
component reads them back with kraftpy.protocol.settings.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftpy.broker.groups import GroupCoordinatorConfig
from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.broker.txn.shell.settings import TxnShellSettings
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy
from kraftpy.metadata.records import Listener
from kraftpy.protocol.auth import DEFAULT_MAX_CLOCK_SKEW_MS
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.settings import default_of
from kraftpy.protocol.shell.rpc_limits import ListenerLimits
from kraftpy.raft.config import RaftConfig

ROLES = ("broker", "controller")


def config_error(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_CONFIG)


@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


# Security protocols a listener may name; SSL and SASL come with a later issue.
LISTENER_PROTOCOLS = ("PLAINTEXT",)


def parse_listeners(text: str, what: str = "listeners", default_host: str = "127.0.0.1") -> tuple[Listener, ...]:
    """Kafka's listeners: 'PLAINTEXT://host:port,...' (an empty host is `default_host`; port 0 asks the kernel)."""
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not colon:
            raise config_error(f"{what} entry {item!r} is not NAME://HOST:PORT")
        if name not in LISTENER_PROTOCOLS:
            raise config_error(f"{what} entry {item!r}: only PLAINTEXT listeners exist yet (SSL and SASL come later)")
        try:
            port = int(port_text)
        except ValueError:
            raise config_error(f"{what} entry {item!r} has a non-numeric port") from None
        if not 0 <= port < 65536:
            raise config_error(f"{what} entry {item!r}: port must be 0-65535")
        out.append(Listener(name, host.strip("[]") or default_host, port))
    names = [x.name for x in out]
    if len(set(names)) != len(names):
        raise config_error(f"{what} names a listener twice: {text!r}")
    return tuple(out)


def parse_voters(text: str) -> tuple[Voter, ...]:
    """Kafka's controller.quorum.voters: '1@host:port,2@host:port'."""
    voters: list[Voter] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        node_text, at, address = item.partition("@")
        host, colon, port_text = address.rpartition(":")
        if not at or not colon or not host:
            raise config_error(f"controller_quorum_voters entry {item!r} is not ID@HOST:PORT")
        try:
            node_id, port = int(node_text), int(port_text)
        except ValueError:
            raise config_error(f"controller_quorum_voters entry {item!r} has a non-numeric id or port") from None
        if node_id < 0 or not 0 < port < 65536:
            raise config_error(f"controller_quorum_voters entry {item!r}: id must be >= 0, port 1-65535")
        voters.append(Voter(node_id, host, port))
    if not voters:
        raise config_error("controller_quorum_voters is empty")
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise config_error(f"controller_quorum_voters names a node twice: {text!r}")
    return tuple(voters)


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    controller_quorum_voters: tuple[Voter, ...]
    data_dir: Path
    process_roles: tuple[str, ...] = ("broker", "controller")
    # The node's own RPC address (Raft, the controller, replication, the kraftpy client; docs/protocol.md).
    host: str = "127.0.0.1"
    port: int = 19092
    # Kafka's client listeners (docs/kafka-listener.md); empty: this broker serves no Kafka protocol.
    listeners: str = ""
    advertised_listeners: str = ""
    socket_request_max_bytes: int = default_of(KafkaListenerLimits, "socket_request_max_bytes")
    queued_max_request_bytes: int = default_of(KafkaListenerLimits, "queued_max_request_bytes")
    queued_max_response_bytes: int = default_of(KafkaListenerLimits, "queued_max_response_bytes")
    socket_send_buffer_bytes: int = default_of(KafkaListenerLimits, "socket_send_buffer_bytes")
    socket_receive_buffer_bytes: int = default_of(KafkaListenerLimits, "socket_receive_buffer_bytes")
    rack: str | None = None
    log_level: str = "INFO"
    log_file: Path | None = None
    # Raft (KRaft's names; `cluster start` passes faster local ones, see docs/operations.md). Every
    # default below is the owning component's own (default_of), declared there once.
    controller_quorum_election_timeout_ms: int = default_of(RaftConfig, "election_timeout_ms")
    controller_quorum_fetch_timeout_ms: int = default_of(RaftConfig, "fetch_timeout_ms")
    controller_quorum_election_backoff_max_ms: int = default_of(RaftConfig, "election_backoff_max_ms")
    controller_quorum_request_timeout_ms: int = default_of(RaftConfig, "request_timeout_ms")
    controller_quorum_append_linger_ms: int = default_of(RaftConfig, "append_linger_ms")
    metadata_max_idle_interval_ms: int = default_of(ControllerConfig, "metadata_max_idle_interval_ms")
    preferred_leader_election_delay_ms: int = default_of(ControllerConfig, "preferred_leader_election_delay_ms")
    metadata_snapshot_max_new_record_bytes: int = default_of(SnapshotPolicy, "max_new_record_bytes")
    # Brokers
    broker_session_timeout_ms: int = default_of(ControllerConfig, "broker_session_timeout_ms")
    broker_heartbeat_interval_ms: int = default_of(ControllerConfig, "broker_heartbeat_interval_ms")
    replica_lag_time_max_ms: int = default_of(ReplicaManagerSettings, "replica_lag_time_max_ms")
    replica_fetch_wait_max_ms: int = default_of(ReplicaManagerSettings, "replica_fetch_wait_max_ms")
    num_partitions: int = default_of(ControllerConfig, "num_partitions")
    default_replication_factor: int = default_of(ControllerConfig, "default_replication_factor")
    min_insync_replicas: int = default_of(ReplicaManagerSettings, "min_insync_replicas")
    auto_create_topics_enable: bool = True
    # Consumer groups (Kafka's group.* and offsets.* broker settings; docs/operations.md)
    offsets_topic_num_partitions: int = default_of(GroupCoordinatorConfig, "offsets_topic_num_partitions")
    offsets_topic_replication_factor: int = default_of(GroupShellSettings, "offsets_topic_replication_factor")
    offsets_topic_segment_bytes: int = default_of(GroupShellSettings, "offsets_topic_segment_bytes")
    offsets_commit_timeout_ms: int = default_of(GroupShellSettings, "offsets_commit_timeout_ms")
    offsets_retention_minutes: int = default_of(GroupCoordinatorConfig, "offsets_retention_minutes")
    offsets_retention_check_interval_ms: int = default_of(GroupCoordinatorConfig, "offsets_retention_check_interval_ms")
    offset_metadata_max_bytes: int = default_of(GroupCoordinatorConfig, "offset_metadata_max_bytes")
    group_initial_rebalance_delay_ms: int = default_of(GroupCoordinatorConfig, "group_initial_rebalance_delay_ms")
    group_min_session_timeout_ms: int = default_of(GroupCoordinatorConfig, "group_min_session_timeout_ms")
    group_max_session_timeout_ms: int = default_of(GroupCoordinatorConfig, "group_max_session_timeout_ms")
    group_max_size: int = default_of(GroupCoordinatorConfig, "group_max_size")
    # Transactions (Kafka's transaction.* broker settings; docs/operations.md)
    transaction_state_log_num_partitions: int = default_of(
        TransactionCoordinatorConfig, "transaction_state_log_num_partitions"
    )
    transaction_state_log_replication_factor: int = default_of(
        TxnShellSettings, "transaction_state_log_replication_factor"
    )
    transaction_state_log_min_isr: int = default_of(TxnShellSettings, "transaction_state_log_min_isr")
    transaction_max_timeout_ms: int = default_of(TransactionCoordinatorConfig, "transaction_max_timeout_ms")
    transactional_id_expiration_ms: int = default_of(TransactionCoordinatorConfig, "transactional_id_expiration_ms")
    # The listener's resource bounds (Kafka's max.connections, connections.max.idle.ms; docs/operations.md)
    max_connections: int = default_of(ListenerLimits, "max_connections")
    connections_max_idle_ms: int = default_of(ListenerLimits, "connections_max_idle_ms")
    rpc_stream_max_in_flight_calls: int = default_of(ListenerLimits, "stream_max_in_flight_calls")
    rpc_stream_max_queued_answer_bytes: int = default_of(ListenerLimits, "stream_max_queued_answer_bytes")
    rpc_max_body_items: int = default_of(ListenerLimits, "max_body_items")
    # Authentication (docs/security.md): the credentials this node accepts, its own `node.credential` among them
    secrets_dir: Path | None = None
    auth_max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS
    # The kernel's boot id, which tells a restart after a process death from one after a power loss
    # (broker/clean_restart.py); fault runs point it at a file of their own (docs/operations.md).
    boot_id_path: Path = Path("/proc/sys/kernel/random/boot_id")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def kafka_listeners(self) -> tuple[Listener, ...]:
        """The Kafka listeners to bind (`listeners`)."""
        return parse_listeners(self.listeners, "listeners", self.host)

    def advertised_kafka_listeners(self, bound: dict[str, int] | None = None) -> tuple[Listener, ...]:
        """What the broker registers: `advertised_listeners`, else `listeners` at their bound ports."""
        if self.advertised_listeners:
            return parse_listeners(self.advertised_listeners, "advertised_listeners", self.host)
        bound = bound or {}
        return tuple(Listener(x.name, x.host, bound.get(x.name, x.port)) for x in self.kafka_listeners())

    def kafka_listener_limits(self) -> KafkaListenerLimits:
        return KafkaListenerLimits(
            socket_request_max_bytes=self.socket_request_max_bytes,
            queued_max_request_bytes=self.queued_max_request_bytes,
            queued_max_response_bytes=self.queued_max_response_bytes,
            socket_send_buffer_bytes=self.socket_send_buffer_bytes,
            socket_receive_buffer_bytes=self.socket_receive_buffer_bytes,
            max_connections=self.max_connections,
            connections_max_idle_ms=self.connections_max_idle_ms,
            listeners_sharing_fds=1 + len(self.kafka_listeners()),
        )

    def listener_limits(self) -> ListenerLimits:
        return ListenerLimits(
            max_connections=self.max_connections,
            connections_max_idle_ms=self.connections_max_idle_ms,
            stream_max_in_flight_calls=self.rpc_stream_max_in_flight_calls,
            stream_max_queued_answer_bytes=self.rpc_stream_max_queued_answer_bytes,
            max_body_items=self.rpc_max_body_items,
            queued_max_request_bytes=self.queued_max_request_bytes,
            listeners_sharing_fds=1 + len(self.kafka_listeners()),
        )

    def voter_addresses(self) -> dict[int, tuple[str, int]]:
        return {v.node_id: (v.host, v.port) for v in self.controller_quorum_voters}

    def to_toml(self) -> str:
        """The config as a TOML file `load_config` reads back to an equal config."""
        lines = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or f.name == "extra":
                continue
            lines.append(f"{f.name} = {_toml_value(f.name, value)}")
        lines.extend(f"{name} = {_toml_value(name, value)}" for name, value in sorted(self.extra.items()))
        return "\n".join(lines) + "\n"


def _toml_value(name: str, value: Any) -> str:
    if name == "controller_quorum_voters":
        return _toml_value("", ",".join(str(v) for v in value))
    if name == "process_roles":
        return _toml_value("", ",".join(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig) if f.name != "extra"}
# The broker components' own settings, declared (with their defaults) once, in the component.
_COMPONENT_FIELDS = {
    f.name: f
    for cls in (
        ReplicaManagerSettings,
        GroupShellSettings,
        GroupCoordinatorConfig,
        TxnShellSettings,
        TransactionCoordinatorConfig,
    )
    for f in dataclasses.fields(cls)
    if f.name not in _FIELDS and f.name != "coordinator"
}
_TYPES = {"int": int, "bool": bool, "str": str}


def build_config(values: dict[str, Any]) -> NodeConfig:
    """Validate raw values (TOML and/or flags, Kafka dotted names allowed) into a NodeConfig."""
    clean: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for raw_key, value in values.items():
        key = raw_key.replace(".", "_").replace("-", "_")
        if key in ("log_dirs", "metadata_log_dir"):
            key = "data_dir"
        if key in _FIELDS:
            clean[key] = _coerce(key, value)
        elif key in _COMPONENT_FIELDS:
            extra[key] = _coerce(key, value)
        else:
            raise config_error(f"unknown setting {raw_key!r}")
    for required in ("node_id", "controller_quorum_voters", "data_dir"):
        if required not in clean:
            raise config_error(f"missing required setting {required!r}")
    config = NodeConfig(**clean, extra=extra)
    _check(config)
    return config


def _coerce(key: str, value: Any) -> Any:
    if key == "controller_quorum_voters":
        return value if isinstance(value, tuple) else parse_voters(str(value))
    if key == "process_roles":
        roles = tuple(r.strip() for r in (value.split(",") if isinstance(value, str) else value) if r.strip())
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            raise config_error(f"process_roles must be broker, controller or both; got {value!r}")
        return roles
    if key == "boot_id_path":
        if isinstance(value, Path):
            value = str(value)
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise config_error(f"boot_id_path must be a file path, got {value!r}")
        return Path(value)
    if key in ("data_dir", "log_file", "secrets_dir"):
        return Path(value)
    annotation = str((_FIELDS.get(key) or _COMPONENT_FIELDS[key]).type)
    if annotation == "int":
        if isinstance(value, bool):
            raise config_error(f"{key} must be an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise config_error(f"{key} must be an integer, got {value!r}") from None
    if annotation == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise config_error(f"{key} must be true or false, got {value!r}")
        return value
    return str(value)


def _check(c: NodeConfig) -> None:
    if c.node_id < 0:
        raise config_error(f"node_id must be >= 0, got {c.node_id}")
    if not 0 < c.port < 65536:
        raise config_error(f"port must be 1-65535, got {c.port}")
    listeners = c.kafka_listeners()
    advertised = c.advertised_kafka_listeners()
    if c.advertised_listeners and {x.name for x in advertised} != {x.name for x in listeners}:
        raise config_error("advertised_listeners must name the same listeners as listeners")
    if any(x.port == 0 for x in advertised if c.advertised_listeners):
        raise config_error("advertised_listeners need real ports (0 is for listeners only)")
    for x in advertised:
        if x.host in ("0.0.0.0", "::"):  # Kafka refuses the wildcard too: clients cannot connect to it
            raise config_error(
                f"cannot advertise {x.host} for listener {x.name}: set advertised_listeners to a routable address"
            )
    for x in listeners:
        if x.port == c.port and x.host in (c.host, "0.0.0.0", "::"):
            raise config_error(f"listener {x.name} port {x.port} is the node's RPC port (`port`): choose another")
    try:  # the Kafka listener's own rules (protocol/kafka/limits.py)
        c.kafka_listener_limits()
    except ValueError as exc:
        raise config_error(f"Kafka listener settings: {exc}") from None
    voter_ids = {v.node_id for v in c.controller_quorum_voters}
    if c.is_controller and c.node_id not in voter_ids:
        raise config_error(f"node {c.node_id} has the controller role but is not in controller_quorum_voters")
    if not c.is_controller and c.node_id in voter_ids:
        raise config_error(f"node {c.node_id} is a voter but lacks the controller role")
    if c.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise config_error(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {c.log_level!r}")
    for f in dataclasses.fields(c):
        if f.name.endswith("_ms") and getattr(c, f.name) < 0:
            raise config_error(f"{f.name} must be >= 0, got {getattr(c, f.name)}")
    if c.controller_quorum_election_timeout_ms < 10 or c.controller_quorum_fetch_timeout_ms < 10:
        raise config_error("controller_quorum_election_timeout_ms and _fetch_timeout_ms must be >= 10")
    for name in ("max_connections", "rpc_stream_max_in_flight_calls", "rpc_max_body_items"):
        if getattr(c, name) < 1:
            raise config_error(f"{name} must be >= 1, got {getattr(c, name)}")
    if c.connections_max_idle_ms < 1000:
        raise config_error(f"connections_max_idle_ms must be >= 1000, got {c.connections_max_idle_ms}")
    if c.broker_heartbeat_interval_ms >= c.broker_session_timeout_ms:
        raise config_error("broker_heartbeat_interval_ms must be below broker_session_timeout_ms")
    for component, what in (
        (GroupShellSettings, "group coordinator"),
        (TxnShellSettings, "transaction coordinator"),
        (ReplicaManagerSettings, "replica manager"),
    ):
        try:  # each component's own rules, in one place
            component.from_node_config(c)
        except ValueError as exc:
            raise config_error(f"{what} settings: {exc}") from None


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads Kafka's `log.dirs = ...` as a nested table; fold it back to `log.dirs`."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> NodeConfig:
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values.update(_flatten(tomllib.loads(Path(path).read_text())))
        except FileNotFoundError:
            raise config_error(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise config_error(f"config file {path} is not valid TOML: {exc}") from None
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return build_config(values)
