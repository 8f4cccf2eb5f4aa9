"""`kraftpy topics create|list|describe|alter|delete`: kafka-topics over the AdminClient.

Writes go to the active controller (`/controller/...`), reads come from the
brokers (DescribeTopicPartitions, with each partition's ELR), as in Kafka.
Tables for people, `--json` for scripts; a failure prints `Error: NAME:
message` on stderr and exits 1 (2 for a usage error). `create` returns
once brokers show the topic with a leader for every partition (bounded,
with a progress line), so `describe` right after it finds the topic. The
helpers at the top are shared by the `configs` and `quorum` commands.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import is_internal
from kraftpy.tools.options import client_options, servers_for
from kraftpy.tools.tables import narrow_table

T = TypeVar("T")
err_console = Console(stderr=True)
DEFAULT_TIMEOUT_MS = 30_000
VISIBLE_POLL_S = 0.1


def request_timeout_within(timeout_ms: int) -> int:
    """One request's bound inside a command bounded by `timeout_ms`: a third of it, at most Kafka's 30 s.

    A broker that accepts a connection and never answers (stopped, swapping) must not take the whole
    budget, or the command fails although two other brokers would answer: Kafka's admin tools leave
    the same room (request.timeout.ms 30 s inside default.api.timeout.ms 60 s).
    """
    return min(DEFAULT_TIMEOUT_MS, max(1, timeout_ms // 3))


def timeout_option(func: Any) -> Any:
    return click.option(
        "--timeout-ms",
        type=click.IntRange(100, 600_000),
        default=DEFAULT_TIMEOUT_MS,
        show_default=True,
        help="Bound on the whole command, retries included.",
    )(func)


def fail(error: KafkaError) -> click.ClickException:
    """Errors to stderr as `Error: NAME: message`, exit 1."""
    return click.ClickException(str(error))


def run_admin(servers: list[tuple[str, int]], timeout_ms: int, action: Callable[[Any], Awaitable[T]]) -> T:
    """Run `action(admin)` with an AdminClient bounded by `timeout_ms`; KafkaError becomes a CLI error."""
    from kraftpy.client.shell.admin import AdminClient  # imported when a command runs: `kraftpy --help` stays fast

    # The client logs retries (a node without metadata, a NOT_CONTROLLER hop) as warnings; a command
    # reports its outcome itself, so keep stderr for that.
    logging.getLogger("kraftpy.client").setLevel(logging.ERROR)

    async def go() -> T:
        admin = AdminClient(
            servers,
            default_api_timeout_ms=timeout_ms,
            request_timeout_ms=request_timeout_within(timeout_ms),
        )
        try:
            async with asyncio.timeout(timeout_ms / 1000 + 5):  # the admin client bounds itself; this is a backstop
                return await action(admin)
        finally:
            await admin.close()

    try:
        return asyncio.run(go())
    except KafkaError as exc:
        raise fail(exc) from None
    except TimeoutError:
        raise fail(KafkaError(f"no answer within {timeout_ms} ms", ErrorCode.REQUEST_TIMED_OUT)) from None


def parse_key_values(items: tuple[str, ...], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        out[key.strip()] = value.strip()
    return out


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, default=str))


# --- describing --------------------------------------------------------------------------------------


def topic_json(description: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """The `--json` shape of one topic (as kraftpy.metadata.image.views.topic_description)."""
    return {
        "name": description.name,
        "topic_id": None if description.topic_id is None else str(description.topic_id),
        "partitions": [
            {
                "partition": p.partition,
                "leader": -1 if p.leader is None else p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                # KIP-966, from DescribeTopicPartitions; [] from a broker that only answers Metadata.
                "elr": list(p.elr),
                "last_known_elr": list(p.last_known_elr),
            }
            for p in sorted(description.partitions, key=lambda p: p.partition)
        ],
        "configs": dict(sorted(overrides.items())),
    }


async def describe_with_configs(admin: Any, names: list[str] | None) -> list[dict[str, Any]]:
    from kraftpy.client.admin.types import ConfigResource

    if names is None:
        names = sorted(await admin.list_topics())
    if not names:
        return []
    descriptions = await admin.describe_topics(names)
    resources = [ConfigResource("topic", n) for n in names]
    configs = await admin.describe_configs(resources)
    out = []
    for name in names:
        entries = configs.get(ConfigResource("topic", name))
        if isinstance(entries, KafkaError):  # deleted between the two calls
            raise entries
        overrides = {e.name: e.value for e in entries or [] if e.source == "topic"}
        out.append(topic_json(descriptions[name], overrides))
    return out


def render_topic(topic: dict[str, Any]) -> tuple[str, Table]:
    """kafka-topics' summary line, then one row per partition (with Kafka 3.8's Elr and LastKnownElr)."""
    partitions = topic["partitions"]
    rf = len(partitions[0]["replicas"]) if partitions else 0
    configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items()) or "-"
    header = (
        f"[bold]Topic: {topic['name']}[/]  TopicId: {topic['topic_id']}  PartitionCount: {len(partitions)}  "
        f"ReplicationFactor: {rf}  Configs: {configs}"
    )
    table = narrow_table("partition", "leader", "leader epoch", "replicas", "isr", "elr", "last known elr")
    for p in partitions:
        leader = "[red]none[/]" if p["leader"] < 0 else str(p["leader"])
        isr = ",".join(map(str, p["isr"]))
        if not p["isr"]:  # KIP-966 empties it when its last member is fenced: say so, not an empty cell
            isr = "[red]none[/]"
        elif len(p["isr"]) < len(p["replicas"]):
            isr = f"[yellow]{isr}[/]"
        table.add_row(
            str(p["partition"]),
            leader,
            str(p["leader_epoch"]),
            ",".join(map(str, p["replicas"])),
            isr,
            _nodes_cell(p["elr"]),
            _nodes_cell(p["last_known_elr"]),
        )
    return header, table


def _nodes_cell(nodes: list[int]) -> str:
    """An ELR is empty on every healthy partition: "-" keeps those columns one character wide."""
    return ",".join(map(str, nodes)) or "-"


async def wait_until_visible(admin: Any, name: str, partitions: int, deadline: float) -> bool:
    """True once broker metadata shows `name` with `partitions` partitions, each with a leader."""
    while time.monotonic() < deadline:
        try:
            described = (await admin.describe_topics([name], timeout_ms=1000))[name]
            if len(described.partitions) >= partitions and all(p.leader is not None for p in described.partitions):
                return True
        except KafkaError:
            pass
        await asyncio.sleep(VISIBLE_POLL_S)
    return False


# --- commands ----------------------------------------------------------------------------------------


@click.group("topics")
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


def refuse_internal(name: str, action: str) -> None:
    """Kafka's TopicCommand guard: internal topics hold the cluster's own state (groups' offsets)."""
    if is_internal(name):
        raise fail(
            KafkaError(
                f"topic {name} is a Kafka internal topic: the topics tool does not {action}",
                ErrorCode.INVALID_TOPIC_EXCEPTION,
            )
        )


@topics.command("create")
@click.argument("name")
@click.option("-p", "--partitions", type=int, help="Partition count, >= 1 [default: the cluster's num_partitions]")
@click.option(
    "-r",
    "--replication-factor",
    type=int,
    help="Replicas per partition, at least 1 [default: the cluster's default_replication_factor]",
)
@click.option(
    "-c", "--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config override (repeatable)."
)
@click.option("--if-not-exists", is_flag=True, help="Succeed when the topic already exists.")
@timeout_option
@client_options
def create(
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Create topic NAME."""
    from kraftpy.client.admin.types import NewTopic

    overrides = parse_key_values(configs, "--config")
    # As kafka-topics: a count below 1 is refused; leaving the option out asks for the cluster's default
    # (-1 on the wire, which the CLI never sends on the user's behalf by accident).
    if partitions is not None and partitions < 1:
        raise fail(KafkaError(f"--partitions {partitions}: must be at least 1 (omit it for the default)",
                              ErrorCode.INVALID_PARTITIONS))  # fmt: skip
    if replication_factor is not None and replication_factor < 1:
        raise fail(KafkaError(f"--replication-factor {replication_factor}: must be at least 1 (omit it for the "
                              "default)", ErrorCode.INVALID_REPLICATION_FACTOR))  # fmt: skip
    servers = servers_for(cluster_dir, bootstrap_servers)
    deadline = time.monotonic() + timeout_ms / 1000

    async def action(admin: Any) -> tuple[Any, bool]:
        topic = NewTopic(name, partitions or -1, replication_factor or -1, configs=overrides)
        results = await admin.create_topics([topic])
        result = results[name]
        if result.error is not None:
            if if_not_exists and result.error.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return result, True
            raise result.error
        with err_console.status(f"waiting for {name} to appear in broker metadata"):
            visible = await wait_until_visible(admin, name, result.num_partitions, deadline)
        return result, visible

    result, visible = run_admin(servers, timeout_ms, action)
    if result.error is not None:
        click.echo(f"Topic {name} already exists.")
        return
    click.echo(
        f"Created topic {name} (id {result.topic_id}) with {result.num_partitions} partition(s), "
        f"replication factor {result.replication_factor}."
    )
    if not visible:
        err_console.print(f"[yellow]{name} is created but brokers do not show it with leaders yet[/]")


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help='{"topics": [names]} for scripts.')
@timeout_option
@client_options
def list_topics(
    as_json: bool, timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None
) -> None:
    """List topic names."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    names = sorted(run_admin(servers, timeout_ms, lambda admin: admin.list_topics()))
    if as_json:
        echo_json({"topics": names})
        return
    for name in names:
        click.echo(name)


@topics.command("describe")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help='The topic as JSON (all topics: {"topics": [...]}).')
@timeout_option
@client_options
def describe(
    name: str | None,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Describe topic NAME (every topic without NAME): partitions, leaders, ISR, ELR and config overrides."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    described = run_admin(
        servers, timeout_ms, lambda admin: describe_with_configs(admin, None if name is None else [name])
    )
    if as_json:
        echo_json(described[0] if name is not None else {"topics": described})
        return
    console = Console()
    if not described:
        console.print("no topics")
    for topic in described:
        header, table = render_topic(topic)
        console.print(header)  # wrapped at the terminal's width (80 when piped)
        console.print(table)


@topics.command("alter")
@click.argument("name")
@click.option("--partitions", type=int, required=True, help="The new, higher partition count.")
@timeout_option
@client_options
def alter(
    name: str, partitions: int, timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None
) -> None:
    """Add partitions to topic NAME (Kafka never removes partitions)."""
    refuse_internal(name, "change its partition count")
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> None:
        result = (await admin.create_partitions({name: partitions}))[name]
        if result.error is not None:
            raise result.error

    run_admin(servers, timeout_ms, action)
    click.echo(f"Topic {name} now has {partitions} partitions.")


@topics.command("delete")
@click.argument("name")
@timeout_option
@client_options
def delete(name: str, timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None) -> None:
    """Delete topic NAME and its data."""
    refuse_internal(name, "delete it")
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> None:
        result = (await admin.delete_topics([name]))[name]
        if result.error is not None:
            raise result.error

    run_admin(servers, timeout_ms, action)
    click.echo(f"Deleted topic {name}.")


# kafka-leader-election.sh lives in its own module; it shares this group and the helpers above.
from kraftpy.tools.commands.elect import elect_leaders  # noqa: E402

topics.add_command(elect_leaders)
