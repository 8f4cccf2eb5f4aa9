"""`kraftpy transactions list|describe`: kafka-transactions.sh's list and describe over the AdminClient.

`list` asks every broker for the transactional ids it coordinates
(ListTransactions) and prints one row per id; `describe --transactional-id ID`
asks the id's coordinator (DescribeTransactions). Columns are
kafka-transactions.sh's; `--json` for scripts; a failure prints
`Error: <ERROR_NAME>: <message>` on stderr and exits 1, as the other admin commands.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.commands.topics import echo_json, fail, run_admin, timeout_option
from kraftpy.tools.options import client_options, servers_for
from kraftpy.tools.tables import narrow_table

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "PrepareEpochFence")


def listing_json(listing: Any) -> dict[str, Any]:
    return {
        "transactional_id": listing.transactional_id,
        "coordinator": listing.coordinator_id,
        "producer_id": listing.producer_id,
        "state": listing.state,
    }


def description_json(d: Any, now_ms: int) -> dict[str, Any]:
    """kafka-transactions.sh describe's fields; the duration only while a transaction is open."""
    open_txn = d.state in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
    start = d.transaction_start_time_ms if open_txn else None
    return {
        "coordinator": d.coordinator_id,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "transaction_timeout_ms": d.transaction_timeout_ms,
        "current_transaction_start_time_ms": start,
        "transaction_duration_ms": None if start is None else max(0, now_ms - start),
        "topic_partitions": [f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions],
    }


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


@click.group("transactions")
def transactions() -> None:
    """List and describe transactions (as kafka-transactions.sh)."""


@transactions.command("list")
@click.option(
    "--state", "states", multiple=True, type=click.Choice(STATES), help="Only ids in this state (repeatable)."
)
@click.option("--producer-id", "producer_ids", multiple=True, type=click.IntRange(min=0), help="Only this producer id.")
@click.option(
    "--duration-ms", type=click.IntRange(min=0), help="Only transactions open longer than this (KIP-994's filter)."
)
@click.option("--json", "as_json", is_flag=True, help='{"transactions": [...]} for scripts.')
@timeout_option
@client_options
def list_transactions(
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    duration_ms: int | None,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """List transactional ids: coordinator, producer id and state of each (every broker is asked)."""
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> Any:
        return await admin.list_transactions(states, producer_ids, -1 if duration_ms is None else duration_ms)

    listings = run_admin(servers, timeout_ms, action)
    if as_json:
        echo_json({"transactions": [listing_json(t) for t in listings]})
        return
    table = narrow_table("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
    for t in listings:
        table.add_row(t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state)
    Console().print(table)


@transactions.command("describe")
@click.option("--transactional-id", required=True, help="The transactional id to describe.")
@click.option("--json", "as_json", is_flag=True, help="The description as JSON.")
@timeout_option
@client_options
def describe(
    transactional_id: str,
    as_json: bool,
    timeout_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Describe the transactional id's state, producer, timeout and open transaction (from its coordinator)."""
    servers = servers_for(cluster_dir, bootstrap_servers)

    async def action(admin: Any) -> Any:
        return (await admin.describe_transactions([transactional_id]))[transactional_id]

    found = run_admin(servers, timeout_ms, action)
    if isinstance(found, KafkaError):
        raise fail(found)
    shape = description_json(found, int(time.time() * 1000))
    if as_json:
        echo_json(shape)
        return
    columns = (
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    )
    # kafka-transactions.sh prints these as one wide row; one per line fits a terminal.
    table = narrow_table("field", "value")
    for column, value in zip(columns, shape.values(), strict=True):
        table.add_row(column, ",".join(value) or "-" if isinstance(value, list) else _cell(value))
    Console().print(table)
