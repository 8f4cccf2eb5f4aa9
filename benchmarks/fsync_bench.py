"""What one small write and its fdatasync cost on this disk: the floor under a Raft commit's latency.

A one-at-a-time Raft commit waits for a follower's fsync of the entry (docs/perf-raft.md), and the
three nodes of a local cluster fsync into the same file system at once. This writes `--writes`
records of `--size` bytes, each followed by fdatasync, from 1 and then `--processes` processes at
once, into files in `--dir` laid out four ways: appended (the file grows, as a segment that is not
preallocated does), into a sparse file already long enough (ftruncate, as the `preallocate` config
and the Raft metadata log's segments do), written over zeros already on disk, and into
posix_fallocate'd space. Prints the p50 / p90 / p99 of the fdatasync calls.

    python benchmarks/fsync_bench.py --dir /tmp
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

LAYOUTS = ("append", "sparse", "zero-filled", "fallocate")
PREALLOCATED_BYTES = 8 << 20


def writer(path: str, layout: str, writes: int, size: int, pause_s: float, out: multiprocessing.Queue) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if layout == "sparse":
            os.ftruncate(fd, PREALLOCATED_BYTES)
        elif layout == "zero-filled":
            os.write(fd, bytes(PREALLOCATED_BYTES))
        elif layout == "fallocate":
            os.posix_fallocate(fd, 0, PREALLOCATED_BYTES)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        record = b"r" * size
        latencies_us = []
        for _ in range(writes):
            os.write(fd, record)
            start = time.perf_counter()
            os.fdatasync(fd)
            latencies_us.append((time.perf_counter() - start) * 1e6)
            time.sleep(pause_s)  # a commit's other work; also keeps the writers interleaved
        out.put(latencies_us)
    finally:
        os.close(fd)


def measure(directory: Path, layout: str, processes: int, writes: int, size: int) -> list[float]:
    out: multiprocessing.Queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=writer, args=(str(directory / f"w{i}"), layout, writes, size, 0.0005, out))
        for i in range(processes)
    ]
    for proc in procs:
        proc.start()
    latencies = sorted(x for _ in procs for x in out.get(timeout=600))
    for proc in procs:
        proc.join(60)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the files go")
    parser.add_argument("--writes", type=int, default=2000, help="writes per process and layout")
    parser.add_argument("--size", type=int, default=170, help="bytes per write (a 100-byte Raft entry's batch)")
    parser.add_argument("--processes", type=int, default=3, help="writers at once in the second round")
    args = parser.parse_args()
    if args.writes < 1 or args.size < 1 or args.processes < 1 or args.size * args.writes > PREALLOCATED_BYTES:
        parser.error(f"--writes, --size and --processes must be >= 1, and --writes x --size <= {PREALLOCATED_BYTES}")
    print(f"fdatasync after each {args.size}-byte write, {args.writes:,} writes per process, in {args.dir}")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}\n")
    print("| layout | processes | p50 µs | p90 µs | p99 µs |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="fsync-bench-", dir=args.dir) as tmp:
        for layout in LAYOUTS:
            for processes in sorted({1, args.processes}):
                lat = measure(Path(tmp), layout, processes, args.writes, args.size)
                pick = [lat[min(len(lat) - 1, int(q * len(lat)))] for q in (0.5, 0.9, 0.99)]
                print(f"| {layout} | {processes} | " + " | ".join(f"{x:,.0f}" for x in pick) + " |", flush=True)


if __name__ == "__main__":
    main()
