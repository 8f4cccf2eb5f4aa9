"""The HTML view of benchmarks/groups_bench.py: the summary table and, per assignor, who consumed what when.

One SVG per assignor (its last trial): a row per partition, a tick per poll that delivered records of it,
coloured by the consumer that polled it, with the fourth consumer's subscribe and the moment the group was
balanced again marked. An eager rebalance shows as a gap across every row; a cooperative one only in the
rows of the partitions that move. Self-contained: no scripts, no external files.
"""

from __future__ import annotations

import html
from typing import Any

COLOURS = {"c0": "#1f77b4", "c1": "#ff7f0e", "c2": "#2ca02c", "c3": "#d62728"}
ROW_PX, LEFT_PX, WIDTH_PX, TOP_PX = 16, 90, 900, 24
COLUMNS = (
    ("rebalance_s", "rebalance s", "{:.2f}"),
    ("moved_partitions", "moved", "{:.0f}"),
    ("doubly_owned_partitions", "owned twice", "{:.0f}"),
    ("rate_before", "group rec/s before", "{:.0f}"),
    ("rate_during", "during", "{:.0f}"),
    ("untouched_rate_before", "untouched rec/s before", "{:.0f}"),
    ("untouched_rate_during", "during", "{:.0f}"),
    ("group_stall_s", "group stall s", "{:.2f}"),
    ("untouched_stall_s", "untouched stall s", "{:.2f}"),
)


def timeline_svg(timeline: dict[str, Any], partitions: int) -> str:
    deliveries = timeline["deliveries"]
    start = min([t for t, _, _ in deliveries] + [-1.0])
    end = max([t for t, _, _ in deliveries] + [timeline["balanced"] + 0.5])
    scale = (WIDTH_PX - LEFT_PX - 10) / (end - start)

    def x(t: float) -> float:
        return LEFT_PX + (t - start) * scale

    rows_end = TOP_PX + partitions * ROW_PX
    height = rows_end + 48  # the time axis, then the legend
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" font-size="11">']
    for p in range(partitions):
        y = TOP_PX + p * ROW_PX
        parts.append(f'<text x="4" y="{y + 11}">partition {p}</text>')
        parts.append(f'<line x1="{LEFT_PX}" x2="{WIDTH_PX - 10}" y1="{y + 14}" y2="{y + 14}" stroke="#eee"/>')
    for t, p, member in deliveries:
        colour = COLOURS.get(member, "#555")
        parts.append(f'<rect x="{x(t):.1f}" y="{TOP_PX + p * ROW_PX + 2}" width="1.5" height="11" fill="{colour}"/>')
    for label, t in (("4th consumer subscribes", timeline["joined"]), ("balanced", timeline["balanced"])):
        parts.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{TOP_PX - 6}" y2="{rows_end + 4}" stroke="black" '
            f'stroke-dasharray="4 3"/><text x="{x(t) + 3:.1f}" y="{TOP_PX - 9}">{html.escape(label)}</text>'
        )
    axis_y = rows_end + 18
    for second in range(int(start), int(end) + 1):
        parts.append(f'<text x="{x(second):.1f}" y="{axis_y}" text-anchor="middle">{second} s</text>')
    legend_y = height - 14
    for i, (member, colour) in enumerate(COLOURS.items()):
        parts.append(f'<rect x="{LEFT_PX + i * 60}" y="{legend_y}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{LEFT_PX + i * 60 + 14}" y="{legend_y + 9}">{member}</text>')
    parts.append("</svg>")
    return "".join(parts)


def report_html(results: dict[str, Any], partitions: int) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kraftpy consumer-group benchmark</title>",
        "<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}</style></head><body>",
        f"<h1>A 4th consumer joins 3 over {partitions} partitions</h1>",
        "<table><tr><th>assignor</th>" + "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS) + "</tr>",
    ]
    for strategy, row in results.get("rebalance", {}).items():
        cells = "".join(f"<td>{fmt.format(row[key])}</td>" for key, _, fmt in COLUMNS)
        out.append(f"<tr><th>{html.escape(strategy)}</th>{cells}</tr>")
    out.append("</table><p>Medians over the trials. Below, each assignor's last trial: a tick per poll that ")
    out.append("delivered records of a partition, coloured by the consumer (c3 is the one that joins).</p>")
    for strategy, timeline in results.get("timelines", {}).items():
        out.append(f"<h2>{html.escape(strategy)}</h2>{timeline_svg(timeline, partitions)}")
    if "latency" in results:
        r = results["latency"]
        out.append(
            f"<h2>End-to-end latency</h2><p>{r['records']} records at {r['rate']:.0f}/s: "
            f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms.</p>"
        )
    out.append("</body></html>")
    return "".join(out)
