"""The HTML view of benchmarks/kafka_clients_bench.py: the summary table and one bar chart per measure.

Each chart puts kraftpy driven by librdkafka, kraftpy's own client and the
NATS JetStream anchor (when the run has it) side by side, every run a bar,
with the issue's target as a line. Self-contained: no scripts, no external files.

    python benchmarks/kafka_clients_report.py bench-out/kafka_clients.json --html bench-out/kafka_clients.html
"""

from __future__ import annotations

import argparse
import html
import json
import statistics
from pathlib import Path
from typing import Any

COLOURS = {
    "kraftpy, librdkafka": "#1f77b4",
    "kraftpy, librdkafka, after 1st batch": "#6baed6",
    "kraftpy, kcat, after 1st batch": "#08519c",
    "kraftpy, own client": "#9ecae1",
    "kraftpy, own client, defaults": "#c6dbef",
    "kraftpy, own client, 256 KiB": "#9ecae1",
    "NATS JetStream, Go": "#ff7f0e",
}
WIDTH_PX, BAR_PX, GAP_PX, LEFT_PX, TOP_PX = 640, 22, 4, 170, 10


def _runs(result: dict[str, Any], key: str, field: str) -> list[float]:
    return [r[key][field] for r in result["runs"] if key in r and field in r[key]]


def _nats(result: dict[str, Any], key: str, field: str) -> list[float]:
    nats = result.get("nats") or {}
    return [run[key][field] for run in nats.get("runs", []) if key in run and field in run[key]]


def measures(result: dict[str, Any]) -> list[tuple[str, str, float, dict[str, list[float]]]]:
    """(title, unit, target, {series: values}) for each chart."""
    return [
        ("produce 100 B, acks=all", "records/s", 200_000, {
            "kraftpy, librdkafka": _runs(result, "librdkafka_produce_100B", "records_s"),
            "kraftpy, own client, defaults": _runs(result, "kraftpy_produce_100B_default", "records_per_s"),
            "kraftpy, own client, 256 KiB": _runs(result, "kraftpy_produce_100B", "records_per_s"),
            "NATS JetStream, Go": _nats(result, "pub_100B", "msgs_s"),
        }),
        ("produce 1 KiB, acks=all", "MB/s", 100, {
            "kraftpy, librdkafka": _runs(result, "librdkafka_produce_1KiB", "MB_s"),
            "NATS JetStream, Go": _nats(result, "pub_1KiB", "MB_s"),
        }),
        ("consume 100 B", "records/s", 500_000, {
            "kraftpy, librdkafka": _runs(result, "librdkafka_consume_100B", "records_s"),
            "kraftpy, librdkafka, after 1st batch": _runs(result, "librdkafka_consume_100B", "records_s_after_first"),
            "kraftpy, kcat, after 1st batch": _runs(result, "kcat_consume_100B", "records_s_after_first"),
            "kraftpy, own client": _runs(result, "kraftpy_consume_100B", "records_per_s"),
            "NATS JetStream, Go": _nats(result, "consume_100B", "msgs_s"),
        }),
    ]  # fmt: skip


def bar_chart(unit: str, target: float, series: dict[str, list[float]]) -> str:
    bars = [(name, v) for name, values in series.items() for v in values]
    top = max([target, *(v for _, v in bars)]) * 1.05
    height = TOP_PX * 2 + len(bars) * (BAR_PX + GAP_PX) + 14

    def x(v: float) -> float:
        return LEFT_PX + (WIDTH_PX - LEFT_PX - 60) * v / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" font-size="11">']
    y = TOP_PX
    for name, v in bars:
        colour = COLOURS.get(name, "#999")
        parts.append(f'<text x="4" y="{y + 15}">{html.escape(name)}</text>')
        parts.append(f'<rect x="{LEFT_PX}" y="{y}" width="{x(v) - LEFT_PX:.1f}" height="{BAR_PX}" fill="{colour}"/>')
        parts.append(f'<text x="{x(v) + 4:.1f}" y="{y + 15}">{v:,.0f}</text>')
        y += BAR_PX + GAP_PX
    tx = x(target)
    dash = 'stroke="#d62728" stroke-dasharray="4 3"'
    parts.append(f'<line x1="{tx:.1f}" y1="{TOP_PX - 6}" x2="{tx:.1f}" y2="{y}" {dash}/>')
    parts.append(f'<text x="{tx + 3:.1f}" y="{y + 12}" fill="#d62728">target {target:,.0f} {html.escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _cpu(paced: dict[str, Any]) -> str:
    """The brokers' CPU over a paced run, when the bench measured it."""
    if "broker_cores" not in paced:
        return ""
    cores, per_record = paced["broker_cores"], paced["broker_cpu_us_per_record"]
    return f"; the three brokers used {cores:.2f} cores, {per_record:.0f} µs of CPU per record"


def report_html(result: dict[str, Any]) -> str:
    out = [
        "<!doctype html><meta charset='utf-8'><title>kraftpy with Kafka clients</title>",
        "<style>body{font-family:sans-serif;max-width:760px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style>",
        "<h1>kraftpy with Kafka clients, beside NATS JetStream</h1>",
        f"<p>Started {html.escape(result['started'])}; load average {result['load1_start']:.2f} at the start, "
        f"{result['load1_end']:.2f} at the end. 3 local nodes, 6 partitions, RF 3, min.insync.replicas=2, "
        "acks=all (benchmarks/kafka_clients_bench.py).</p>",
        "<table><tr><th>measure</th><th>series</th><th>median</th><th>min</th><th>max</th><th>target</th></tr>",
    ]
    charts = []
    for title, unit, target, series in measures(result):
        for name, values in series.items():
            if values:
                out.append(
                    f"<tr><td>{html.escape(title)}</td><td>{html.escape(name)}</td>"
                    f"<td>{statistics.median(values):,.1f}</td><td>{min(values):,.1f}</td>"
                    f"<td>{max(values):,.1f}</td><td>{target:,} {html.escape(unit)}</td></tr>"
                )
        charts.append(f"<h2>{html.escape(title)} ({html.escape(unit)})</h2>{bar_chart(unit, target, series)}")
    out.append("</table>")
    consumes = [r.get("librdkafka_consume_100B", {}) for r in result["runs"]]
    split = [c for c in consumes if "client_cores" in c]
    if split:
        brokers = statistics.median(c["broker_cores"] for c in split)
        client = statistics.median(c["client_cores"] for c in split)
        out.append(
            f"<p>While confluent-kafka consumed, the three brokers used {brokers:.2f} cores and the client "
            f"{client:.2f} (medians); confluent-kafka builds a Python object per record, and kcat "
            "(librdkafka in C) reads the same records.</p>"
        )
    paced = result.get("paced_100B")
    if paced:
        out.append(
            f"<p>Paced 100 B at {paced['target_rate']:,.0f}/s (half the median peak): got {paced['records_s']:,.0f}/s, "
            f"p50 {paced['p50_ms']:.1f} ms, p99 {paced['p99_ms']:.1f} ms (target p99 &le; 15 ms){_cpu(paced)}.</p>"
        )
    for step in result.get("paced_ladder", []):
        out.append(
            f"<p>Paced 100 B at {step['target_rate']:,.0f}/s: got {step['records_s']:,.0f}/s, "
            f"p50 {step['p50_ms']:.1f} ms, p99 {step['p99_ms']:.1f} ms{_cpu(step)}.</p>"
        )
    nats_paced = (result.get("nats") or {}).get("paced_100B")
    if nats_paced:
        lat = nats_paced["ack_latency"]
        out.append(
            f"<p>NATS paced 100 B at {nats_paced['target_rate']:,.0f}/s: p50 {lat['p50_ms']:.1f} ms, "
            f"p99 {lat['p99_ms']:.1f} ms.</p>"
        )
    out.extend(charts)
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path, help="the JSON kafka_clients_bench.py wrote (--out)")
    ap.add_argument("--html", type=Path, required=True)
    args = ap.parse_args()
    args.html.write_text(report_html(json.loads(args.result.read_text())))
    print(f"wrote {args.html}")


if __name__ == "__main__":
    main()
