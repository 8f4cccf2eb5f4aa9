"""Node configuration: TOML and flags, Kafka's dotted names, and a clear INVALID_CONFIG for every bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.producer_state import ProducerStateManager
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy
from kraftpy.metadata.records import Listener
from kraftpy.metadata.shell.controller_component import controller_config_from
from kraftpy.node import meta_properties
from kraftpy.node.config import Voter, build_config, load_config, parse_voters
from kraftpy.protocol.auth import DEFAULT_MAX_CLOCK_SKEW_MS
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc_limits import ListenerLimits
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.shell.component import raft_config_from

BASE = {"node_id": 1, "controller_quorum_voters": "1@127.0.0.1:9092,2@127.0.0.1:9093", "data_dir": "/tmp/x"}


def test_parse_voters() -> None:
    assert parse_voters("1@h:1, 2@[::1]:2") == (Voter(1, "h", 1), Voter(2, "[::1]", 2))


def test_a_node_without_settings_runs_every_component_on_its_own_defaults() -> None:
    """A default declared twice (node config and component) cannot drift: both must agree."""
    config = build_config(BASE)
    assert raft_config_from(config) == RaftConfig()
    assert controller_config_from(config, "c") == ControllerConfig(cluster_id="c")
    assert ReplicaManagerSettings.from_node_config(config) == ReplicaManagerSettings()
    assert GroupShellSettings.from_node_config(config) == GroupShellSettings()
    assert config.listener_limits() == ListenerLimits()
    assert config.metadata_snapshot_max_new_record_bytes == SnapshotPolicy().max_new_record_bytes
    assert config.auth_max_clock_skew_ms == DEFAULT_MAX_CLOCK_SKEW_MS


def test_the_broker_shell_settings_agree_with_the_replication_core() -> None:
    replica, core = ReplicaManagerSettings(), ReplicationConfig()
    for name in ("replica_lag_time_max_ms", "replica_fetch_wait_max_ms", "replica_fetch_min_bytes"):
        assert getattr(replica, name) == getattr(core, name), name
    for name in ("replica_fetch_backoff_ms", "min_insync_replicas", "producer_id_expiration_ms"):
        assert getattr(replica, name) == getattr(core, name), name
    assert replica.alter_partition_retry_ms == core.alter_partition_retry_ms
    producers = ProducerStateManager()
    assert producers.batches_to_retain == core.producer_batches_to_retain
    assert producers.producer_id_expiration_ms == core.producer_id_expiration_ms


def test_toml_round_trip(tmp_path: Path) -> None:
    config = build_config({**BASE, "rack": "r1", "broker_session_timeout_ms": 3000})
    path = tmp_path / "node.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config
    assert config.boot_id_path == Path("/proc/sys/kernel/random/boot_id")
    faulted = build_config({**BASE, "boot_id_path": str(tmp_path / "boot_id")})
    path.write_text(faulted.to_toml())
    assert load_config(path).boot_id_path == tmp_path / "boot_id"


def test_component_settings_are_node_settings(tmp_path: Path) -> None:
    """Every broker component's setting can be set in node.toml, by either spelling, and reaches the component."""
    config = build_config(
        {
            **BASE,
            "log.retention.check.interval.ms": 500,
            "log_cleaner_backoff_ms": "700",
            "offsets_load_buffer_size": 99,
        }
    )
    replica = ReplicaManagerSettings.from_node_config(config)
    assert (replica.log_retention_check_interval_ms, replica.log_cleaner_backoff_ms) == (500, 700)
    assert GroupShellSettings.from_node_config(config).offsets_load_buffer_size == 99
    path = tmp_path / "node.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config


def test_kafka_spellings_and_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'node.id = 2\ncontroller.quorum.voters = "2@127.0.0.2:9000"\nlog.dirs = "/d"\n'
        'host = "127.0.0.2"\nport = 9000\nlisteners = "PLAINTEXT://127.0.0.2:9092"\n'
        'process.roles = "controller,broker"\n'
    )
    config = load_config(path, {"log_level": "DEBUG", "rack": None})
    assert (config.node_id, config.host, config.port, config.data_dir) == (2, "127.0.0.2", 9000, Path("/d"))
    assert config.kafka_listeners() == (Listener("PLAINTEXT", "127.0.0.2", 9092),)
    assert config.is_broker and config.is_controller and config.log_level == "DEBUG"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_id": "one"}, "node_id must be an integer"),
        ({"node_id": -1}, "node_id must be >= 0"),
        ({"port": 70000}, "port must be 1-65535"),
        ({"controller_quorum_voters": "1@host"}, "is not ID@HOST:PORT"),
        ({"controller_quorum_voters": "1@h:1,1@h:2"}, "names a node twice"),
        ({"controller_quorum_voters": "2@h:1"}, "not in controller_quorum_voters"),
        ({"process_roles": "broker"}, "lacks the controller role"),
        ({"process_roles": "zookeeper"}, "process_roles must be"),
        ({"broker_session_timeout_ms": -5}, "broker_session_timeout_ms must be >= 0"),
        ({"broker_heartbeat_interval_ms": 10000}, "must be below broker_session_timeout_ms"),
        ({"auto_create_topics_enable": "yes"}, "must be true or false"),
        ({"listeners": "127.0.0.1:9092"}, "is not NAME://HOST:PORT"),
        ({"listeners": "SSL://127.0.0.1:9092"}, "only PLAINTEXT listeners"),
        ({"listeners": "PLAINTEXT://:x"}, "non-numeric port"),
        ({"listeners": "PLAINTEXT://:70000"}, "port must be 0-65535"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "names a listener twice"),
        ({"listeners": "PLAINTEXT://:0", "advertised_listeners": "PLAINTEXT://h:0"}, "need real ports"),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "cannot advertise 0.0.0.0"),
        ({"listeners": "PLAINTEXT://[::]:9092"}, "cannot advertise ::"),
        ({"listeners": "PLAINTEXT://:9092", "advertised_listeners": "PLAINTEXT://0.0.0.0:9092"}, "cannot advertise"),
        ({"port": 9000, "listeners": "PLAINTEXT://127.0.0.1:9000"}, "is the node's RPC port"),
        ({"socket_request_max_bytes": 10}, "Kafka listener settings: socket_request_max_bytes must be >= 1024"),
        (
            {"socket_request_max_bytes": 2048, "queued_max_request_bytes": 1024},
            "queued_max_request_bytes must be >= socket_request_max_bytes (2048), got 1024",
        ),
        ({"queued_max_response_bytes": 1000}, "queued_max_response_bytes must be >= 1024"),
        ({"socket_send_buffer_bytes": 0}, "socket_send_buffer_bytes must be -1 (the OS's default) or >= 1024"),
        ({"socket_receive_buffer_bytes": -2}, "socket_receive_buffer_bytes must be -1 (the OS's default) or >= 1024"),
        ({"no_such_thing": 1}, "unknown setting 'no_such_thing'"),
        ({"log_level": "LOUD"}, "log_level must be"),
        ({"log_retention_check_interval_ms": "soon"}, "log_retention_check_interval_ms must be an integer"),
        ({"replica_tick_interval_ms": 0}, "replica manager settings: replica_lag_time_max_ms and replica_tick"),
        ({"log_cleaner_enable": "maybe"}, "log_cleaner_enable must be true or false"),
        ({"boot_id_path": ""}, "boot_id_path must be a file path, got ''"),
        ({"boot_id_path": 7}, "boot_id_path must be a file path, got 7"),
        ({"boot_id_path": "a\0b"}, "boot_id_path must be a file path"),
    ],
)
def test_bad_values_are_invalid_config(change: dict, message: str) -> None:
    with pytest.raises(KafkaError) as info:
        build_config({**BASE, **change})
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert message in info.value.message


def test_missing_required_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(KafkaError, match="missing required setting 'data_dir'"):
        build_config({"node_id": 1, "controller_quorum_voters": "1@h:1"})
    bad = tmp_path / "bad.toml"
    bad.write_text("node_id = = 1")
    with pytest.raises(KafkaError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(KafkaError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_meta_properties_guard_the_data_dir(tmp_path: Path) -> None:
    with pytest.raises(KafkaError, match="not formatted"):
        meta_properties.verify(tmp_path, 1)
    meta = meta_properties.MetaProperties(meta_properties.random_cluster_id(), 1)
    assert len(meta.cluster_id) == 22
    assert meta_properties.write(tmp_path, meta)
    assert meta_properties.verify(tmp_path, 1, meta.cluster_id) == meta
    with pytest.raises(KafkaError, match="formatted for node 1, but this is node 2"):
        meta_properties.verify(tmp_path, 2)
    with pytest.raises(KafkaError, match="belongs to cluster"):
        meta_properties.verify(tmp_path, 1, "another-cluster")
    with pytest.raises(KafkaError, match="already formatted"):
        meta_properties.write(tmp_path, meta)
    assert meta_properties.write(tmp_path, meta, ignore_formatted=True) is False
    (tmp_path / "meta.properties").write_text("garbage line\n")
    with pytest.raises(KafkaError, match="expected key=value"):
        meta_properties.verify(tmp_path, 1)
