"""`kraftpy consume TOPIC`: print records, like kafka-console-consumer (manual assignment, or a group).

Design notes: docs/user-guide.md, section "tools/commands/consume.py".
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.options import client_options, quiet_client_logs, servers_for

POLL_CHUNK_MS = 1_000
CONSOLE_CLIENT_ID = "kraftpy-console-consumer"


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def format_record(
    record: Any, *, print_key: bool, print_offset: bool, as_json: bool, print_partition: bool = False
) -> str:
    """One output line for a ConsumerRecord whose key and value are bytes (or None)."""
    if as_json:
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "key": _text(record.key),
                "value": _text(record.value),
                "timestamp": record.timestamp,
                "leader_epoch": record.leader_epoch,
            },
            ensure_ascii=False,
        )
    parts = []
    if print_partition:  # Kafka's DefaultMessageFormatter order: partition, offset, key, value
        parts.append(f"Partition:{record.partition}")
    if print_offset:
        parts.append(f"Offset:{record.offset}")
    if print_key:
        parts.append("null" if record.key is None else _text(record.key) or "")
    parts.append("null" if record.value is None else _text(record.value) or "")
    return "\t".join(parts)


class OffsetParam(click.ParamType):
    """--offset: earliest, latest, or a non-negative number."""

    name = "earliest|latest|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str | int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text in ("earliest", "latest"):
            return text
        if text.isdigit():
            return int(text)
        self.fail(f"{value!r} is not earliest, latest or a non-negative offset", param, ctx)


class Stop:
    """When to stop: after max_messages records, or after timeout_ms without a record."""

    def __init__(self, max_messages: int | None, timeout_ms: int | None) -> None:
        self.max_messages = max_messages
        self.timeout_ms = timeout_ms
        self.count = 0

    def remaining(self) -> int | None:
        """The most records the next poll may return (None: no limit)."""
        return None if self.max_messages is None else max(0, self.max_messages - self.count)

    def take(self, available: int) -> int:
        """How many of `available` records to print."""
        if self.max_messages is None:
            return available
        return max(0, min(available, self.max_messages - self.count))

    @property
    def done(self) -> bool:
        return self.max_messages is not None and self.count >= self.max_messages

    def poll_ms(self, idle_ms: float) -> float:
        """How long the next poll may wait, given the time since the last record."""
        if self.timeout_ms is None:
            return POLL_CHUNK_MS
        return max(0.0, min(POLL_CHUNK_MS, self.timeout_ms - idle_ms))

    def timed_out(self, idle_ms: float) -> bool:
        return self.timeout_ms is not None and idle_ms >= self.timeout_ms


async def assign_and_seek(
    consumer: Any,
    topic: str,
    partition: int | None,
    offset: str | int | None,
    from_beginning: bool,
    metadata_timeout_ms: int | None = None,
) -> None:
    """Without a group: take every partition of `topic` (or the one asked for) and seek where asked.

    A partition the topic does not have is UNKNOWN_TOPIC_OR_PARTITION at once, not an endless wait."""
    from kraftpy.client.errors import KafkaTimeoutError
    from kraftpy.protocol.types import TopicPartition

    if partition is None:
        existing = await consumer.partitions_for(topic)
    else:
        try:  # a partition the topic lacks is an error; no metadata within the bound is not (Kafka's assign)
            existing = await consumer.partitions_for(topic, timeout_ms=metadata_timeout_ms)
        except KafkaTimeoutError:
            existing = [partition]
    if partition is None:
        partitions = [TopicPartition(topic, p) for p in existing]
    elif partition not in existing:
        raise KafkaError(
            f"topic {topic!r} has no partition {partition} (it has {len(existing)})",
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
    else:
        partitions = [TopicPartition(topic, partition)]
    consumer.assign(partitions)
    if isinstance(offset, int):
        consumer.seek(partitions[0], offset)
    elif offset == "earliest" or from_beginning:
        consumer.seek_to_beginning()
    elif offset == "latest":
        consumer.seek_to_end()


async def consume_records(
    servers: list[tuple[str, int]],
    topic: str,
    *,
    group: str | None = None,
    partition: int | None,
    offset: str | int | None,
    from_beginning: bool,
    stop: Stop,
    out: TextIO,
    print_key: bool,
    print_offset: bool,
    as_json: bool,
    print_partition: bool = False,
    isolation_level: str = "read_uncommitted",
) -> int:
    """Print records until `stop` says so; returns how many were printed."""
    from kraftpy.client.shell.cluster_client import monotonic_ms
    from kraftpy.client.shell.consumer import Consumer

    reset = "earliest" if from_beginning else "latest"
    if group is not None:
        consumer = Consumer(
            servers,
            group_id=group,
            auto_offset_reset=reset,
            client_id=CONSOLE_CLIENT_ID,
            isolation_level=isolation_level,
        )
    else:
        consumer = Consumer(servers, auto_offset_reset=reset, isolation_level=isolation_level)
    done = False
    try:
        if group is not None:
            consumer.subscribe([topic])  # the group's committed offsets decide where to start, else `reset`
        else:
            await assign_and_seek(consumer, topic, partition, offset, from_beginning, stop.timeout_ms)
        last_record = monotonic_ms()
        while not stop.done:
            idle = monotonic_ms() - last_record
            if stop.timed_out(idle):
                break
            records = await consumer.poll(stop.poll_ms(idle), max_records=stop.remaining())
            for record in records[: stop.take(len(records))]:
                line = format_record(
                    record,
                    print_key=print_key,
                    print_offset=print_offset,
                    as_json=as_json,
                    print_partition=print_partition,
                )
                out.write(line)
                out.write("\n")
                stop.count += 1
            out.flush()
            if records:
                # Idle time starts once the output took the records: time blocked on a slow reader
                # is not time without records (kafka-console-consumer's timeout is per poll).
                last_record = monotonic_ms()
        done = True
    finally:
        if done and group is not None:
            await consumer.commit()  # what was printed, now, rather than at the next auto-commit
        await consumer.close()
    return stop.count


@click.command("consume")
@click.argument("topic")
@click.option("-g", "--group", help="Consume as a member of this consumer group, committing what is printed.")
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Start at the earliest offset instead of the end (with --group: where the group has no offset).",
)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("-o", "--offset", type=OffsetParam(), help="Where to start in --partition: earliest, latest or N.")
@click.option("-n", "--max-messages", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--timeout-ms", type=click.IntRange(min=0), help="Stop once no record arrived for T ms.")
@click.option("--print-key", is_flag=True, help="Print the key before the value (tab-separated).")
@click.option("--print-offset", is_flag=True, help="Print Offset:N before the record.")
@click.option("--print-partition", is_flag=True, help="Print Partition:N before the record.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only records of committed transactions, up to the last stable offset.",
)
@client_options
def consume(
    topic: str,
    group: str | None,
    from_beginning: bool,
    partition: int | None,
    offset: str | int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    print_partition: bool,
    as_json: bool,
    isolation_level: str,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Print records of TOPIC."""
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition (as in Kafka's console consumer)")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning cannot be combined")
    if group is not None and partition is not None:
        raise click.UsageError("--group and --partition cannot be combined: the group assigns the partitions")
    if group is not None and not group.strip():
        raise click.BadParameter("must not be empty", param_hint="--group")
    servers = servers_for(cluster_dir, bootstrap_servers)
    stop = Stop(max_messages, timeout_ms)
    quiet_client_logs()
    code = 0
    try:
        asyncio.run(
            consume_records(
                servers,
                topic,
                group=group,
                partition=partition,
                offset=offset,
                from_beginning=from_beginning,
                stop=stop,
                out=sys.stdout,
                print_key=print_key,
                print_offset=print_offset,
                as_json=as_json,
                isolation_level=isolation_level,
                print_partition=print_partition,
            )
        )
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        sys.exit(0)
    except KafkaError as exc:
        click.echo(f"Error: {exc}", err=True)
        code = 1
    click.echo(f"Processed a total of {stop.count} messages", err=True)
    sys.exit(code)
