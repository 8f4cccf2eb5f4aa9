"""`kraftpy configs describe|set|delete`: kafka-configs for topics and brokers over the AdminClient.

A resource is `--topic NAME`, `--broker ID` or `--broker-default` (the
cluster-wide default every topic inherits, Kafka's `--entity-default`).
Names are Kafka's in snake_case; the dotted spelling (`retention.ms`) is
accepted. `describe` shows the overrides (what `set` changed) unless `--all`
asks for every config with its source. Errors: `Error: NAME: message` on
stderr, exit 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.commands.topics import echo_json, parse_key_values, run_admin, timeout_option
from kraftpy.tools.options import client_options, servers_for
from kraftpy.tools.tables import narrow_table


def resource_options(func: Any) -> Any:
    func = click.option("--broker-default", is_flag=True, help="The cluster-wide broker default.")(func)
    func = click.option("--broker", "broker_id", type=click.IntRange(min=0), help="One broker, by id.")(func)
    return click.option("--topic", help="A topic, by name.")(func)


def resource_of(topic: str | None, broker_id: int | None, broker_default: bool) -> Any:
    from kraftpy.client.admin.types import ConfigResource

    given = [x for x in (topic is not None, broker_id is not None, broker_default) if x]
    if len(given) != 1:
        raise click.UsageError("name exactly one of --topic NAME, --broker ID, --broker-default")
    if topic is not None:
        return ConfigResource("topic", topic)
    return ConfigResource("broker", "" if broker_default else str(broker_id))


def describe_resource_text(resource: Any) -> str:
    if resource.resource_type == "topic":
        return f"topic {resource.name}"
    return "the broker default" if resource.name == "" else f"broker {resource.name}"


@click.group("configs")
def configs() -> None:
    """Describe, set and delete topic and broker configs."""


@configs.command("describe")
@resource_options
@click.option("--all", "show_all", is_flag=True, help="Every config with its source, not only the overrides.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object for scripts.")
@timeout_option
@client_options
def describe(
    topic: str | None,
    broker_id: int | None,
    broker_default: bool,
    show_all: bool,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Show a resource's config overrides (--all: every config)."""
    resource = resource_of(topic, broker_id, broker_default)
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> list[Any]:
        answer = (await admin.describe_configs([resource]))[resource]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    entries = run_admin(servers, timeout_ms, action)
    own_source = "topic" if resource.resource_type == "topic" else "broker"
    shown = [e for e in entries if show_all or e.source == own_source]
    if as_json:
        echo_json(
            {
                "resource_type": resource.resource_type,
                "resource_name": resource.name,
                "configs": [
                    {"name": e.name, "value": e.value, "source": e.source, "is_default": e.is_default} for e in shown
                ],
            }
        )
        return
    console = Console()
    if not shown:
        console.print(f"{describe_resource_text(resource)} has no config overrides (--all shows every config)")
        return
    table = narrow_table("name", "value", "source", title=f"configs of {describe_resource_text(resource)}")
    for e in shown:
        table.add_row(e.name, str(e.value), str(e.source))
    console.print(table)


def _alter(ops: list[Any], where: dict[str, Any]) -> Any:
    """Apply `ops` to the resource the shared options name (`where`: resource, timeout and client options)."""
    resource = resource_of(where["topic"], where["broker_id"], where["broker_default"])
    servers = servers_for(where["cluster_dir"], where["bootstrap_servers"])

    async def action(admin: Any) -> None:
        result = (await admin.incremental_alter_configs({resource: ops}))[resource]
        if result.error is not None:
            raise result.error

    run_admin(servers, where["timeout_ms"], action)
    return resource


@configs.command("set")
@click.argument("settings", nargs=-1, required=True, metavar="KEY=VALUE...")
@resource_options
@timeout_option
@client_options
def set_configs(settings: tuple[str, ...], **where: Any) -> None:
    """Set config overrides on a resource."""
    from kraftpy.client.admin.types import AlterConfigOp

    values = parse_key_values(settings, "KEY=VALUE")
    resource = _alter([AlterConfigOp(k, "set", v) for k, v in values.items()], where)
    click.echo(f"Updated {describe_resource_text(resource)}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


@configs.command("delete")
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@resource_options
@timeout_option
@client_options
def delete_configs(keys: tuple[str, ...], **where: Any) -> None:
    """Remove config overrides from a resource (back to the inherited value)."""
    from kraftpy.client.admin.types import AlterConfigOp

    resource = _alter([AlterConfigOp(k, "delete") for k in keys], where)
    click.echo(f"Deleted from {describe_resource_text(resource)}: {', '.join(keys)}")
