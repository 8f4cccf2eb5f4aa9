"""A local cluster on disk: DIR/cluster.json plus one folder per node (config, data, log, pid).

`cluster start` writes it; every client command reads it to find the
bootstrap servers when no --bootstrap-server is given.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kraftpy.protocol.errors import ErrorCode, KafkaError

CLUSTER_FILE = "cluster.json"
SECRETS_DIR = "secrets"


@dataclass(frozen=True)
class NodeEntry:
    node_id: int
    host: str
    port: int
    roles: tuple[str, ...]
    kafka_port: int = 0  # the Kafka listener's port; 0: none (a cluster made before issue 15)
    netns: str = ""  # the network namespace the node runs in (`ip netns exec`); "": the caller's

    @property
    def folder(self) -> str:
        return f"node-{self.node_id}"

    @property
    def address(self) -> str:
        """The node's RPC address (kraftpy's own protocol)."""
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        return f"{self.host}:{self.kafka_port}" if self.kafka_port else None


@dataclass(frozen=True)
class ClusterLayout:
    dir: Path
    cluster_id: str
    nodes: tuple[NodeEntry, ...]

    def node_dir(self, node: NodeEntry) -> Path:
        return self.dir / node.folder

    def config_path(self, node: NodeEntry) -> Path:
        return self.node_dir(node) / "node.toml"

    def data_dir(self, node: NodeEntry) -> Path:
        return self.node_dir(node) / "data"

    @property
    def secrets_dir(self) -> Path:
        """The cluster's credentials (docs/security.md): every node's secrets_dir, and the CLI's admin credential."""
        return self.dir / SECRETS_DIR

    def log_path(self, node: NodeEntry) -> Path:
        return self.node_dir(node) / "server.log"

    def pid_path(self, node: NodeEntry) -> Path:
        return self.node_dir(node) / "server.pid"

    @property
    def bootstrap_servers(self) -> str:
        """The nodes' RPC addresses (Raft, replication, the quorum's state)."""
        return ",".join(n.address for n in self.nodes if "broker" in n.roles)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka listeners: what Kafka clients and tools are given."""
        return ",".join(n.kafka_address for n in self.nodes if "broker" in n.roles and n.kafka_address)

    def save(self) -> None:
        body = {
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "nodes": [{**asdict(n), "roles": list(n.roles)} for n in self.nodes],
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (CLUSTER_FILE + ".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        os.replace(tmp, self.dir / CLUSTER_FILE)

    @classmethod
    def load(cls, directory: Path) -> ClusterLayout:
        path = directory / CLUSTER_FILE
        try:
            body = json.loads(path.read_text())
            nodes = tuple(
                NodeEntry(
                    int(n["node_id"]),
                    str(n["host"]),
                    int(n["port"]),
                    tuple(n["roles"]),
                    int(n.get("kafka_port", 0)),
                    str(n.get("netns", "")),
                )
                for n in body["nodes"]
            )
            # Absolute, as at creation: a node's pid is checked against the config path on its command line.
            return cls(directory.resolve(), str(body["cluster_id"]), nodes)
        except FileNotFoundError:
            raise KafkaError(
                f"no cluster in {directory} (no {CLUSTER_FILE}); start one with "
                f"`kraftpy cluster start --dir {directory}` or pass --bootstrap-server",
                ErrorCode.INVALID_CONFIG,
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise KafkaError(f"{path} is not a valid cluster file: {exc}", ErrorCode.INVALID_CONFIG) from None

    def read_pid(self, node: NodeEntry) -> int | None:
        """The node's pid if its process is alive and is that node's server; else None."""
        try:
            pid = int(self.pid_path(node).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if process_is_node(pid, self.config_path(node)) else None


# While a process execs (`ip netns exec` into the server; the spawned process itself right after fork)
# its /proc cmdline reads empty for a moment: well under a millisecond here, tens of milliseconds on a
# loaded machine. An empty command line is read again for this long before it counts as "not ours" (a
# kernel thread's is empty for good).
EXEC_SETTLE_S = 0.5


def process_is_node(pid: int, config_path: Path) -> bool:
    """True when `pid` is alive and its command line runs this config (guards against pid reuse)."""
    deadline = time.monotonic() + EXEC_SETTLE_S
    while True:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie is dead for our purposes
                return False
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            return False
        if cmdline or time.monotonic() >= deadline:
            return str(config_path).encode() in cmdline.split(b"\0")
        time.sleep(0.001)


def signal_node(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def bootstrap_from(cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """Where a client command connects: --bootstrap-server if given, else the Kafka listeners of --dir's cluster."""
    if bootstrap_servers:
        return bootstrap_servers
    layout = ClusterLayout.load(cluster_dir)
    return [(n.host, n.kafka_port) for n in layout.nodes if "broker" in n.roles and n.kafka_port]


def rpc_servers_from(cluster_dir: Path, servers: list[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """The nodes' RPC addresses, for what only the internal RPC answers (the quorum's state)."""
    if servers:
        return servers
    layout = ClusterLayout.load(cluster_dir)
    return [(n.host, n.port) for n in layout.nodes if "broker" in n.roles] or [(n.host, n.port) for n in layout.nodes]
