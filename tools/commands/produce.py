"""`kraftpy produce TOPIC`: send each line of stdin as a record, like kafka-console-producer.

Lines are bytes without their newline; `--key-separator SEP` splits each line
at the first SEP into key and value (a line without SEP is not sent and
counts as failed). The command exits 0 only when every line was
acknowledged; otherwise it says how many were not, and why, on stderr and
exits 1. If the producer cannot take a record at all (the topic is unknown
after max_block_ms, the record is too large), the remaining lines are not
tried and count as not acknowledged; so does a line longer than 1 MiB, which is
read past in bounded pieces. The first failure that is retried is said at once
(`Warning: CODE: message`), not only after the delivery timeout.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import click

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.options import client_options, quiet_client_logs, servers_for

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
REQUEST_TIMEOUT_MS = 30_000
# The producer's default max.request.size (1 MiB): no record of a longer line can be sent.
MAX_LINE_BYTES = 1_048_576


class FirstRetry(logging.Handler):
    """Says the first retriable failure at once, on stderr (kafka-console-producer logs retries as WARN);
    the record is retried until it succeeds, --retries run out or --delivery-timeout-ms passes."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.said or not str(record.msg).startswith("retrying "):
            return
        self.said = True
        error = record.args[-1] if isinstance(record.args, tuple) and record.args else record.getMessage()
        click.echo(f"Warning: {error} (retrying until --delivery-timeout-ms)", err=True)


def say_first_retry() -> None:
    sender_log = logging.getLogger("kraftpy.client.producer.sender")  # the sender logs each retry at debug level
    sender_log.setLevel(logging.DEBUG)
    sender_log.propagate = False
    sender_log.addHandler(FirstRetry())


def read_lines(stream: BinaryIO, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """Lines of `stream` without their line ending ("\\n" or "\\r\\n"); a last line without one counts too.

    A line longer than `max_line_bytes` is read past in bounded pieces and yields None: no record
    can be larger than a produce request, and a line with no end in sight must not take the memory."""
    while raw := stream.readline(max_line_bytes + 2):  # room for the "\\r\\n"
        if raw.endswith(b"\n") or len(raw) < max_line_bytes + 2:
            line = raw[:-1] if raw.endswith(b"\n") else raw
            line = line[:-1] if line.endswith(b"\r") else line
            yield None if len(line) > max_line_bytes else line
            continue
        while (rest := stream.readline(1 << 16)) and not rest.endswith(b"\n"):
            pass  # the rest of a line too long to send, piece by piece
        yield None


def split_line(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; ValueError naming the line when the separator is missing."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ValueError(f"line {number} has no key separator {separator.decode(errors='replace')!r}")
    return key, value


def summary(total: int, failed: int, first_error: str | None) -> tuple[int, str | None]:
    """Exit code and the line for stderr (None when everything was acknowledged): `Error: CODE: message`."""
    if failed == 0:
        return 0, None
    reason = first_error or "UNKNOWN_SERVER_ERROR: no reason given"
    return 1, f"Error: {reason} ({failed} of {total} record(s) were not acknowledged)"


async def produce_lines(
    servers: list[tuple[str, int]],
    topic: str,
    lines: Iterable[bytes | None],
    *,
    key_separator: bytes | None,
    partition: int | None,
    config: dict[str, object],
) -> tuple[int, int, str | None]:
    """Send every line (None: a line too long to send); returns (total, failed, first error).

    Each record's outcome is counted as its future settles, not by keeping the future: memory
    follows the records in flight, not the length of the input."""
    from kraftpy.client.shell.producer import Producer  # the client is imported only when the command runs

    total = failed = unsettled = 0
    first_error: str | None = None

    def fail(error: BaseException) -> None:
        nonlocal failed, first_error
        failed += 1
        first_error = first_error or (str(error) if isinstance(error, KafkaError) else repr(error))

    def settled(future: asyncio.Future) -> None:
        nonlocal unsettled
        unsettled -= 1
        if future.cancelled():
            fail(KafkaError("not acknowledged before the producer closed"))
        elif (error := future.exception()) is not None:  # retrieved, so asyncio does not log it as lost
            fail(error)

    producer = Producer(servers, **config)
    try:
        stopped = False
        for number, line in enumerate(lines, 1):
            total += 1
            if stopped:
                failed += 1
                continue
            if line is None:
                fail(KafkaError(f"line {number} is longer than {MAX_LINE_BYTES} bytes", ErrorCode.MESSAGE_TOO_LARGE))
                stopped = True  # as for any record the producer cannot take
                continue
            try:
                key, value = split_line(line, key_separator, number)
            except ValueError as exc:
                fail(KafkaError(str(exc), ErrorCode.INVALID_RECORD))
                continue
            try:
                future = await producer.send(topic, value, key=key, partition=partition)
                future.add_done_callback(settled)
                unsettled += 1
            except KafkaError as exc:
                fail(exc)
                stopped = True  # the producer cannot take records now; do not wait max_block_ms per line
        await producer.flush()
    finally:
        await producer.close()
    await asyncio.sleep(0)  # every future is settled by now; their done callbacks run in this turn
    if unsettled:  # close() settles every record; this is the guard if one never was
        failed += unsettled
        first_error = first_error or "not acknowledged before the producer closed"
    return total, failed, first_error


@click.command("produce")
@click.argument("topic")
@click.option("--key-separator", metavar="SEP", help="Split each line at the first SEP into key and value.")
@click.option(
    "--acks", type=click.Choice(["all", "-1", "0", "1"]), default="all", show_default=True, help="Acknowledgements."
)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option("--compression", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option(
    "--max-block-ms",
    type=click.IntRange(min=0),
    default=60_000,
    show_default=True,
    help="How long to wait for metadata or buffer memory before giving up.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=1),
    help="Retries of a failed batch before its error is reported [default: until --delivery-timeout-ms].",
)
@click.option(
    "--delivery-timeout-ms",
    type=click.IntRange(min=1),
    default=120_000,
    show_default=True,
    help="Bound on each record's delivery, retries included.",
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
    retries: int | None,
    delivery_timeout_ms: int,
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
        "delivery_timeout_ms": delivery_timeout_ms,
    }
    if retries is not None:
        config["retries"] = retries
    if delivery_timeout_ms < linger_ms + REQUEST_TIMEOUT_MS:
        # Kafka's rule (delivery.timeout.ms >= linger.ms + request.timeout.ms): shorten the request timeout.
        config["request_timeout_ms"] = max(1, delivery_timeout_ms - linger_ms)
    quiet_client_logs()
    say_first_retry()
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
        click.echo(message, err=True)
    sys.exit(code)
