"""`kraftpy cluster start|status|stop`: a local cluster of combined nodes as background processes.

Health is a pure function of what the nodes answer on /admin/status: the
quorum has one leader that every live controller agrees on, and every broker
is registered and unfenced.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftpy.node import meta_properties
from kraftpy.node.config import Voter, build_config
from kraftpy.node.process import STATUS_PATH
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.credential_files import create_cluster_secrets
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry, signal_node
from kraftpy.tools.options import default_cluster_dir
from kraftpy.tools.tables import narrow_table

# Timeouts for a local cluster on loopback, faster than KRaft's defaults so that
# failover is quick; docs/operations.md explains the choice and its margins.
LOCAL_CLUSTER_SETTINGS: dict[str, Any] = {
    "controller_quorum_election_timeout_ms": 300,
    "controller_quorum_fetch_timeout_ms": 600,
    "controller_quorum_election_backoff_max_ms": 300,
    "controller_quorum_request_timeout_ms": 1000,
    "broker_session_timeout_ms": 1800,
    "broker_heartbeat_interval_ms": 300,
    "group_initial_rebalance_delay_ms": 0,
}

err_console = Console(stderr=True)


@dataclass(frozen=True)
class NodeHealth:
    node_id: int
    pid: int | None
    alive: bool
    roles: tuple[str, ...]
    address: str
    fenced: bool | None
    leader_id: int | None
    epoch: int | None
    answered: bool
    # The broker's Kafka listeners (NAME://host:port): as it reports them, else as cluster.json has them.
    kafka_listeners: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterHealth:
    healthy: bool
    cluster_id: str
    leader_id: int | None
    epoch: int
    nodes: tuple[NodeHealth, ...]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "cluster_id": self.cluster_id,
            "controller": {"leader_id": self.leader_id, "epoch": self.epoch},
            "nodes": [
                {
                    "node_id": n.node_id,
                    "pid": n.pid,
                    "alive": n.alive,
                    "roles": list(n.roles),
                    "address": n.address,
                    "kafka_listeners": list(n.kafka_listeners),
                    "fenced": n.fenced,
                }
                for n in self.nodes
            ],
        }


def _kafka_listeners(entry: NodeEntry, broker_status: dict[str, Any]) -> tuple[str, ...]:
    reported = (broker_status.get("kafka") or {}).get("listeners")
    if reported:
        return tuple(str(x) for x in reported)
    return (f"PLAINTEXT://{entry.kafka_address}",) if "broker" in entry.roles and entry.kafka_address else ()


def evaluate_health(
    layout: ClusterLayout, pids: dict[int, int | None], statuses: dict[int, dict[str, Any] | None]
) -> ClusterHealth:
    """Decide health from each node's pid and /admin/status answer (None = no answer)."""
    problems: list[str] = []
    nodes: list[NodeHealth] = []
    leaders: dict[int, tuple[int | None, int]] = {}
    fenced_view: dict[int, bool] = {}
    for status in statuses.values():  # the active controller's view of fencing is authoritative
        controller = (status or {}).get("controller") or {}
        if controller.get("active"):
            fenced_view = {int(k): bool(v) for k, v in (controller.get("fenced_brokers") or {}).items()}
    for entry in layout.nodes:
        status = statuses.get(entry.node_id)
        raft = (status or {}).get("raft") or {}
        broker = (status or {}).get("broker") or {}
        pid = pids.get(entry.node_id)
        if status is not None and status.get("cluster_id") != layout.cluster_id:
            problems.append(f"node {entry.node_id} answers for cluster {status.get('cluster_id')}")
            status = None
        leader_id = raft.get("leader_id")
        epoch = raft.get("epoch")
        if status is not None and "controller" in entry.roles:
            leaders[entry.node_id] = (leader_id, int(epoch or 0))
        fenced = fenced_view.get(entry.node_id, broker.get("fenced")) if "broker" in entry.roles else None
        nodes.append(
            NodeHealth(
                entry.node_id,
                pid,
                pid is not None,
                entry.roles,
                entry.address,
                fenced,
                leader_id,
                epoch,
                status is not None,
                _kafka_listeners(entry, broker),
            )
        )
        if pid is None:
            problems.append(f"node {entry.node_id} is not running")
        elif status is None:
            problems.append(f"node {entry.node_id} does not answer on {entry.address}")
        elif "broker" in entry.roles and fenced is not False:
            problems.append(f"broker {entry.node_id} is {'fenced' if fenced else 'not registered'}")
    # A leader that does not answer is no leader: live followers keep naming it until they time out.
    answering = {n.node_id for n in nodes if n.answered}
    gone = {lid for lid, _ in leaders.values() if lid is not None and lid not in answering}
    for lid in sorted(gone):
        problems.append(f"node {lid}, named quorum leader by its followers, is unreachable")
    leaders = {n: (None if lid in gone else lid, e) for n, (lid, e) in leaders.items()}
    known = {lid for lid, _ in leaders.values() if lid is not None}
    epoch = max((e for _, e in leaders.values()), default=0)
    leader_id = None
    if gone and not known:
        pass  # said above
    elif len(known) == 1:
        leader_id = next(iter(known))
        disagreeing = [n for n, (lid, _) in leaders.items() if lid != leader_id]
        if disagreeing:
            problems.append(f"controllers {disagreeing} do not know leader {leader_id} yet")
    elif not known:
        problems.append("the controller quorum has no leader")
    else:
        problems.append(f"controllers disagree on the leader: {sorted(known)}")
        leader_id = max(leaders.values(), key=lambda le: le[1])[0]
    return ClusterHealth(not problems, layout.cluster_id, leader_id, epoch, tuple(nodes), tuple(problems))


async def fetch_statuses(layout: ClusterLayout, timeout_ms: int = 1000) -> dict[int, dict[str, Any] | None]:
    client = RpcClient(request_timeout_ms=timeout_ms)

    async def one(entry: NodeEntry) -> tuple[int, dict[str, Any] | None]:
        try:
            return entry.node_id, await client.call((entry.host, entry.port), STATUS_PATH, {})
        except KafkaError:
            return entry.node_id, None

    try:
        return dict(await asyncio.gather(*(one(n) for n in layout.nodes)))
    finally:
        await client.close()


def check_health(layout: ClusterLayout) -> ClusterHealth:
    pids = {n.node_id: layout.read_pid(n) for n in layout.nodes}
    return evaluate_health(layout, pids, asyncio.run(fetch_statuses(layout)))


COMBINED_ROLES = ("broker", "controller")


def new_layout(
    directory: Path, nodes: int, host: str, base_port: int, kafka_base_port: int = 0, netns: str = ""
) -> ClusterLayout:
    """`host` is one address for every node, or a comma-separated list with one per node (127.0.0.2,127.0.0.3,...);
    `netns` is empty or one network namespace per node, comma-separated."""
    hosts = [h.strip() for h in host.split(",")]
    if len(hosts) == 1:
        hosts *= nodes
    if len(hosts) != nodes or not all(hosts):
        raise click.BadParameter(f"give one address, or one per node ({nodes}); got {host!r}", param_hint="--host")
    namespaces = [n.strip() for n in netns.split(",")] if netns else [""] * nodes
    if netns and (len(namespaces) != nodes or not all(namespaces)):
        raise click.BadParameter(f"give one namespace per node ({nodes}); got {netns!r}", param_hint="--netns")
    entries = tuple(
        NodeEntry(
            i,
            hosts[i - 1],
            base_port + i - 1,
            COMBINED_ROLES,
            kafka_base_port + i - 1 if kafka_base_port else 0,
            namespaces[i - 1],
        )
        for i in range(1, nodes + 1)
    )
    addresses = [(n.host, n.port) for n in entries] + [(n.host, n.kafka_port) for n in entries if n.kafka_port]
    if len(set(addresses)) != len(addresses):
        # Overlapping runs (--base-port 9092 --kafka-base-port 9093) would make a node fail to bind later.
        raise click.BadParameter(
            f"the RPC ports {base_port}.. and the Kafka ports {kafka_base_port}.. of {nodes} nodes overlap",
            param_hint="--base-port/--kafka-base-port",
        )
    return ClusterLayout(directory.resolve(), meta_properties.random_cluster_id(), entries)


def write_node_files(layout: ClusterLayout, node_settings: Mapping[int, Mapping[str, Any]] | None = None) -> None:
    """Each node's config and formatted data directory; `node_settings` adds settings per node id."""
    voters = ",".join(str(Voter(n.node_id, n.host, n.port)) for n in layout.nodes if "controller" in n.roles)
    create_cluster_secrets(layout.secrets_dir)
    for entry in layout.nodes:
        config = build_config(
            {
                "node_id": entry.node_id,
                "process_roles": ",".join(entry.roles),
                "host": entry.host,
                "port": entry.port,
                **({"listeners": f"PLAINTEXT://{entry.kafka_address}"} if entry.kafka_port else {}),
                "controller_quorum_voters": voters,
                "data_dir": str(layout.data_dir(entry)),
                "default_replication_factor": min(3, len(layout.nodes)),
                "offsets_topic_replication_factor": min(3, len(layout.nodes)),
                "secrets_dir": str(layout.secrets_dir),
                **LOCAL_CLUSTER_SETTINGS,
                **(node_settings or {}).get(entry.node_id, {}),
            }
        )
        layout.node_dir(entry).mkdir(parents=True, exist_ok=True)
        layout.config_path(entry).write_text(config.to_toml())
        meta_properties.write(
            layout.data_dir(entry),
            meta_properties.MetaProperties(layout.cluster_id, entry.node_id),
            ignore_formatted=True,
        )


def ensure_secrets(layout: ClusterLayout) -> None:
    """A cluster made before nodes authenticated gets its credentials and `secrets_dir` at its next start."""
    create_cluster_secrets(layout.secrets_dir)
    for entry in layout.nodes:
        path = layout.config_path(entry)
        text = path.read_text()
        if not any(line.startswith("secrets_dir") for line in text.splitlines()):
            path.write_text(text.rstrip("\n") + f"\nsecrets_dir = {json.dumps(str(layout.secrets_dir))}\n")


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def spawn_node(layout: ClusterLayout, entry: NodeEntry) -> int:
    # `ip netns exec` execs the server in place, so the pid is the server's (and its command line names the config).
    in_netns = ["ip", "netns", "exec", entry.netns] if entry.netns else []
    with open(layout.log_path(entry), "ab") as log_file:
        proc = subprocess.Popen(
            [
                *in_netns,
                sys.executable,
                "-m",
                "kraftpy.tools.cli",
                "server",
                "--config",
                str(layout.config_path(entry)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the terminal; `cluster stop` ends it by pid
            cwd=layout.node_dir(entry),
        )
    layout.pid_path(entry).write_text(f"{proc.pid}\n")
    return proc.pid


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def wait_until_healthy(layout: ClusterLayout, timeout_s: float, started: dict[int, int]) -> ClusterHealth:
    """Poll health with a progress line; fail fast with the log tail when a node process dies."""
    deadline = time.monotonic() + timeout_s
    health = check_health(layout)
    with err_console.status("waiting for the cluster to become healthy") as progress:
        while not health.healthy:
            for entry in layout.nodes:
                pid = started.get(entry.node_id)
                if pid is not None and layout.read_pid(entry) is None:
                    raise click.ClickException(
                        f"node {entry.node_id} (pid {pid}) exited during start; the end of "
                        f"{layout.log_path(entry)}:\n{log_tail(layout.log_path(entry))}"
                    )
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"cluster not healthy after {timeout_s:.0f} s: " + "; ".join(health.problems)
                )
            progress.update(f"waiting for the cluster to become healthy: {'; '.join(health.problems)}")
            time.sleep(0.2)
            health = check_health(layout)
    return health


@click.group("cluster")
def cluster() -> None:
    """Start, inspect and stop a local cluster."""


@cluster.command("start")
@click.option("--nodes", "node_count", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--dir", "cluster_dir", type=click.Path(file_okay=False, path_type=Path), default=default_cluster_dir)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address the nodes listen on; a comma list gives one per node.",
)
@click.option(
    "--kafka-base-port",
    type=click.IntRange(1, 65535 - 9),
    default=9092,
    show_default=True,
    envvar="KRAFTPY_KAFKA_BASE_PORT",
    help="First node's Kafka listener (PLAINTEXT); the next nodes take the next ports.",
)
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535 - 9),
    default=19092,
    show_default=True,
    help="First node's RPC port (Raft, replication, kraftpy's own client).",
)
@click.option("--timeout-ms", type=click.IntRange(1_000, 600_000), default=60_000, show_default=True)
@click.option("--timeout-s", type=click.FloatRange(1, 600), hidden=True, help="Deprecated: --timeout-ms.")
@click.option(
    "--netns",
    default="",
    help="One network namespace per node, comma-separated (fault runs: docs/jepsen.md); run this command "
    "inside a namespace that reaches the nodes' --host addresses.",
)
def start(
    node_count: int,
    cluster_dir: Path,
    host: str,
    kafka_base_port: int,
    base_port: int,
    timeout_ms: int,
    timeout_s: float | None,
    netns: str,
) -> None:
    """Format and start N combined nodes, wait until healthy, print the bootstrap servers."""
    timeout_s = timeout_ms / 1000 if timeout_s is None else timeout_s
    try:
        layout = ClusterLayout.load(cluster_dir)
        created = False
    except KafkaError:
        if (cluster_dir / "cluster.json").exists():
            raise
        layout = new_layout(cluster_dir, node_count, host, base_port, kafka_base_port, netns)
        created = True
    if not created and len(layout.nodes) != node_count and node_count != 3:
        err_console.print(f"[yellow]{cluster_dir} holds a {len(layout.nodes)}-node cluster; --nodes ignored[/]")
    started: dict[int, int] = {}
    to_start = [n for n in layout.nodes if layout.read_pid(n) is None]
    # A node in a namespace of its own binds an address only that namespace has: nothing here can take it.
    local = [n for n in to_start if not n.netns]
    busy = [n.address for n in local if port_in_use(n.host, n.port)]
    busy += [n.kafka_address for n in local if n.kafka_port and port_in_use(n.host, n.kafka_port)]
    if busy:
        raise click.ClickException(
            f"address(es) in use: {', '.join(busy)}; choose another --kafka-base-port, --base-port or --host"
        )
    if created:
        write_node_files(layout)
        layout.save()
    else:
        ensure_secrets(layout)
    for entry in to_start:
        started[entry.node_id] = spawn_node(layout, entry)
    running = len(layout.nodes) - len(to_start)
    err_console.print(
        f"{'Created' if created else 'Using'} cluster {layout.cluster_id} in {layout.dir}: "
        f"started {len(started)} node(s), {running} already running"
    )
    wait_until_healthy(layout, timeout_s, started)
    click.echo(f"Cluster {layout.cluster_id} is healthy.")
    if layout.kafka_bootstrap_servers:
        click.echo(f"Bootstrap servers: {layout.kafka_bootstrap_servers}")
    click.echo(f"kraftpy RPC: {layout.bootstrap_servers}")
    dir_flag = "" if cluster_dir == default_cluster_dir() else f" --dir {cluster_dir}"
    click.echo("Try next:")
    click.echo(f"  kraftpy topics create demo --partitions 6 --replication-factor 3{dir_flag}")
    click.echo(f"  kraftpy topics describe demo{dir_flag}")
    click.echo(f"  kraftpy cluster status{dir_flag}")
    click.echo(f"  kraftpy cluster stop{dir_flag}")


def node_state(n: NodeHealth) -> str:
    """up (answers), unreachable (its process runs but does not answer), down (no process)."""
    if not n.alive:
        return "[red]down[/]"
    return "up" if n.answered else "[red]unreachable[/]"


def rpc_cell(rpc_address: str, kafka_addresses: list[str]) -> str:
    """The RPC address, as its port alone when the Kafka column already shows its host (80 columns)."""
    host, _, port = rpc_address.rpartition(":")
    if kafka_addresses and all(a.rpartition(":")[0] == host for a in kafka_addresses):
        return port
    return rpc_address


def render_health(health: ClusterHealth) -> Table:
    table = narrow_table(
        "node", "pid", "state", "roles", "kafka", "rpc", "leader", "epoch", "fenced",
        title=f"cluster {health.cluster_id}: {'healthy' if health.healthy else 'UNHEALTHY'}",
    )  # fmt: skip
    answering = {n.node_id for n in health.nodes if n.answered}
    for n in health.nodes:
        kafka = [x.split("://", 1)[-1] for x in n.kafka_listeners]
        # A follower still naming a leader that does not answer has none (the problems say which).
        leader = "-" if n.leader_id is None else str(n.leader_id) if n.leader_id in answering else "[red]none[/]"
        table.add_row(
            str(n.node_id),
            str(n.pid or "-"),
            node_state(n),
            "combined" if set(n.roles) == {"broker", "controller"} else ",".join(n.roles),
            ",".join(kafka) or "-",
            rpc_cell(n.address, kafka),
            leader,
            "-" if n.epoch is None else str(n.epoch),
            "-" if n.fenced is None else ("[red]yes[/]" if n.fenced else "no"),
        )
    return table


@cluster.command("status")
@click.option("--dir", "cluster_dir", type=click.Path(file_okay=False, path_type=Path), default=default_cluster_dir)
@click.option("--json", "as_json", is_flag=True, help="One JSON object for scripts.")
@click.option("--watch", is_flag=True, help="Refresh every second until interrupted.")
@click.option("--exit-when-healthy", is_flag=True, help="Wait until healthy, then exit 0.")
@click.option("--timeout-ms", type=click.IntRange(100, 3_600_000), default=60_000, show_default=True)
@click.option("--timeout-s", type=click.FloatRange(0.1, 3600), hidden=True, help="Deprecated: --timeout-ms.")
def status(
    cluster_dir: Path, as_json: bool, watch: bool, exit_when_healthy: bool, timeout_ms: int, timeout_s: float | None
) -> None:
    """Show each node and the quorum; exit 1 when the cluster is unhealthy."""
    timeout_s = timeout_ms / 1000 if timeout_s is None else timeout_s
    try:
        layout = ClusterLayout.load(cluster_dir)
    except KafkaError as err:
        raise click.ClickException(str(err)) from None
    console = Console()
    deadline = time.monotonic() + timeout_s
    health = check_health(layout)
    if watch:
        from rich.live import Live

        with Live(render_health(health), console=console, refresh_per_second=2) as live:
            while time.monotonic() < deadline and not (exit_when_healthy and health.healthy):
                time.sleep(1)
                health = check_health(layout)
                live.update(render_health(health))
    elif exit_when_healthy:
        while not health.healthy and time.monotonic() < deadline:
            time.sleep(0.2)
            health = check_health(layout)
    if as_json:
        click.echo(json.dumps(health.to_json()))
    elif not watch:
        console.print(render_health(health))
        for problem in health.problems:
            err_console.print(f"[red]- {problem}[/]")
    sys.exit(0 if health.healthy else 1)


@cluster.command("stop")
@click.option("--dir", "cluster_dir", type=click.Path(file_okay=False, path_type=Path), default=default_cluster_dir)
@click.option(
    "--timeout-ms",
    type=click.IntRange(100, 600_000),
    default=20_000,
    show_default=True,
    help="Per node: how long to wait after SIGTERM before SIGKILL.",
)
@click.option("--timeout-s", type=click.FloatRange(0.1, 600), hidden=True, help="Deprecated: --timeout-ms.")
def stop(cluster_dir: Path, timeout_ms: int, timeout_s: float | None) -> None:
    """Stop every node gracefully (leaderships moved, quorum leadership resigned), SIGKILL after a timeout."""
    timeout_s = timeout_ms / 1000 if timeout_s is None else timeout_s
    try:
        layout = ClusterLayout.load(cluster_dir)
    except KafkaError as err:
        raise click.ClickException(str(err)) from None
    health = check_health(layout)
    # The active controller goes last, so each earlier node's controlled shutdown still has a controller.
    order = sorted(layout.nodes, key=lambda n: n.node_id == health.leader_id)
    for entry in order:
        pid = layout.read_pid(entry)
        if pid is None:
            err_console.print(f"node {entry.node_id}: not running")
            continue
        signal_node(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        with err_console.status(f"node {entry.node_id} (pid {pid}): stopping"):
            while layout.read_pid(entry) is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        if layout.read_pid(entry) is not None:
            signal_node(pid, signal.SIGKILL)
            err_console.print(f"[yellow]node {entry.node_id}: no exit after {timeout_s:.0f} s; killed[/]")
        else:
            err_console.print(f"node {entry.node_id}: stopped")
        layout.pid_path(entry).unlink(missing_ok=True)
    click.echo(f"Cluster {layout.cluster_id} stopped; its data stays in {layout.dir}")
