"""`kraftpy produce TOPIC`: send each line of stdin as a record, like kafka-console-producer.

Lines are bytes without their newline; `--key-separator SEP` splits each line
at the first SEP into key and value (a line without SEP is not sent and
counts as failed). The command exits 0 only when every line was
acknowledged; otherwise it says how many were not, and why, on stderr and
exits 1. If the producer cannot take a record at all (the topic is unknown
after max_block_ms, the record is too large), the remaining lines are not
tried and count as not acknowledged.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import click

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.options import client_options, servers_for

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """Lines of `stream` without their line ending ("\\n" or "\\r\\n"); a last line without one counts too."""
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        yield line[:-1] if line.endswith(b"\r") else line


def split_line(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; ValueError naming the line when the separator is missing."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"line {number} has no key separator {separator.decode(errors='replace')!r}")
    return key, value


def summary(total: int, failed: int, first_error: str | None) -> tuple[int, str | None]:
    """Exit code and the message for stderr (None when everything was acknowledged)."""
    if failed == 0:
        return 0, None
    reason = f": {first_error}" if first_error else ""
    return 1, f"{failed} of {total} record(s) were not acknowledged{reason}"


async def produce_lines(
    servers: list[tuple[str, int]],
    topic: str,
    lines: Iterable[bytes],
    *,
    key_separator: bytes | None,
    partition: int | None,
    config: dict[str, object],
) -> tuple[int, int, str | None]:
    """Send every line; returns (total, failed, first error)."""
    from kraftpy.client.producer import Producer  # the client is imported only when the command runs

    total = failed = 0
    first_error: str | None = None
    futures: list[asyncio.Future] = []
    producer = Producer(servers, **config)
    try:
        stopped = False
        for number, line in enumerate(lines, 1):
            total += 1
            if stopped:
                failed += 1
                continue
            try:
                key, value = split_line(line, key_separator, number)
            except ValueError as exc:
                failed += 1
                first_error = first_error or str(exc)
                continue
            try:
                futures.append(await producer.send(topic, value, key=key, partition=partition))
            except KafkaError as exc:
                failed += 1
                first_error = first_error or str(exc)
                stopped = True  # the producer cannot take records now; do not wait max_block_ms per line
        await producer.flush()
    finally:
        await producer.close()
    for future in futures:
        if not future.done() or future.cancelled():
            error: BaseException | None = KafkaError("not acknowledged before the producer closed")
        else:
            error = future.exception()
        if error is not None:
            failed += 1
            first_error = first_error or str(error)
    return total, failed, first_error


@click.command("produce")
@click.argument("topic")
@click.option("--key-separator", metavar="SEP", help="Split each line at the first SEP into key and value.")
@click.option(
    "--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True, help="Acknowledgements."
)
@click.option("--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option("--compression", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option(
    "--max-block-ms",
    type=click.IntRange(min=0),
    default=60_000,
    show_default=True,
    help="How long to wait for metadata or buffer memory before giving up.",
)
@client_options
def produce(
    topic: str,
    key_separator: str | None,
    acks: str,
    partition: int | None,
    compression: str,
    linger_ms: int,
    max_block_ms: int,
    cluster_dir: Path,
    bootstrap_servers: list[tuple[str, int]] | None,
) -> None:
    """Send each line of stdin to TOPIC; exit 0 only when every line was acknowledged."""
    servers = servers_for(cluster_dir, bootstrap_servers)
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    config: dict[str, object] = {
        "acks": acks,
        "compression_type": compression,
        "linger_ms": linger_ms,
        "max_block_ms": max_block_ms,
    }
    total, failed, first_error = asyncio.run(
        produce_lines(
            servers,
            topic,
            read_lines(sys.stdin.buffer),
            key_separator=key_separator.encode() if key_separator is not None else None,
            partition=partition,
            config=config,
        )
    )
    code, message = summary(total, failed, first_error)
    if message:
        click.echo(f"produce: {message}", err=True)
    sys.exit(code)
