"""`kraftpy quorum status`: kafka-metadata-quorum describe --status/--replication.

Asks the active controller (`/controller/describe_quorum`) for the Raft
leader, epoch and high watermark and, per voter and observer, its log end
offset, lag behind the leader and time since its last fetch. `--json` prints
`{"leader_id", "epoch", "high_watermark", "voters": [...], "observers": [...]}`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import Address, parse_address
from kraftpy.tools.commands.topics import echo_json, fail, request_timeout_within, timeout_option
from kraftpy.tools.options import client_options, rpc_servers_for
from kraftpy.tools.tables import narrow_table

DESCRIBE_QUORUM_PATH = "/controller/describe_quorum"
RETRY_BACKOFF_MS = 100
UNREACHABLE_AFTER_MS = 2_000  # KRaft's controller.quorum.fetch.timeout.ms: a voter silent this long is gone


async def ask_quorum(servers: list[Address], timeout_ms: int) -> Any:
    """The quorum leader's describe_quorum over the nodes' RPC: each node in turn, following a NOT_CONTROLLER
    answer's leader hint, again after a backoff while an election runs; KafkaError past `timeout_ms`."""
    from kraftpy.client.admin.protocol import parse_describe_quorum  # imported when run: `--help` stays fast
    from kraftpy.protocol.shell.clock import monotonic_ms
    from kraftpy.protocol.shell.rpc import RpcClient

    per_request_ms = request_timeout_within(timeout_ms)
    rpc = RpcClient(request_timeout_ms=per_request_ms)
    deadline = monotonic_ms() + timeout_ms
    last: KafkaError | None = None
    try:
        while True:
            queue, tried = list(servers), set()
            while queue:
                address = queue.pop(0)
                tried.add(address)
                remaining = deadline - monotonic_ms()
                if remaining <= 0:
                    raise KafkaError(
                        f"no quorum leader answered within {timeout_ms} ms (last error: {last})",
                        ErrorCode.REQUEST_TIMED_OUT,
                    )
                try:
                    answer = await rpc.call(
                        address,
                        DESCRIBE_QUORUM_PATH,
                        {},
                        timeout_ms=int(min(remaining, per_request_ms)),
                    )
                except KafkaError as exc:
                    last = exc
                    hint = parse_address(exc.details.get("leader_address"))
                    if hint is not None and hint not in tried:  # each node once a round: no ping-pong
                        queue.insert(0, hint)
                    continue
                return parse_describe_quorum(answer)
            await asyncio.sleep(min(RETRY_BACKOFF_MS, max(0, deadline - monotonic_ms())) / 1000)
    finally:
        await rpc.close()


def quorum_json(info: Any) -> dict[str, Any]:
    def rows(replicas: Any) -> list[dict[str, Any]]:
        return [
            {
                "node_id": r.node_id,
                "log_end_offset": r.log_end_offset,
                "lag": r.lag,
                "last_fetch_ms_ago": r.last_fetch_ms_ago,
            }
            for r in replicas
        ]

    return {
        "leader_id": info.leader_id,
        "epoch": info.epoch,
        "high_watermark": info.high_watermark,
        "voters": rows(info.voters),
        "observers": rows(info.observers),
    }


def reachable(row: dict[str, Any], leader_id: int | None) -> bool:
    """The leader heard from this replica within KRaft's fetch timeout (the leader itself always is)."""
    if row["node_id"] == leader_id:
        return True
    ago = row["last_fetch_ms_ago"]
    return ago is not None and ago <= UNREACHABLE_AFTER_MS


def render_quorum(body: dict[str, Any]) -> Table:
    table = narrow_table(
        "node", "role", "state", "log end offset", "lag", "last fetch",
        title=f"quorum leader {body['leader_id']}  epoch {body['epoch']}  high watermark {body['high_watermark']}",
    )  # fmt: skip
    for role, key in (("voter", "voters"), ("observer", "observers")):
        for r in body[key]:
            is_leader = r["node_id"] == body["leader_id"]
            ago = "never" if r["last_fetch_ms_ago"] is None else f"{r['last_fetch_ms_ago']} ms ago"
            if reachable(r, body["leader_id"]):
                state, end, lag = "up", str(r["log_end_offset"]), "-" if r["lag"] is None else str(r["lag"])
            else:  # what the leader last heard is stale: no offset or lag to show
                state, end, lag = "[red]unreachable[/]", "-", "-"
            shown_role = "leader" if is_leader else role
            table.add_row(str(r["node_id"]), shown_role, state, end, lag, "-" if is_leader else ago)
    return table


@click.group("quorum")
def quorum() -> None:
    """Inspect the metadata quorum."""


@quorum.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object for scripts.")
@timeout_option
@client_options
def status(as_json: bool, timeout_ms: int, cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None) -> None:
    """Leader, epoch, high watermark and each replica's lag (asked over the nodes' RPC: --bootstrap-server
    names RPC addresses here, as Kafka's quorum state is the controllers', not the Kafka listeners')."""
    servers = rpc_servers_for(cluster_dir, bootstrap_servers)
    try:
        body = quorum_json(asyncio.run(ask_quorum(servers, timeout_ms)))
    except KafkaError as exc:
        raise fail(exc) from None
    if as_json:
        echo_json(body)
    else:
        Console().print(render_quorum(body))
