"""`kraftpy perf`: percentiles, settings, process shares and the report shapes (the runs themselves are in docs)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kraftpy.tools.cli import main
from kraftpy.tools.commands.perf import (
    MAX_LATENCY_SAMPLES,
    ConsumeResult,
    LatencyStats,
    ProduceResult,
    _split,
    consume_report,
    parse_props,
    percentile,
    produce_report,
    produce_window_line,
)


def stats(*latencies_ms: float, expected: int | None = None) -> LatencyStats:
    out = LatencyStats(len(latencies_ms) if expected is None else expected)
    out.recent.extend(latencies_ms)
    return out


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
    a = ProduceResult(records=3, bytes=300, start=10.0, end=11.0, latencies=stats(1.0, 2.0, 3.0))
    b = ProduceResult(records=1, bytes=100, start=10.5, end=12.0, latencies=stats(9.0), errors=1, first_error="x")
    report = produce_report([a, b], 2)
    assert report["records"] == 4 and report["records_per_s"] == 2.0 and report["mb_per_s"] == 0.0
    assert report["latency_ms"] == {"p50": 2.0, "p95": 9.0, "p99": 9.0, "max": 9.0}
    assert report["avg_latency_ms"] == 3.75
    assert (report["errors"], report["first_error"], report["processes"]) == (1, "x", 2)
    consumed = consume_report([ConsumeResult(records=500, bytes=5_000_000, start=0.0, end=2.0)], 1)
    assert (consumed["records_per_s"], consumed["mb_per_s"]) == (250.0, 2.5)


def test_a_produce_result_repr_leaves_out_its_latencies() -> None:
    """asyncio.run formats its main task's result (Python 3.11, restoring the SIGINT handler): a repr
    with a float per record cost 0.4 s at the end of every 300,000-record `perf produce`."""
    result = ProduceResult(records=300_000, latencies=stats(*[1.25] * 300_000))
    result.latencies.fold()
    assert len(repr(result)) < 200 and "records=300000" in repr(result)


def test_latencies_of_a_long_run_take_bounded_memory_with_exact_count_mean_and_max() -> None:
    """A billion-record run kept a float per record (tens of GB); now at most about
    MAX_LATENCY_SAMPLES are kept, every stride-th record, as kafka-producer-perf-test's Stats."""
    expected = 20 * MAX_LATENCY_SAMPLES
    latencies = LatencyStats(expected)
    for chunk in range(expected // 100_000):  # folded as perf produce folds: in chunks, any size
        latencies.recent.extend(float((chunk * 100_000 + i) % 1000) for i in range(100_000))
        latencies.fold()
    assert latencies.count == expected and latencies.max_ms == 999.0
    assert latencies.total_ms / latencies.count == 499.5
    assert len(latencies.sample) == MAX_LATENCY_SAMPLES and not latencies.recent
    sample = sorted(latencies.sample)
    # every 20th of a repeating 0..999: 0, 20, 40, ... so the percentiles land within one stride
    assert abs(percentile(sample, 0.5) - 499) <= 20 and abs(percentile(sample, 0.99) - 989) <= 20


def test_the_sample_takes_every_stride_th_record_across_folds() -> None:
    latencies = LatencyStats(3 * MAX_LATENCY_SAMPLES)  # stride 3
    for part in ([0.0, 1.0], [2.0, 3.0, 4.0, 5.0], [6.0]):
        latencies.recent.extend(part)
        latencies.fold()
    assert latencies.sample == [0.0, 3.0, 6.0]


def test_each_progress_line_covers_the_records_since_the_last() -> None:
    latencies = stats(10.0, 30.0)
    assert produce_window_line(latencies, 100, 2.0) == (
        "2 records sent, 1.0 records/sec (0.00 MB/sec), 20.0 ms avg latency, 30.0 ms max latency."
    )
    latencies.recent.append(5.0)
    assert produce_window_line(latencies, 100, 1.0).startswith("1 records sent, 1.0 records/sec")
    assert produce_window_line(latencies, 100, 1.0).startswith("0 records sent, 0.0 records/sec")
    assert latencies.count == 3 and latencies.max_ms == 30.0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--record-size", "104857601", "0<=x<=104857600"),  # os.urandom would take the memory first
        ("--throughput", "nan", "nan is not a rate"),
        ("--throughput", "inf", "inf is not a rate"),
    ],
)
def test_perf_produce_refuses_flags_it_cannot_run_with(flag: str, value: str, message: str) -> None:
    args = ["perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "10", "--bootstrap-server"]
    args += ["127.0.0.1:1", flag, value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in result.output, result.output
