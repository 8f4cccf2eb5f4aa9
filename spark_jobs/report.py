"""Rendering an audit result: a rich summary per partition, the findings, JSON, and a standalone HTML page."""

from __future__ import annotations

import html
from collections import defaultdict
from typing import Any

from rich.table import Table

from kraftpy.spark_jobs.audit import AuditResult
from kraftpy.spark_jobs.checks import KINDS

MAX_FINDINGS_SHOWN = 50


def to_json(result: AuditResult) -> dict[str, Any]:
    plan = result.plan
    return {
        "cluster_dir": str(plan.cluster_dir),
        "history": None if plan.history_path is None else str(plan.history_path),
        "topic": plan.topic,
        "acked_writes": None if plan.sends is None else len(plan.sends.acked),
        "ok": result.ok,
        "replicas": result.replicas,
        "findings": result.findings,
    }


def _partitions(result: AuditResult) -> dict[tuple[str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in result.replicas:
        out[(row["topic"], row["partition"])].append(row)
    return dict(sorted(out.items()))


def summary_table(result: AuditResult) -> Table:
    counts = result.counts()
    verdict = "no findings" if result.ok else f"{len(result.findings)} finding(s)"
    table = Table(title=f"replica audit of {result.plan.cluster_dir}: {verdict}")
    for col in ("topic", "partition", "replicas (node:records)", "committed bound", "findings"):
        table.add_column(col)
    for (topic, partition), rows in _partitions(result).items():
        bound = min((r["high_watermark"] or 0) for r in rows)
        per_kind = [f"{kind} {counts[(topic, partition, kind)]}" for kind in KINDS if counts[(topic, partition, kind)]]
        table.add_row(
            topic,
            str(partition),
            " ".join(f"{r['node']}:{r['records']}" for r in rows),
            str(bound),
            "[red]" + ", ".join(per_kind) + "[/]" if per_kind else "[green]none[/]",
        )
    return table


def findings_table(result: AuditResult) -> Table:
    shown = result.findings[:MAX_FINDINGS_SHOWN]
    more = len(result.findings) - len(shown)
    table = Table(title="findings" + (f" (first {len(shown)}; {more} more with --json or --html)" if more else ""))
    for col in ("kind", "topic-partition", "nodes", "offset", "where", "detail"):
        table.add_column(col, overflow="fold")
    for f in shown:
        where = "" if f["file"] is None else f"{f['file']}" + ("" if f["position"] is None else f" @{f['position']}")
        table.add_row(
            f["kind"],
            f"{f['topic']}-{f['partition']}",
            f["nodes"] or "-",
            "-" if f["offset"] is None else str(f["offset"]),
            where,
            f["detail"],
        )
    return table


def _cells(values: list[Any], tag: str = "td") -> str:
    return "".join(f"<{tag}>{html.escape('' if v is None else str(v))}</{tag}>" for v in values)


def render_html(result: AuditResult) -> str:
    """One self-contained page: the verdict, the replicas per partition, every finding."""
    counts = result.counts()
    part_rows = []
    for (topic, partition), rows in _partitions(result).items():
        bad = sum(counts[(topic, partition, k)] for k in KINDS)
        cls = "bad" if bad else "good"
        for r in rows:
            part_rows.append(
                f'<tr class="{cls}">'
                + _cells([topic, partition, r["node"], r["records"], r["first"], r["last"], r["high_watermark"],
                          r["log_start_offset"], bad])
                + "</tr>"
            )  # fmt: skip
    finding_rows = [
        "<tr>"
        + _cells([f["kind"], f"{f['topic']}-{f['partition']}", f["nodes"], f["offset"], f["file"], f["position"],
                  f["detail"]])
        + "</tr>"
        for f in result.findings
    ]  # fmt: skip
    verdict = "no findings" if result.ok else f"{len(result.findings)} finding(s)"
    plan = result.plan
    history = "" if plan.history_path is None else f"; history {html.escape(str(plan.history_path))}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kraftpy replica audit</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; font-size: 0.9em; text-align: left; }}
tr.bad td {{ background: #fdd; }} tr.good td {{ background: #efe; }}
.verdict {{ font-size: 1.3em; font-weight: bold; color: {"#070" if result.ok else "#b00"}; }}
</style></head><body>
<h1>Replica audit</h1>
<p>{html.escape(str(plan.cluster_dir))}{history}</p>
<p class="verdict">{verdict}</p>
<h2>Replicas</h2>
<table><tr>{
        _cells(
            [
                "topic",
                "partition",
                "node",
                "records",
                "first offset",
                "last offset",
                "high watermark",
                "log start",
                "findings in partition",
            ],
            "th",
        )
    }</tr>
{"".join(part_rows)}</table>
<h2>Findings</h2>
<table><tr>{_cells(["kind", "partition", "nodes", "offset", "file", "position", "detail"], "th")}</tr>
{"".join(finding_rows)}</table>
</body></html>
"""
