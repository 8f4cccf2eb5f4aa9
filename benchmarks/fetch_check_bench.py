"""What the fetch path's corruption check costs: `check_read` over the bytes of one fetch answer.

Every fetch (consumer or follower) now checks the batches it sends (framing,
CRC32C, offsets; storage/integrity.py) on the event loop. The cost is
one CRC32C pass over the bytes plus a fixed cost per batch, so it is shown for
large batches (throughput) and for one-record batches (the per-batch cost).
Best of `--repeats` runs: on a shared machine other processes only add time.

    python benchmarks/fetch_check_bench.py
"""

from __future__ import annotations

import argparse
import time

from kraftpy.protocol.records.batch import build_batch
from kraftpy.storage.integrity import check_read


def batches(count: int, records_per_batch: int, value_bytes: int = 100) -> bytes:
    one = [(None, b"x" * value_bytes, (), 0)] * records_per_batch
    return b"".join(build_batch(one, base_offset=i * records_per_batch) for i in range(count))


def best_seconds(data: bytes, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        check_read(data, 0, max_batch_bytes=1 << 24)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cases = {
        "32 MiB answer, 15 KiB batches (140 x 100 B records)": batches(2176, 140),
        "1 MiB answer, 15 KiB batches": batches(68, 140),
        "1.3 MB answer, one-record batches": batches(8000, 1),
    }
    for label, data in cases.items():
        seconds = best_seconds(data, args.repeats)
        print(f"{label}: {seconds * 1000:.2f} ms ({len(data) / seconds / 1e6:.0f} MB/s)")


if __name__ == "__main__":
    main()
