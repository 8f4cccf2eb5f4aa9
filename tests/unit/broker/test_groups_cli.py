"""`kraftpy groups` and `kraftpy consume --group` without a cluster: options, JSON shapes, tables, errors."""

from __future__ import annotations

import io
from datetime import datetime

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from kraftpy.client.admin.types import ConsumerGroupDescription, MemberDescription
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from kraftpy.tools.cli import main
from kraftpy.tools.commands.consume import Stop, consume
from kraftpy.tools.commands.groups import (
    describe_json,
    explained,
    parse_datetime_ms,
    parse_topic_partitions,
    plan_json,
    render_group,
    render_plan,
    reset_spec,
)

TP = TopicPartition


def group(state: str = "Stable", members: tuple[MemberDescription, ...] = ()) -> ConsumerGroupDescription:
    return ConsumerGroupDescription("billing", state, "consumer", "range" if members else "", members)


def text(*renderables: object) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200)
    for r in renderables:
        console.print(r)
    return out.getvalue()


def cells(line: str) -> list[str]:
    """The cells of one row of a narrow (edgeless) table: its words."""
    return line.split()


# --- options ----------------------------------------------------------------------------------------------


def test_topic_scope_is_a_topic_or_topic_colon_partitions() -> None:
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:2,0, 1,2") == ("orders", (0, 1, 2))
    for bad in ("orders:", "orders:a", "orders:1,-2", ":1", "orders:1,,2"):
        with pytest.raises(click.BadParameter):
            parse_topic_partitions(bad)


def test_datetimes_are_iso_with_an_optional_zone_and_local_without_one() -> None:
    assert parse_datetime_ms("2024-05-01T12:00:00.000Z") == 1714564800000
    assert parse_datetime_ms("2024-05-01T14:00:00+02:00") == 1714564800000
    local = datetime(2024, 5, 1, 12, 0, 0).astimezone()
    assert parse_datetime_ms("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    for bad in ("yesterday", "2024-13-01T00:00:00", "1960-01-01T00:00:00Z"):
        with pytest.raises(click.BadParameter):
            parse_datetime_ms(bad)


def test_exactly_one_reset_is_accepted() -> None:
    none = dict.fromkeys(("to_earliest", "to_latest"), False) | dict.fromkeys(("to_offset", "to_datetime", "shift_by"))
    assert reset_spec({**none, "to_latest": True}).kind == "to-latest"
    assert (reset_spec({**none, "shift_by": -3}).kind, reset_spec({**none, "shift_by": -3}).value) == ("shift-by", -3)
    assert reset_spec({**none, "to_offset": 0}).value == 0  # 0 is an offset, not "not given"
    assert reset_spec({**none, "to_datetime": "1970-01-01T00:00:01Z"}).value == 1000
    with pytest.raises(click.UsageError, match="exactly one of --to-earliest"):
        reset_spec(none)
    with pytest.raises(click.UsageError, match=r"\(got 2\)"):
        reset_spec({**none, "to_earliest": True, "to_offset": 4})


def test_reset_offsets_usage_errors_exit_2_before_contacting_anyone(closed_port: str) -> None:
    runner = CliRunner()
    base = ["groups", "reset-offsets", "g", "--bootstrap-server", closed_port]
    cases = [
        (["--topic", "t"], "exactly one of"),
        (["--to-earliest"], "--topic TOPIC[:P,...]"),
        (["--topic", "t", "--all-topics", "--to-latest"], "--topic TOPIC[:P,...]"),
        (["--topic", "t:x", "--to-latest"], "partitions must be non-negative numbers"),
        (["--topic", "t", "--to-offset", "-1"], "-1 is not in the range x>=0"),
        (["--topic", "t", "--to-datetime", "noon"], "is not a date-time"),
    ]
    for extra, message in cases:
        result = runner.invoke(main, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output, (extra, result.output)


def test_list_takes_kafkas_group_states_in_any_case(closed_port: str) -> None:
    result = CliRunner().invoke(main, ["groups", "list", "--state", "running", "--bootstrap-server", closed_port])
    assert result.exit_code == 2 and "'running' is not one of 'empty', 'preparingrebalance'" in result.output
    result = CliRunner().invoke(
        main, ["groups", "list", "--state", "stable", "--bootstrap-server", closed_port, "--timeout-ms", "200"]
    )
    assert result.exit_code == 1  # accepted; no cluster there


def test_consume_group_option_errors() -> None:
    runner = CliRunner()
    result = runner.invoke(consume, ["t", "--bootstrap-server", "h:1", "--group", "g", "--partition", "0"])
    assert result.exit_code == 2 and "--group and --partition cannot be combined" in result.output
    result = runner.invoke(consume, ["t", "--bootstrap-server", "h:1", "--group", " "])
    assert result.exit_code == 2 and "must not be empty" in result.output


def test_a_poll_never_returns_more_than_will_be_printed() -> None:
    stop = Stop(max_messages=5, timeout_ms=None)
    assert stop.remaining() == 5
    stop.count = 4
    assert stop.remaining() == 1
    assert Stop(None, None).remaining() is None


def test_commands_without_a_cluster_fail_with_exit_1_and_the_error_name(closed_port: str) -> None:
    result = CliRunner().invoke(main, ["groups", "list", "--bootstrap-server", closed_port, "--timeout-ms", "300"])
    assert result.exit_code == 1
    assert "Error: REQUEST_TIMED_OUT: no metadata within 300 ms (last error: NETWORK_EXCEPTION" in result.output


# --- shapes -----------------------------------------------------------------------------------------------


def test_describe_json_has_exactly_the_documented_shape() -> None:
    members = (
        MemberDescription("m-2", None, "c2", "/127.0.0.1", (TP("t", 1),)),
        MemberDescription("m-1", "i-1", "c1", "/127.0.0.1", (TP("t", 0), TP("u", 0))),
    )
    committed = {TP("t", 0): OffsetAndMetadata(4), TP("t", 1): OffsetAndMetadata(9), TP("old", 0): OffsetAndMetadata(1)}
    log_end = {TP("t", 0): 10, TP("t", 1): 9, TP("u", 0): 3}
    shape = describe_json(group(members=members), committed, log_end)
    assert shape == {
        "group": "billing",
        "state": "Stable",
        "members": [
            {
                "member_id": "m-1",
                "client_id": "c1",
                "assignment": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 0}],
            },
            {"member_id": "m-2", "client_id": "c2", "assignment": [{"topic": "t", "partition": 1}]},
        ],
        "partitions": [
            {"topic": "old", "partition": 0, "committed_offset": 1, "log_end_offset": None, "lag": None},
            {"topic": "t", "partition": 0, "committed_offset": 4, "log_end_offset": 10, "lag": 6},
            {"topic": "t", "partition": 1, "committed_offset": 9, "log_end_offset": 9, "lag": 0},
            {"topic": "u", "partition": 0, "committed_offset": None, "log_end_offset": 3, "lag": None},
        ],
    }
    header, partitions, table = render_group(shape, group(members=members))
    assert "Stable, assignor range, 2 member(s)" in header
    out = text(partitions, table)
    rows = [cells(line) for line in out.splitlines()]
    assert ["t", "1", "9", "9", "0", "#2"] in rows  # members by number; the members table gives the id
    assert ["#2", "m-2"] in rows
    assert ["old", "0", "1", "-", "-", "-"] in rows  # no log end (topic gone), so no lag; no owner


def test_an_empty_group_says_it_has_no_active_members() -> None:
    shape = describe_json(group("Empty"), {TP("t", 0): OffsetAndMetadata(2)}, {TP("t", 0): 2})
    header, _, table = render_group(shape, group("Empty"))
    assert "Empty, 0 member(s) (no active members)" in header and table is None
    assert shape["members"] == [] and shape["partitions"][0]["lag"] == 0


def test_plan_json_and_table_show_current_and_new_offsets() -> None:
    shape = plan_json("g", {TP("t", 1): 0, TP("t", 0): 5}, {TP("t", 0): OffsetAndMetadata(7), TP("t", 1): None}, False)
    assert shape == {
        "group": "g",
        "executed": False,
        "partitions": [
            {"topic": "t", "partition": 0, "current_offset": 7, "new_offset": 5},
            {"topic": "t", "partition": 1, "current_offset": None, "new_offset": 0},
        ],
    }
    rows = [cells(line) for line in text(render_plan(shape)).splitlines()]
    assert ["g", "t", "0", "7", "5"] in rows and ["g", "t", "1", "-", "0"] in rows


def test_errors_keep_their_code_and_say_what_they_mean() -> None:
    bare = explained(KafkaError("NON_EMPTY_GROUP", ErrorCode.NON_EMPTY_GROUP), "cannot delete group 'g'")
    assert bare.code is ErrorCode.NON_EMPTY_GROUP
    assert (
        str(bare) == "NON_EMPTY_GROUP: cannot delete group 'g': the group has active members; stop its consumers first"
    )
    told = explained(KafkaError("group is loading", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "group 'g'")
    assert str(told) == "COORDINATOR_LOAD_IN_PROGRESS: group 'g': group is loading"
