"""`kraftpy produce` / `kraftpy consume`: input parsing, output formats, exit codes without a broker."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner

from kraftpy.client.config import PRODUCER_OPTIONS
from kraftpy.client.types import ConsumerRecord
from kraftpy.tools.commands.consume import Stop, consume, format_record
from kraftpy.tools.commands.produce import MAX_LINE_BYTES, produce, read_lines, split_line, summary


def test_lines_keep_their_bytes_and_lose_only_the_line_ending() -> None:
    data = io.BytesIO(b"a b\r\n\n\xff\xfe tail\nlast")
    assert list(read_lines(data)) == [b"a b", b"", b"\xff\xfe tail", b"last"]


class Reads(io.BytesIO):
    """A stream that remembers the most bytes one read handed out."""

    largest = 0

    def readline(self, size: int | None = -1) -> bytes:
        out = super().readline(size)
        self.largest = max(self.largest, len(out))
        return out

    def __iter__(self):  # a line per iteration, whatever its length: what a bound must not use
        while line := self.readline():
            yield line


def test_a_line_too_long_to_send_is_read_past_in_bounded_pieces() -> None:
    """A 10 MiB line (or one with no end, from a pipe) was read whole before the producer refused it."""
    data = Reads(b"12345\n123456\n1234\r\n" + b"x" * (10 << 20) + b"\nok\n" + b"y" * 7)
    assert list(read_lines(data, 5)) == [b"12345", None, b"1234", None, b"ok", None]
    assert data.largest <= 1 << 16


def test_the_line_bound_is_the_producers_default_max_request_size() -> None:
    """produce.py spells the bound out so that the CLI starts without importing the client."""
    assert PRODUCER_OPTIONS["max_request_size"].default == MAX_LINE_BYTES


def test_key_separator_splits_at_the_first_occurrence() -> None:
    assert split_line(b"k:v:w", b":", 1) == (b"k", b"v:w")
    assert split_line(b"just value", None, 1) == (None, b"just value")
    with pytest.raises(ValueError, match="line 7 has no key separator ':'"):
        split_line(b"novalue", b":", 7)


def test_summary_exit_codes() -> None:
    assert summary(3, 0, None) == (0, None)
    assert summary(3, 2, "NOT_ENOUGH_REPLICAS: x") == (
        1,
        "Error: NOT_ENOUGH_REPLICAS: x (2 of 3 record(s) were not acknowledged)",
    )


def test_produce_exits_non_zero_saying_how_many_lines_were_not_acknowledged(closed_port: str) -> None:
    result = CliRunner().invoke(
        produce, ["events", "--bootstrap-server", closed_port, "--max-block-ms", "200"], input=b"one\ntwo\nthree\n"
    )
    assert result.exit_code == 1
    assert "3 of 3 record(s) were not acknowledged" in result.output
    assert "Error: NETWORK_EXCEPTION: topic 'events' not present in metadata after 200 ms: " in result.output
    assert f"no server answered at {closed_port}" in result.output


def test_produce_of_nothing_succeeds(closed_port: str) -> None:
    result = CliRunner().invoke(produce, ["events", "--bootstrap-server", closed_port], input=b"")
    assert result.exit_code == 0, result.output


def test_produce_without_a_cluster_says_where_it_looked(tmp_path) -> None:
    result = CliRunner().invoke(produce, ["events", "--dir", str(tmp_path)], input=b"x\n")
    assert result.exit_code != 0 and "no cluster in" in result.output


def record(**kwargs) -> ConsumerRecord:
    fields = {"topic": "t", "partition": 1, "offset": 42, "timestamp": 1700, "key": b"k", "value": b"v\xff"}
    fields.update(kwargs)
    return ConsumerRecord(leader_epoch=3, **fields)


def test_plain_output_follows_kafkas_formatter() -> None:
    assert format_record(record(), print_key=False, print_offset=False, as_json=False) == "v\ufffd"
    assert format_record(record(), print_key=True, print_offset=True, as_json=False) == "Offset:42\tk\tv\ufffd"
    assert (
        format_record(record(key=None, value=None), print_key=True, print_offset=False, as_json=False) == "null\tnull"
    )


def test_json_output_has_every_field() -> None:
    line = format_record(record(value=b"hello"), print_key=False, print_offset=False, as_json=True)
    assert json.loads(line) == {
        "topic": "t",
        "partition": 1,
        "offset": 42,
        "key": "k",
        "value": "hello",
        "timestamp": 1700,
        "leader_epoch": 3,
    }


def test_stop_rules() -> None:
    stop = Stop(max_messages=3, timeout_ms=None)
    assert stop.take(5) == 3
    stop.count = 3
    assert stop.done and stop.take(5) == 0
    idle = Stop(max_messages=None, timeout_ms=500)
    assert idle.poll_ms(200) == 300 and not idle.timed_out(499) and idle.timed_out(500)
    assert Stop(None, None).poll_ms(10_000) == 1_000


def test_consume_option_errors() -> None:
    runner = CliRunner()
    result = runner.invoke(consume, ["t", "--bootstrap-server", "h:1", "--offset", "soon", "--partition", "0"])
    assert result.exit_code == 2 and "'soon' is not earliest, latest or a non-negative offset" in result.output
    result = runner.invoke(consume, ["t", "--bootstrap-server", "h:1", "--offset", "5"])
    assert result.exit_code == 2 and "--offset needs --partition" in result.output


def test_consume_stops_after_the_idle_timeout(closed_port: str) -> None:
    result = CliRunner().invoke(
        consume, ["t", "--bootstrap-server", closed_port, "--partition", "0", "--offset", "3", "--timeout-ms", "150"]
    )
    assert result.exit_code == 0, result.output
    assert "Processed a total of 0 messages" in result.output
