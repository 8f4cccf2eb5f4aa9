"""`kraftpy perf`: percentiles, settings, process shares and the report shapes (the runs themselves are in docs)."""

from __future__ import annotations

import click
import pytest

from kraftpy.tools.commands.perf import (
    ConsumeResult,
    ProduceResult,
    _split,
    consume_report,
    parse_props,
    percentile,
    produce_report,
)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, f) for f in (0.5, 0.95, 0.99, 1.0)] == [50.0, 95.0, 99.0, 100.0]
    assert percentile([], 0.5) == 0.0 and percentile([7.0], 0.99) == 7.0


def test_props_and_shares() -> None:
    assert parse_props(("linger.ms=10", "enable_idempotence=false", "compression_type=lz4")) == {
        "linger_ms": 10,
        "enable_idempotence": False,
        "compression_type": "lz4",
    }
    with pytest.raises(click.BadParameter):
        parse_props(("novalue",))
    assert _split(10, 3) == [4, 3, 3] and sum(_split(7, 7)) == 7


def test_reports_have_the_documented_json_shape() -> None:
    a = ProduceResult(records=3, bytes=300, start=10.0, end=11.0, latencies_ms=[1.0, 2.0, 3.0])
    b = ProduceResult(records=1, bytes=100, start=10.5, end=12.0, latencies_ms=[9.0], errors=1, first_error="x")
    report = produce_report([a, b], 2)
    assert report["records"] == 4 and report["records_per_s"] == 2.0 and report["mb_per_s"] == 0.0
    assert report["latency_ms"] == {"p50": 2.0, "p95": 9.0, "p99": 9.0, "max": 9.0}
    assert (report["errors"], report["first_error"], report["processes"]) == (1, "x", 2)
    consumed = consume_report([ConsumeResult(records=500, bytes=5_000_000, start=0.0, end=2.0)], 1)
    assert (consumed["records_per_s"], consumed["mb_per_s"]) == (250.0, 2.5)


def test_a_produce_result_repr_leaves_out_its_latencies() -> None:
    """asyncio.run formats its main task's result (Python 3.11, restoring the SIGINT handler): a repr
    with a float per record cost 0.4 s at the end of every 300,000-record `perf produce`."""
    result = ProduceResult(records=300_000, latencies_ms=[1.25] * 300_000)
    assert len(repr(result)) < 200 and "records=300000" in repr(result)
