"""A real 3-node cluster driven through the CLI: health and quorum shapes, topics and configs, every error.

One cluster (`kraftpy cluster start --nodes 3`) for the module; `cluster stop`
in the fixture's finally.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient
from tests.integration.test_cluster_support import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("admin") / "cluster") as c:
        yield c


def test_cluster_status_and_quorum_status_json_shapes(cluster: LocalCluster) -> None:
    health = cluster.ok("cluster", "status", "--json").json()
    assert set(health) == {"healthy", "cluster_id", "controller", "nodes"}
    assert health["healthy"] is True and health["cluster_id"] == cluster.layout().cluster_id
    assert set(health["controller"]) == {"leader_id", "epoch"} and health["controller"]["leader_id"] in (1, 2, 3)
    assert [n["node_id"] for n in health["nodes"]] == [1, 2, 3]
    for n in health["nodes"]:
        assert set(n) == {"node_id", "pid", "alive", "roles", "address", "kafka_listeners", "fenced"}
        assert n["alive"] is True and n["fenced"] is False and isinstance(n["pid"], int)
        assert n["kafka_listeners"] == [f"PLAINTEXT://127.0.0.1:{cluster.kafka_base_port + n['node_id'] - 1}"]
        assert n["roles"] == ["broker", "controller"]
    quorum = cluster.ok("quorum", "status", "--json").json()
    assert set(quorum) == {"leader_id", "epoch", "high_watermark", "voters", "observers"}
    assert quorum["leader_id"] == health["controller"]["leader_id"] and quorum["epoch"] >= 1
    assert quorum["high_watermark"] > 0 and quorum["observers"] == []
    assert [v["node_id"] for v in quorum["voters"]] == [1, 2, 3]
    for v in quorum["voters"]:
        assert set(v) == {"node_id", "log_end_offset", "lag", "last_fetch_ms_ago"}
        assert v["log_end_offset"] > 0 and v["lag"] >= 0
    table = cluster.ok("quorum", "status").stdout
    assert "leader" in table and "log end offset" in table


def test_node_status_sections(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    for node_id in (1, 2, 3):
        status = cluster.status(node_id)
        assert status is not None
        assert status["raft"]["leader_id"] == leader
        assert status["controller"]["active"] is (node_id == leader)
        broker = status["broker"]
        assert broker["registered"] is True and broker["fenced"] is False and broker["broker_epoch"] > 0
        assert broker["metadata_offset"] >= 0
    active = cluster.status(leader)["controller"]
    assert active["fenced_brokers"] == {1: False, 2: False, 3: False}


def test_create_describe_alter_configure_and_delete_a_topic(cluster: LocalCluster) -> None:
    created = cluster.ok(
        "topics", "create", "orders", "--partitions", "4", "--replication-factor", "3",
        "--config", "retention.ms=60000", "--config", "cleanup_policy=compact",
    )  # fmt: skip
    assert "Created topic orders" in created.stdout
    assert "orders" in cluster.ok("topics", "list", "--json").json()["topics"]
    described = cluster.describe("orders")
    assert set(described) == {"name", "topic_id", "partitions", "configs"}
    assert described["name"] == "orders" and len(described["topic_id"]) == 36
    assert described["configs"] == {"cleanup_policy": "compact", "retention_ms": 60000}
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3]
    for p in described["partitions"]:
        assert set(p) == {"partition", "leader", "leader_epoch", "replicas", "isr", "elr", "last_known_elr"}
        assert p["elr"] == [] and p["last_known_elr"] == []  # a healthy partition has no eligible replicas
        assert sorted(p["replicas"]) == [1, 2, 3] and p["leader"] == p["replicas"][0] and p["leader_epoch"] == 0
    assert {p["leader"] for p in described["partitions"]} == {1, 2, 3}  # leaders striped over the brokers
    table = cluster.ok("topics", "describe", "orders").stdout
    assert "Topic: orders" in table and "PartitionCount: 4" in table and "ReplicationFactor: 3" in table

    assert "now has 6 partitions" in cluster.ok("topics", "alter", "orders", "--partitions", "6").stdout
    grown = cluster.describe("orders")
    assert len(grown["partitions"]) == 6 and grown["topic_id"] == described["topic_id"]

    cluster.ok("configs", "set", "--topic", "orders", "segment.ms=1000", "retention_ms=120000")
    configs = cluster.ok("configs", "describe", "--topic", "orders", "--json").json()
    values = {c["name"]: (c["value"], c["source"]) for c in configs["configs"]}
    assert values == {
        "cleanup_policy": ("compact", "topic"),
        "retention_ms": (120000, "topic"),
        "segment_ms": (1000, "topic"),
    }
    cluster.ok("configs", "delete", "--topic", "orders", "segment_ms")
    every = cluster.ok("configs", "describe", "--topic", "orders", "--all", "--json").json()["configs"]
    segment = next(c for c in every if c["name"] == "segment_ms")
    assert segment == {"name": "segment_ms", "value": 604800000, "source": "default", "is_default": True}
    cluster.ok("configs", "set", "--broker-default", "retention_ms=3600000")
    inherited = cluster.ok("configs", "describe", "--topic", "orders", "--all", "--json").json()["configs"]
    assert next(c for c in inherited if c["name"] == "retention_ms")["source"] == "topic"  # its own override wins
    broker = cluster.ok("configs", "describe", "--broker-default", "--json").json()["configs"]
    assert broker == [{"name": "retention_ms", "value": 3600000, "source": "broker", "is_default": False}]
    cluster.ok("configs", "delete", "--broker-default", "retention_ms")

    assert "Deleted topic orders" in cluster.ok("topics", "delete", "orders").stdout
    assert "orders" not in cluster.ok("topics", "list", "--json").json()["topics"]
    gone = cluster.cli("topics", "describe", "orders")
    assert gone.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr


ERRORS = [
    (("topics", "create", "dup"), "TOPIC_ALREADY_EXISTS"),
    (("topics", "create", "bad/name"), "INVALID_TOPIC_EXCEPTION"),
    (("topics", "create", "x" * 250), "INVALID_TOPIC_EXCEPTION"),
    (("topics", "create", "du.p"), None),  # setup for the collision below
    (("topics", "create", "du_p"), "INVALID_TOPIC_EXCEPTION"),
    (("topics", "create", "rf", "--replication-factor", "4"), "INVALID_REPLICATION_FACTOR"),
    (("topics", "create", "rf", "--replication-factor", "0"), "INVALID_REPLICATION_FACTOR"),
    (("topics", "create", "parts", "--partitions", "0"), "INVALID_PARTITIONS"),
    (("topics", "create", "parts", "--partitions", "10001"), "INVALID_PARTITIONS"),
    (("topics", "create", "cfg", "--config", "retention_ms=soon"), "INVALID_CONFIG"),
    (("topics", "create", "cfg", "--config", "no_such_config=1"), "INVALID_CONFIG"),
    (("topics", "create", "cfg", "--config", "min_insync_replicas=0"), "INVALID_CONFIG"),
    (("topics", "alter", "dup", "--partitions", "1"), "INVALID_PARTITIONS"),
    (("topics", "alter", "nope", "--partitions", "5"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "delete", "nope"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "describe", "nope"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("configs", "describe", "--topic", "nope"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("configs", "set", "--topic", "nope", "retention_ms=1"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("configs", "set", "--topic", "dup", "retention_ms=-5"), "INVALID_CONFIG"),
    (("configs", "delete", "--topic", "dup", "no_such_config"), "INVALID_CONFIG"),
]


def test_every_error_is_named_on_stderr_with_exit_code_1(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "dup", "--partitions", "2")
    for args, error in ERRORS:
        result = cluster.cli(*args)
        if error is None:
            assert result.code == 0, str(result)
            continue
        assert result.code == 1, str(result)
        assert result.stderr.startswith(f"Error: {error}: "), str(result)
        assert result.stdout == "", str(result)
    # --if-not-exists turns TOPIC_ALREADY_EXISTS into success
    assert cluster.ok("topics", "create", "dup", "--if-not-exists").stdout.strip() == "Topic dup already exists."
    # Nothing of the failed creations exists.
    names = cluster.ok("topics", "list", "--json").json()["topics"]
    assert not {"rf", "parts", "cfg", "bad/name", "du_p"} & set(names)


def test_usage_errors_exit_2(cluster: LocalCluster) -> None:
    for args in (
        ("topics", "alter", "dup"),  # --partitions is required
        ("topics", "create", "x", "--config", "noequals"),
        ("configs", "describe"),  # no resource
        ("configs", "describe", "--topic", "a", "--broker", "1"),
    ):
        result = cluster.cli(*args)
        assert result.code == 2, str(result)
        assert "Error" in result.stderr


def test_malformed_requests_answer_invalid_request_and_the_cluster_keeps_serving(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    entry = next(n for n in cluster.layout().nodes if n.node_id == leader)

    async def send(path: str, body: dict) -> KafkaError:
        client = RpcClient(request_timeout_ms=5000, credential=cluster.credential("node"))  # past authentication
        try:
            await client.call((entry.host, entry.port), path, body)
        except KafkaError as exc:
            return exc
        finally:
            await client.close()
        raise AssertionError(f"{path} {body} was accepted")

    bad = [
        ("/controller/create_topics", {"topics": [{"name": 7}]}, "name"),
        ("/controller/create_topics", {"topics": "all"}, "topics"),
        ("/controller/broker_heartbeat", {"broker_id": 1}, "broker_epoch"),
        ("/controller/alter_partition", {"broker_id": 1, "broker_epoch": 1, "topics": [{"topic_id": "x"}]}, "topic_id"),
        ("/controller/incremental_alter_configs", {"resources": [{"resource_type": "group"}]}, "resource_type"),
    ]
    for path, body, field in bad:
        error = asyncio.run(send(path, body))
        assert error.code == ErrorCode.INVALID_REQUEST and field in error.message, error
    assert cluster.health()["healthy"] is True
    cluster.ok("topics", "create", "after-garbage", "--partitions", "1")


def test_topics_work_with_no_flags_after_cluster_start(cluster: LocalCluster, tmp_path: Path) -> None:
    """KRAFTPY_DIR (or ./.kraftpy) names the cluster: no --dir or --bootstrap-server needed."""
    listed = cluster.ok("topics", "list")
    assert "dup" in listed.stdout.split()
    bootstrap = cluster.layout().kafka_bootstrap_servers
    explicit = cluster.ok("topics", "list", "--json", "--bootstrap-server", bootstrap, "--dir", str(tmp_path))
    assert "dup" in explicit.json()["topics"]
