"""`kraftpy topics elect-leaders [--type preferred|unclean] [TOPIC [--partition N]]`: kafka-leader-election.sh.

Asks the active controller to move leadership to each partition's preferred
replica (the first one), or, with `--type unclean`, to give a leaderless
partition any live replica as leader (records only the lost ISR had are
lost). Without TOPIC every partition is considered. Prints what
kafka-leader-election prints: the partitions elected, those whose preferred
leader already leads, and the failures; exits 1 when any partition failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.commands.topics import echo_json, fail, run_admin, timeout_option
from kraftpy.tools.options import client_options, servers_for


@click.command("elect-leaders")
@click.argument("topic", required=False)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Only this partition of TOPIC.")
@click.option(
    "--type",
    "election_type",
    type=click.Choice(["preferred", "unclean"]),
    default="preferred",
    show_default=True,
    help="preferred: the first replica leads again; unclean: a leaderless partition takes any live replica.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition, in a list.")
@timeout_option
@client_options
def elect_leaders(
    topic: str | None,
    partition: int | None,
    election_type: str,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Elect preferred (or unclean) leaders for TOPIC's partitions, or for every partition."""
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs TOPIC")
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> dict[Any, Any]:
        wanted: list[tuple[str, int]] | None = None
        if topic is not None and partition is not None:
            wanted = [(topic, partition)]
        elif topic is not None:
            described = (await admin.describe_topics([topic]))[topic]
            wanted = [(topic, p.partition) for p in described.partitions]
        return await admin.elect_leaders(election_type, wanted)

    results = run_admin(servers, timeout_ms, action)
    rows = sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition))
    if as_json:
        echo_json(
            [
                {"topic": tp.topic, "partition": tp.partition, "error": None if r.error is None else r.error.code.name}
                for tp, r in rows
            ]
        )
    kind = election_type.upper()
    elected = [str(tp) for tp, r in rows if r.error is None]
    not_needed = [str(tp) for tp, r in rows if r.error is not None and r.error.code == ErrorCode.ELECTION_NOT_NEEDED]
    failed = [(tp, r.error) for tp, r in rows if r.error is not None and r.error.code != ErrorCode.ELECTION_NOT_NEEDED]
    if not as_json:
        if elected:
            click.echo(f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}")
        if not_needed:
            click.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
        if not rows:
            click.echo(f"No partition needed a {election_type} election.")
    for tp, error in failed[1:]:
        click.echo(f"Error: {error} ({tp})", err=True)
    if failed:
        tp, error = failed[0]
        assert isinstance(error, KafkaError)
        raise fail(KafkaError(f"{error.message} ({len(failed)} partition(s) failed)", error.code))
