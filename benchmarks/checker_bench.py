"""Checking time per conformance history, beside Porcupine's figure from VERDICTS.tsv.

Run from the repository root:

    python benchmarks/checker_bench.py [--json] [--timeout-s 120] [--only SUBSTR]

Like Porcupine's `porcupine_seconds` (one CheckEvents call), the time
excludes interpreter start and parsing: the file is read first, then
`check_linearizability` is timed. Each history is checked repeatedly until
the runs add up to --min-total-s (at least --min-runs runs); the figure is
the median. Targets (issue 6): every history decided in under 10 s, the
--no-partition runs on c01 and c10 under 60 s, and the total, over the rows
Porcupine finished, within 20x of Porcupine's.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kraftpy.tools.checker.formats import read_history
from kraftpy.tools.checker.linearizability import check_linearizability

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "porcupine"


def bench_row(corpus: Path, row: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    history = read_history(corpus / row["file"])  # parsing is not timed
    model = "etcd" if row["model"] == "etcd" else "kv"
    partition = row["model"] != "kv-nopartition"
    times: list[float] = []
    verdicts: set[Any] = set()
    while True:
        started = time.perf_counter()
        result = check_linearizability(
            history, model, partition=partition, timeout_s=args.timeout_s, memory_mb=args.memory_mb
        )
        times.append(time.perf_counter() - started)
        verdicts.add(result.valid)
        if result.valid == "unknown" or (sum(times) >= args.min_total_s and len(times) >= args.min_runs):
            break
    expected = row["expected_linearizable"] == "true"
    (valid,) = verdicts if len(verdicts) == 1 else ("inconsistent",)
    ours = statistics.median(times)
    theirs = None if row["porcupine_seconds"].startswith(">") else float(row["porcupine_seconds"])
    return {
        "file": row["file"],
        "model": row["model"],
        "ops": int(row["ops"]),
        "expected": expected,
        "valid": valid,
        "correct": valid == expected,
        "seconds": ours,
        "runs": len(times),
        "porcupine_seconds": theirs,
        "porcupine_text": row["porcupine_seconds"],
        "ratio": None if theirs is None or valid == "unknown" else ours / theirs,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [r for r in rows if r["porcupine_seconds"] is not None and r["valid"] != "unknown"]
    ours = sum(r["seconds"] for r in finished)
    theirs = sum(r["porcupine_seconds"] for r in finished)
    nopart_small = [r for r in rows if r["model"] == "kv-nopartition" and not r["file"].startswith("kv/c50")]
    return {
        "histories": len(rows),
        "wrong_verdicts": sum(1 for r in rows if r["valid"] not in (r["expected"], "unknown")),
        "unknown": [f"{r['file']}:{r['model']}" for r in rows if r["valid"] == "unknown"],
        "decided_under_10s": sum(1 for r in rows if r["correct"] and r["seconds"] < 10),
        "max_seconds_decided": max((r["seconds"] for r in rows if r["correct"]), default=0.0),
        "nopartition_c01_c10_max_s": max((r["seconds"] for r in nopart_small), default=None),
        "total_seconds_where_porcupine_finished": ours,
        "porcupine_total_seconds": theirs,
        "total_ratio": ours / theirs if theirs else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--only", default="", help="only rows whose file:model contains this")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per check, as Porcupine's 120 s")
    parser.add_argument("--memory-mb", type=float, default=8000.0)
    parser.add_argument("--min-total-s", type=float, default=1.0)
    parser.add_argument("--min-runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    with open(args.corpus / "VERDICTS.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if args.only in f"{r['file']}:{r['model']}"]
    err = Console(stderr=True)
    results = []
    for i, row in enumerate(rows, 1):
        if sys.stderr.isatty():
            err.print(f"[{i}/{len(rows)}] {row['file']} {row['model']}", end="\r")
        results.append(bench_row(args.corpus, row, args))
    summary = summarize(results)
    if args.json:
        print(json.dumps({"rows": results, "summary": summary}, indent=2))
        return 0 if summary["wrong_verdicts"] == 0 else 1
    table = Table(title="kraftpy check vs Porcupine (seconds per check, parsing excluded)")
    for col in ("file", "model", "ops", "expected", "verdict", "kraftpy s", "porcupine s", "ratio"):
        table.add_column(col, justify="right" if col in ("ops", "kraftpy s", "porcupine s", "ratio") else "left")
    for r in results:
        verdict = str(r["valid"]).lower() if r["valid"] == "unknown" or r["correct"] else f"WRONG {r['valid']}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        table.add_row(
            r["file"], r["model"], str(r["ops"]), str(r["expected"]).lower(), verdict,
            f"{r['seconds']:.6f}", r["porcupine_text"], ratio,
        )  # fmt: skip
    out = Console(width=max(Console().width, 130))
    out.print(table)
    s = summary
    Console().print(
        f"histories {s['histories']}, wrong verdicts {s['wrong_verdicts']}, "
        f"decided in < 10 s: {s['decided_under_10s']}, unknown: {', '.join(s['unknown']) or 'none'}\n"
        f"slowest decided: {s['max_seconds_decided']:.3f} s; no-partition c01/c10 slowest: "
        f"{s['nopartition_c01_c10_max_s'] or 0:.3f} s\n"
        f"total where Porcupine finished: kraftpy {s['total_seconds_where_porcupine_finished']:.3f} s, "
        f"Porcupine {s['porcupine_total_seconds']:.3f} s, ratio {s['total_ratio'] or 0:.2f}x"
    )
    return 0 if s["wrong_verdicts"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
