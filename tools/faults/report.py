"""The one HTML report of a fault run: the checker's page (tools/checker/html_report.py) with the run around it.

Above the checker's timeline of operations (where each anomaly highlights its operations): the seed,
the replay command, the faults done and the sends, then Jepsen's two graphs — the latency of every send
and the throughput per second — under shaded bands for each fault, from its start to its end in the
history. Below: the audit's findings. `fault_timeline` and `plots_svg` are pure; `write_report` reads
the run's files and writes report.html.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

NS_PER_S = 1_000_000_000
WIDTH, PLOT_H, MARGIN_L, MARGIN_B = 900, 170, 56, 22
COLOURS = {"ok": "#2e7d4f", "info": "#e08a00", "fail": "#c0392b"}
LANE_H = 6  # the height of a fault's strip at the top of a plot
FAULT_COLOURS = ("#8e44ad", "#2980b9", "#c0392b", "#16a085", "#d35400", "#7f8c8d")


def fault_timeline(events: list[dict[str, Any]]) -> dict[str, Any]:
    """From history events: fault spans, send latencies and per-second completions, in seconds from the start."""
    timed = [e for e in events if "time" in e]
    t0 = min((e["time"] for e in timed), default=0)
    spans: list[dict[str, Any]] = []
    open_at: dict[tuple[str, Any], dict[str, Any]] = {}
    invoked: dict[Any, int] = {}
    latencies: list[tuple[float, float, str]] = []  # (completion s, latency ms, type)
    per_second: Counter[tuple[int, str]] = Counter()
    for e in timed:
        at_s = (e["time"] - t0) / NS_PER_S
        if e["process"] == "nemesis":
            name, _, phase = e["f"].rpartition("-")
            value = e.get("value")
            # overlapping faults of one nemesis pair up by their id (an overlapping schedule's events have one)
            key = (name, value.get("fault") if isinstance(value, dict) else None)
            if phase == "start":
                open_at[key] = {"nemesis": name, "start": at_s, "end": None, "value": value}
            elif phase == "end" and key in open_at:
                span = open_at.pop(key)
                span["end"] = at_s
                spans.append(span)
            continue
        if e["f"] not in ("send", "txn"):  # the writes: queue's sends, or the txn workload's transactions
            continue
        if e["type"] == "invoke":
            invoked[e["process"]] = e["time"]
        elif e["process"] in invoked:
            latencies.append((at_s, (e["time"] - invoked.pop(e["process"])) / 1e6, e["type"]))
            per_second[(int(at_s), e["type"])] += 1
    end_s = max((e["time"] - t0) / NS_PER_S for e in timed) if timed else 1.0
    spans += [{**s, "end": end_s} for s in open_at.values()]  # a fault the history never saw end
    return {"end_s": max(end_s, 1e-3), "spans": spans, "latencies": latencies, "per_second": per_second}


def _x(at_s: float, end_s: float) -> float:
    return MARGIN_L + (WIDTH - MARGIN_L - 10) * at_s / end_s


def lanes(spans: list[dict[str, Any]]) -> list[int]:
    """Per span, a lane such that spans on at the same time have different lanes (overlaps stack up)."""
    lane_end: list[float] = []
    found = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: spans[i]["start"]):
        free = [k for k, e in enumerate(lane_end) if e <= spans[i]["start"]]
        k = free[0] if free else len(lane_end)
        if k == len(lane_end):
            lane_end.append(0.0)
        lane_end[k] = spans[i]["end"]
        found[i] = k
    return found


def _bands(spans: list[dict[str, Any]], end_s: float, names: list[str]) -> str:
    """A shaded band per fault over the whole plot (overlaps shade deeper), and a solid strip per fault
    at the top, one lane per fault on at once, so overlapping faults show one above the other."""
    out = []
    for span, lane in zip(spans, lanes(spans), strict=True):
        colour = FAULT_COLOURS[names.index(span["nemesis"]) % len(FAULT_COLOURS)]
        x0, x1 = _x(span["start"], end_s), _x(span["end"], end_s)
        tip = html.escape(f"{span['nemesis']} {span['start']:.1f}-{span['end']:.1f} s: {json.dumps(span['value'])}")
        width = max(x1 - x0, 1)
        out.append(
            f'<rect x="{x0:.1f}" y="0" width="{width:.1f}" height="{PLOT_H}" fill="{colour}" '
            f'fill-opacity="0.15"><title>{tip}</title></rect>'
            f'<rect class="lane" x="{x0:.1f}" y="{lane * LANE_H}" width="{width:.1f}" height="{LANE_H - 1}" '
            f'fill="{colour}"><title>{tip}</title></rect>'
        )
    return "".join(out)


def _axes(end_s: float, y_label: str, y_ticks: list[tuple[float, str]]) -> str:
    parts = [f'<line x1="{MARGIN_L}" y1="{PLOT_H}" x2="{WIDTH - 10}" y2="{PLOT_H}" stroke="#889"/>']
    step = max(1, round(end_s / 10))
    for t in range(0, int(end_s) + 1, step):
        x = _x(t, end_s)
        parts.append(f'<text x="{x:.1f}" y="{PLOT_H + 14}" text-anchor="middle">{t}s</text>')
    for y, label in y_ticks:
        parts.append(f'<text x="{MARGIN_L - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        parts.append(f'<line x1="{MARGIN_L}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" stroke="#eee"/>')
    parts.append(f'<text x="4" y="12">{html.escape(y_label)}</text>')
    return "".join(parts)


def plots_svg(timeline: dict[str, Any]) -> str:
    """Latency (log scale) and throughput, each under the fault bands, as two inline SVGs."""
    import math

    end_s, spans = timeline["end_s"], timeline["spans"]
    names = sorted({s["nemesis"] for s in spans})
    lat = timeline["latencies"]
    top_ms = max((ms for _, ms, _ in lat), default=10.0)
    log_top = math.log10(max(top_ms, 10.0))

    def y_lat(ms: float) -> float:
        return PLOT_H - PLOT_H * max(0.0, math.log10(max(ms, 1.0))) / log_top

    ticks = [(y_lat(10**k), f"{10**k:g}ms") for k in range(int(log_top) + 1)]
    dots = "".join(
        f'<circle cx="{_x(at, end_s):.1f}" cy="{y_lat(ms):.1f}" r="1.6" fill="{COLOURS.get(kind, "#555")}"/>'
        for at, ms, kind in lat
    )
    latency = (
        f'<svg width="{WIDTH}" height="{PLOT_H + MARGIN_B}" class="plot">'
        f"{_bands(spans, end_s, names)}{_axes(end_s, 'send latency', ticks)}{dots}</svg>"
    )
    per_second = timeline["per_second"]
    top = max(per_second.values(), default=1)
    lines = []
    for kind in ("ok", "info"):
        points = " ".join(
            f"{_x(s + 0.5, end_s):.1f},{PLOT_H - PLOT_H * per_second[(s, kind)] / top:.1f}"
            for s in range(int(end_s) + 1)
        )
        lines.append(f'<polyline points="{points}" fill="none" stroke="{COLOURS[kind]}" stroke-width="1.5"/>')
    ticks = [(PLOT_H - PLOT_H * v / top, str(v)) for v in sorted({0, top // 2, top})]
    throughput = (
        f'<svg width="{WIDTH}" height="{PLOT_H + MARGIN_B}" class="plot">'
        f"{_bands(spans, end_s, names)}{_axes(end_s, 'sends completed per second', ticks)}{''.join(lines)}</svg>"
    )
    legend = "".join(
        f'<span><i style="background:{FAULT_COLOURS[i % len(FAULT_COLOURS)]};opacity:.4"></i>{html.escape(n)}</span>'
        for i, n in enumerate(names)
    ) + "".join(f'<span><i style="background:{c}"></i>{k}</span>' for k, c in COLOURS.items() if k != "fail")
    return f'<div class="legend">{legend}</div>{latency}{throughput}'


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f'<table class="run">{head and f"<tr>{head}</tr>"}{body}</table>'


def verdict_text(summary: dict[str, Any], anomalies: dict[str, Any]) -> str:
    if summary["valid"]:
        return "valid"
    if summary["valid"] is None:  # a check gave up: neither valid nor invalid
        return "UNKNOWN: undecided " + ", ".join(sorted(summary.get("undecided") or {}))
    return "ANOMALIES: " + ", ".join(sorted(anomalies))


def run_section(summary: dict[str, Any], replay: str, timeline: dict[str, Any]) -> str:
    faults = ", ".join(f"{n} \u00d7{c}" for n, c in sorted(summary["faults"].items())) or "none happened"
    sends = summary["sends"]
    others = {k: v for k, v in summary["anomalies"].items() if k not in ("audit",)}
    rows = [
        {"": "seed", " ": summary["seed"]},
        {"": "replay", " ": replay},
        {"": "faults", " ": faults},
        {"": "sends", " ": f"{sends['invoked']} invoked, {sends['ok']} ok, {sends['info']} unknown (info)"},
        {"": "verdict", " ": verdict_text(summary, others)},
    ]
    if summary.get("skipped"):  # faults the model refused (a lose-tail on the last clean in-sync copy)
        skipped = ", ".join(f"{n} \u00d7{c}" for n, c in sorted(summary["skipped"].items()))
        rows.insert(3, {"": "skipped", " ": skipped})
    if summary.get("hostile"):
        rows.append({"": "hostile client", " ": json.dumps(summary["hostile"]["sent"])})
    spans = [
        {"nemesis": s["nemesis"], "start s": f"{s['start']:.1f}", "end s": f"{s['end']:.1f}",
         "what": json.dumps(s["value"])[:160]}
        for s in timeline["spans"]
    ]  # fmt: skip
    return (
        "<style>table.run{border-collapse:collapse;margin:6px 0 12px;background:#fff}"
        "table.run td,table.run th{border:1px solid #dde2e8;padding:3px 8px;font-size:13px;text-align:left}"
        ".plot{background:#fff;border:1px solid #dde2e8;border-radius:6px;margin:4px 0;display:block}</style>"
        f"<h2>Fault run</h2>{_table(rows, ['', ' '])}"
        f"<details open><summary>Faults over latency and throughput</summary>{plots_svg(timeline)}"
        f"{_table(spans, ['nemesis', 'start s', 'end s', 'what'])}</details>"
        f"<details open><summary>Anomalies found outside the history checker</summary><pre>"
        f"{html.escape(json.dumps(others, indent=1)[:20000]) if others else 'none'}</pre></details>"
        "<h2>Operations (the history checker)</h2>"
    )


def audit_section(audit: dict[str, Any] | None) -> str:
    if audit is None:
        return "<h2>Replica audit</h2><p>not run (--no-audit)</p>"
    findings = audit["findings"]
    verdict = "no findings" if not findings else f"{len(findings)} finding(s)"
    columns = sorted({k for f in findings for k in f}) if findings else []
    return (
        f'<h2>Replica audit: {verdict}</h2><p><a href="audit.html">the audit\'s own page</a></p>'
        + (_table(findings[:200], columns) if findings else "")
        + _table(audit["replicas"], ["topic", "partition", "node", "records", "high_watermark"])
    )


def write_report(out: Path, result: Any, replay: str) -> Path:
    """report.html in `out`, from the run's history, summary and audit."""
    from kraftpy.tools.checker.formats import read_history
    from kraftpy.tools.checker.html_report import render_html
    from kraftpy.tools.checker.kafka_check import check_kafka

    history_path = out / "history.jsonl"
    events = [json.loads(line) for line in history_path.read_text().splitlines() if line.strip()]
    timeline = fault_timeline(events)
    checked = check_kafka(read_history(history_path, None), set())
    page = render_html(
        checked,
        title="kraftpy faults run",
        before=run_section(result.summary(), replay, timeline),
        after=audit_section(result.audit),
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
