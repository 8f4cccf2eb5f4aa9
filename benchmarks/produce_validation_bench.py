"""What validating records on produce costs: a micro-benchmark per codec, and `perf produce` with node CPU.

    python benchmarks/produce_validation_bench.py micro
    python benchmarks/produce_validation_bench.py cluster --dir /tmp/kperf-before --dir /tmp/kperf --runs 3

`micro` times protocol/records/validation.py's validate_records (what the leader runs once per
batch) against decode_batch (what a consumer runs), per codec, for the batches `perf produce`
sends (100 B values; 16 KiB and 256 KiB batches): CPU microseconds per record.

`cluster` runs `kraftpy perf produce` (acks=all, unthrottled, 256 KiB batches) against running
local clusters (two to compare code before and after: each started from its own checkout), for
each codec, `--runs` times, interleaved, and reports records/s and the CPU the three node
processes spent per record (utime + stime from /proc/<pid>/stat around each run), which is
steadier than throughput on a shared machine. Results: docs/perf-produce-consume.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from proc_cpu import cpu_seconds

from kraftpy.protocol.records import CompressionType, build_batch, decode_batch, parse_header
from kraftpy.protocol.records.validation import validate_records
from kraftpy.tools.cluster_layout import ClusterLayout

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _cpu_us_per_call(fn, min_s: float = 0.5) -> float:
    calls = 0
    start = time.process_time()
    while time.process_time() - start < min_s:
        fn()
        calls += 1
    return (time.process_time() - start) / calls * 1e6


def micro() -> None:
    payload = os.urandom(100)  # perf produce's payload: one random value, reused
    print(f"{'codec':8} {'records':>7} {'bytes':>7} {'validate us/rec':>16} {'decode_batch us/rec':>20}")
    for count in (140, 2400):  # 16 KiB and 256 KiB batches of 100 B records
        rows = [
            (name, build_batch([(None, payload)] * count, compression=CompressionType[name.upper()])) for name in CODECS
        ]
        # Records 2 ms apart: past 63 ms a timestamp delta takes two bytes, as in the batches librdkafka
        # sends under load (they wait longer than linger.ms), where the rows above have one-byte deltas.
        rows.append(("none*", build_batch([(None, payload, (), 1_000_000 + 2 * i) for i in range(count)])))
        for name, batch in rows:
            header = parse_header(batch, check_crc=True)
            validate = _cpu_us_per_call(lambda b=batch, h=header: validate_records(b, h)) / count
            decode = _cpu_us_per_call(lambda b=batch: decode_batch(b)) / count
            print(f"{name:8} {count:7} {len(batch):7} {validate:16.2f} {decode:20.2f}")
    print("none*: uncompressed, records 2 ms apart (two-byte timestamp deltas from the 33rd record on)")


def _node_cpu_s(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def cluster(
    directories: list[Path], topic: str, runs: int, num_records: int, batch_size: int, codecs: list[str]
) -> None:
    """Each run: every codec against every cluster in turn (A/B interleaved, so load drifts hit each alike)."""
    pids: dict[Path, list[int]] = {}
    for directory in directories:
        layout = ClusterLayout.load(directory)
        pids[directory] = [pid for pid in (layout.read_pid(n) for n in layout.nodes) if pid is not None]
    print(f"load: {os.getloadavg()}")
    results: dict[tuple[Path, str], list[tuple[float, float]]] = {(d, c): [] for d in directories for c in codecs}
    for run in range(runs):
        for codec in codecs:
            for directory in directories:
                before = _node_cpu_s(pids[directory])
                out = subprocess.run(
                    [sys.executable, "-m", "kraftpy.tools.cli", "perf", "produce", "--topic", topic,
                     "--num-records", str(num_records), "--record-size", "100", "--throughput", "-1",
                     "--acks", "all", "--batch-size", str(batch_size), "--linger-ms", "10",
                     "--prop", f"compression_type={codec}", "--json", "--dir", str(directory)],
                    capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                node_us = (_node_cpu_s(pids[directory]) - before) / num_records * 1e6
                if out.returncode != 0:  # reported and left out, not fatal: the other runs still count
                    print(f"run {run + 1} {directory.name} {codec} failed: {(out.stdout + out.stderr)[-400:]}")
                    continue
                rate = json.loads(out.stdout.strip().splitlines()[-1])["records_per_s"]
                results[(directory, codec)].append((rate, node_us))
                print(
                    f"run {run + 1} {directory.name:20} {codec:6} {rate:8.0f} records/s  nodes {node_us:5.1f} us/record"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(f"load: {os.getloadavg()}")
    print(f"{'cluster':20} {'codec':7} {'records/s median (range)':>26} {'node us/record median (range)':>31}")
    for (directory, codec), rows in results.items():
        if not rows:
            continue
        rates, cpus = [r for r, _ in rows], [c for _, c in rows]
        print(
            f"{directory.name:20} {codec:7} {statistics.median(rates):10.0f} ({min(rates):.0f}-{max(rates):.0f})"
            f"{statistics.median(cpus):16.1f} ({min(cpus):.1f}-{max(cpus):.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("micro")
    c = sub.add_parser("cluster")
    c.add_argument("--dir", type=Path, action="append", required=True, help="a cluster; repeat to compare (A/B)")
    c.add_argument("--topic", default="p100")
    c.add_argument("--runs", type=int, default=3)
    c.add_argument("--num-records", type=int, default=200_000)
    c.add_argument("--batch-size", type=int, default=262_144)
    c.add_argument("--codecs", default=",".join(CODECS))
    args = parser.parse_args()
    if args.what == "micro":
        micro()
    else:
        cluster(args.dir, args.topic, args.runs, args.num_records, args.batch_size, args.codecs.split(","))


if __name__ == "__main__":
    main()
