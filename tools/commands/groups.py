"""`kraftpy groups list|describe|reset-offsets|delete`: kafka-consumer-groups over the AdminClient.

Group calls go to each group's coordinator (the AdminClient finds it);
log start and end offsets come from the partitions' leaders through a
consumer without a group, as Kafka's ConsumerGroupCommand did. Tables for
people, `--json` for scripts; a failure prints `Error: <ERROR_NAME>:
<message>` on stderr and exits 1 (2 for a usage error), as `kraftpy topics`.
`reset-offsets` follows Kafka: only for a group without active members
(NON_EMPTY_GROUP otherwise, dry run included), a dry run unless --execute,
the new offsets computed by `kraftpy.client.group.offsets_reset.plan_reset`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.commands.topics import echo_json, err_console, request_timeout_within, run_admin, timeout_option
from kraftpy.tools.options import client_options, servers_for
from kraftpy.tools.tables import narrow_table

E = ErrorCode
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")  # Kafka's names
INACTIVE_STATES = ("Empty", "Dead")
RESET_OPTIONS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by")
# What a failed group call means for the person at the terminal (the broker sends only the code).
EXPLAINED = {
    E.GROUP_ID_NOT_FOUND: "the group does not exist",
    E.NON_EMPTY_GROUP: "the group has active members; stop its consumers first",
    E.UNKNOWN_MEMBER_ID: "the group has active members; only they may commit",
    E.INVALID_GROUP_ID: "the group id is not valid",
}


# --- parsing options -------------------------------------------------------------------------------------


def parse_topic_partitions(value: str) -> tuple[str, tuple[int, ...] | None]:
    """--topic T (every partition) or T:0,1,2 (those), as kafka-consumer-groups."""
    topic, sep, rest = value.strip().partition(":")
    if not topic:
        raise click.BadParameter(f"{value!r} names no topic; use TOPIC or TOPIC:0,1,2", param_hint="--topic")
    if not sep:
        return topic, None
    parts = [p.strip() for p in rest.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise click.BadParameter(
            f"{value!r}: partitions must be non-negative numbers separated by commas (TOPIC:0,1,2)",
            param_hint="--topic",
        )
    return topic, tuple(sorted({int(p) for p in parts}))


def parse_datetime_ms(value: str) -> int:
    """--to-datetime: ISO 8601 (Kafka's YYYY-MM-DDTHH:mm:SS.sss, optional Z or +hh:mm; local time without one)."""
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date-time like 2024-05-01T12:00:00.000 (optionally with Z or +01:00)",
            param_hint="--to-datetime",
        ) from None
    ms = int(when.astimezone().timestamp() * 1000)  # a naive time is local time, as Kafka reads it
    if ms < 0:
        raise click.BadParameter(f"{value!r} is before 1970", param_hint="--to-datetime")
    return ms


def reset_spec(options: Mapping[str, Any]) -> Any:
    """The ResetSpec of exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by."""
    from kraftpy.client.group.offsets_reset import ResetSpec

    # `is`, not `in (None, False)`: --to-offset 0 and --shift-by 0 are given (0 == False).
    given = [name for name in RESET_OPTIONS if options.get(name) is not None and options.get(name) is not False]
    if len(given) != 1:
        flags = ", ".join("--" + n.replace("_", "-") for n in RESET_OPTIONS)
        raise click.UsageError(f"give exactly one of {flags}" + (f" (got {len(given)})" if given else ""))
    name = given[0]
    kind = name.replace("_", "-")
    if name == "to_datetime":
        return ResetSpec(kind, parse_datetime_ms(options[name]))
    if name in ("to_offset", "shift_by"):
        return ResetSpec(kind, options[name])
    return ResetSpec(kind)


def explained(error: KafkaError, subject: str) -> KafkaError:
    """The same error, its message saying what it means for `subject`."""
    text = EXPLAINED.get(error.code)
    message = error.message if error.message and error.message != error.code.name else text or error.code.name
    return KafkaError(f"{subject}: {message}", error.code)


# --- shapes ------------------------------------------------------------------------------------------------


def tp_json(tp: Any) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


def describe_json(description: Any, committed: Mapping[Any, Any], log_end: Mapping[Any, int | None]) -> dict[str, Any]:
    """The `groups describe --json` shape (issue 7): members with assignments, then each partition's lag.

    The partitions are those with a committed offset or an owner; lag is log end - committed (Kafka's),
    null when either is unknown.
    """
    owned = {tp for m in description.members for tp in m.assignment}
    rows = []
    for tp in sorted(set(committed) | owned):
        om = committed.get(tp)
        offset = None if om is None else om.offset
        end = log_end.get(tp)
        lag = None if offset is None or end is None else end - offset
        rows.append({**tp_json(tp), "committed_offset": offset, "log_end_offset": end, "lag": lag})
    return {
        "group": description.group_id,
        "state": description.state,
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "assignment": [tp_json(tp) for tp in m.assignment]}
            for m in sorted(description.members, key=lambda m: m.member_id)
        ],
        "partitions": rows,
    }


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def render_group(shape: Mapping[str, Any], description: Any) -> tuple[str, Table, Table | None]:
    """A summary line, the partitions table (Kafka's columns but the client id) and the members table (None without
    members)."""
    members = description.members
    owner = {(tp.topic, tp.partition): m for m in members for tp in m.assignment}
    assignor = f", assignor {description.partition_assignor}" if description.partition_assignor else ""
    header = f"[bold]Group {shape['group']}[/]: {shape['state']}{assignor}, {len(members)} member(s)"
    if not members:
        header += " (no active members)"
    # Member ids are long (client id + a UUID): the partitions table names members by a short
    # number, and the members table gives each number its whole id on one line, so both fit 80 columns.
    ordered = sorted(members, key=lambda m: m.member_id)
    number = {m.member_id: i for i, m in enumerate(ordered, 1)}
    partitions = narrow_table("topic", "partition", "committed offset", "log end offset", "lag", "member")
    for row in shape["partitions"]:
        m = owner.get((row["topic"], row["partition"]))
        partitions.add_row(
            row["topic"],
            str(row["partition"]),
            _cell(row["committed_offset"]),
            _cell(row["log_end_offset"]),
            _cell(row["lag"]),
            "-" if m is None else f"#{number[m.member_id]}",
        )
    if not members:
        return header, partitions, None
    table = narrow_table("#", "member id / client id, host, instance id, assignment")
    for m in ordered:
        assignment = ", ".join(str(tp) for tp in m.assignment) or "-"
        details = f"{m.client_id}, {m.host}, {m.group_instance_id or '-'}, {assignment}"
        table.add_row(f"#{number[m.member_id]}", f"{m.member_id}\n{details}")
    return header, partitions, table


def plan_json(group: str, plan: Mapping[Any, int], committed: Mapping[Any, Any], executed: bool) -> dict[str, Any]:
    return {
        "group": group,
        "executed": executed,
        "partitions": [
            {
                **tp_json(tp),
                "current_offset": None if committed.get(tp) is None else committed[tp].offset,
                "new_offset": offset,
            }
            for tp, offset in sorted(plan.items())
        ],
    }


def render_plan(shape: Mapping[str, Any]) -> Table:
    table = narrow_table("group", "topic", "partition", "current offset", "new offset")
    for row in shape["partitions"]:
        table.add_row(
            shape["group"], row["topic"], str(row["partition"]), _cell(row["current_offset"]), str(row["new_offset"])
        )
    return table


# --- talking to the cluster -------------------------------------------------------------------------------


async def describe_one(admin: Any, group: str) -> Any:
    """The group's description; GROUP_ID_NOT_FOUND when it does not exist (DescribeGroups says "Dead")."""
    description = (await admin.describe_consumer_groups([group]))[group]
    if isinstance(description, KafkaError):
        raise explained(description, f"group {group!r}")
    if not description.exists:
        raise KafkaError(f"consumer group {group!r} does not exist", E.GROUP_ID_NOT_FOUND)
    return description


@dataclass
class LogOffsets:
    """What the partitions' leaders say: log start, log end (the high watermark), the offset at a time."""

    start: dict[Any, int] = field(default_factory=dict)
    end: dict[Any, int] = field(default_factory=dict)
    at_time: dict[Any, int | None] = field(default_factory=dict)


async def log_offsets(
    servers: list[tuple[str, int]],
    partitions: Iterable[Any],
    timeout_ms: int,
    *,
    start: bool = False,
    time_ms: int | None = None,
) -> LogOffsets:
    """Ask the leaders with one consumer without a group; log start and the offset at time_ms only if asked."""
    from kraftpy.client.shell.consumer import Consumer

    wanted = sorted(partitions)
    out = LogOffsets()
    if not wanted:
        return out
    consumer = Consumer(
        servers, default_api_timeout_ms=timeout_ms, request_timeout_ms=request_timeout_within(timeout_ms)
    )
    try:
        out.end = await consumer.end_offsets(wanted, timeout_ms)
        if start:
            out.start = await consumer.beginning_offsets(wanted, timeout_ms)
        if time_ms is not None:
            found = await consumer.offsets_for_times(dict.fromkeys(wanted, time_ms), timeout_ms)
            out.at_time = {tp: None if ot is None else ot.offset for tp, ot in found.items()}
    finally:
        await consumer.close()
    return out


async def resolve_partitions(
    admin: Any, group: str, topics: Iterable[tuple[str, tuple[int, ...] | None]], all_topics: bool
) -> list[Any]:
    """The partitions --topic (or --all-topics: every topic the group has offsets for) names; each must exist."""
    from kraftpy.protocol.types import TopicPartition

    wanted = dict(topics)
    if all_topics:
        for tp in await admin.list_consumer_group_offsets(group):
            wanted.setdefault(tp.topic, None)
    if not wanted:
        return []
    described = await admin.describe_topics(sorted(wanted))
    out = []
    for topic, chosen in sorted(wanted.items()):
        existing = sorted(p.partition for p in described[topic].partitions)
        missing = sorted(set(chosen or ()) - set(existing))
        if missing:
            raise KafkaError(
                f"topic {topic!r} has partitions {existing[0]}-{existing[-1]}, not {missing}",
                E.UNKNOWN_TOPIC_OR_PARTITION,
            )
        out += [TopicPartition(topic, p) for p in (chosen or existing)]
    return out


# --- commands ----------------------------------------------------------------------------------------------


@click.group("groups")
def groups() -> None:
    """List, describe, reset the offsets of, and delete consumer groups."""


@groups.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(GROUP_STATES, case_sensitive=False),
    help="Only groups in this state (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help='{"groups": [{"group", "state"}]} for scripts.')
@timeout_option
@client_options
def list_groups(
    states: tuple[str, ...],
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """List consumer groups (every broker is asked for the groups it coordinates)."""
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> Any:
        return (await admin.list_consumer_groups(states or None)).all()

    listings = run_admin(servers, timeout_ms, action)
    if as_json:
        echo_json({"groups": [{"group": g.group_id, "state": g.state} for g in listings]})
        return
    for listing in listings:
        click.echo(listing.group_id)


@groups.command("describe")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="The group as JSON (state, members, partitions with lag).")
@timeout_option
@client_options
def describe(
    group: str, as_json: bool, timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None
) -> None:
    """Describe GROUP: its state, members and their partitions, and per partition committed offset and lag."""
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> tuple[Any, dict[str, Any]]:
        description = await describe_one(admin, group)
        committed = await admin.list_consumer_group_offsets(group)
        partitions = set(committed) | {tp for m in description.members for tp in m.assignment}
        existing = await admin.list_topics()  # a deleted topic's offsets have no log end to compare with
        found = await log_offsets(servers, (tp for tp in partitions if tp.topic in existing), timeout_ms)
        return description, describe_json(description, committed, found.end)

    description, shape = run_admin(servers, timeout_ms, action)
    if as_json:
        echo_json(shape)
        return
    header, partitions, members = render_group(shape, description)
    console = Console()
    console.print(header, soft_wrap=True)
    console.print(partitions)
    if members is not None:
        console.print(members)


@groups.command("reset-offsets")
@click.argument("group")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="A topic (every partition) or TOPIC:0,1,2 (those partitions); repeatable.",
)
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the log end offset.")
@click.option("--to-offset", type=click.IntRange(min=0), help="To offset N (clamped into the log).")
@click.option("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="To the first record at or after this time.")
@click.option("--shift-by", type=int, help="Move the committed offset by N (negative: back), clamped.")
@click.option("--execute", is_flag=True, help="Commit the new offsets (without it: a dry run printing the plan).")
@click.option("--json", "as_json", is_flag=True, help='{"group", "executed", "partitions": [...]} for scripts.')
@timeout_option
@client_options
def reset_offsets(
    group: str,
    topics: tuple[str, ...],
    all_topics: bool,
    execute: bool,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
    **reset: Any,
) -> None:
    """Move GROUP's committed offsets; the group must have no active members."""
    spec = reset_spec(reset)
    scope = [parse_topic_partitions(t) for t in topics]
    if bool(scope) == all_topics:
        raise click.UsageError("give the partitions to reset: --topic TOPIC[:P,...] (repeatable) or --all-topics")
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> tuple[dict[Any, int], dict[Any, Any]]:
        from kraftpy.client.group.offsets_reset import plan_reset
        from kraftpy.client.shell.admin import raise_for

        description = (await admin.describe_consumer_groups([group]))[group]
        if isinstance(description, KafkaError):
            raise explained(description, f"group {group!r}")
        if description.state not in INACTIVE_STATES:
            raise KafkaError(
                f"assignments can only be reset if group {group!r} is inactive, but the current state is "
                f"{description.state} with {len(description.members)} member(s); stop its consumers first",
                E.NON_EMPTY_GROUP,
            )
        partitions = await resolve_partitions(admin, group, scope, all_topics)
        if not partitions:
            raise KafkaError(f"group {group!r} has no committed offsets to reset", E.GROUP_ID_NOT_FOUND)
        committed = await admin.list_consumer_group_offsets(group, partitions)
        at = spec.value if spec.kind == "to-datetime" else None
        found = await log_offsets(servers, partitions, timeout_ms, start=True, time_ms=at)
        try:
            plan = plan_reset(
                spec,
                partitions,
                committed={tp: None if om is None else om.offset for tp, om in committed.items()},
                log_start=found.start,
                log_end=found.end,
                offsets_for_times=found.at_time,
            )
        except ValueError as exc:
            raise KafkaError(str(exc), E.INVALID_REQUEST) from None
        if execute:
            results = await admin.alter_consumer_group_offsets(group, plan)
            try:
                raise_for(f"resetting the offsets of group {group!r}", results)
            except KafkaError as exc:
                raise explained(exc, f"group {group!r}") from None
        return plan, committed

    plan, committed = run_admin(servers, timeout_ms, action)
    shape = plan_json(group, plan, committed, execute)
    if as_json:
        echo_json(shape)
        return
    Console().print(render_plan(shape))
    if execute:
        click.echo(f"Reset {len(plan)} offset(s) of group {group}.")
    else:
        err_console.print("Dry run: nothing was changed; add --execute to commit these offsets.")


@groups.command("delete")
@click.argument("group_ids", nargs=-1, required=True, metavar="GROUP...")
@timeout_option
@client_options
def delete(
    group_ids: tuple[str, ...], timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None
) -> None:
    """Delete consumer groups and their committed offsets (only groups without active members)."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    results = run_admin(servers, timeout_ms, lambda admin: admin.delete_consumer_groups(group_ids))
    failed = False
    for group, result in results.items():
        if result.error is None:
            click.echo(f"Deleted consumer group {group}.")
        else:
            failed = True
            click.echo(f"Error: {explained(result.error, f'cannot delete group {group!r}')}", err=True)
    if failed:
        raise SystemExit(1)
