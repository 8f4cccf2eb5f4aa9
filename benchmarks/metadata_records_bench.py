"""Encode and decode cost of metadata records (one Raft entry's batch), per record.

20,000 records: 10,000 PartitionChange (an ISR change, as a fencing writes them) and 10,000
Partition records (a topic creation), encoded with `encode_records` and decoded with
`decode_records`, best of `--rounds`. Neither uses KIP-966's fields, so both are written in
version 1 (metadata/records.py picks the oldest version that holds a record).

    python benchmarks/metadata_records_bench.py [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from kraftpy.metadata.records import PartitionChangeRecord, PartitionRecord, decode_records, encode_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000, help="records of each kind (default 10,000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best is printed (default 7)")
    args = parser.parse_args()
    topic_id = uuid.uuid4()
    records = [PartitionChangeRecord(topic_id, i, isr=(1, 2)) for i in range(args.records)]
    records += [PartitionRecord(topic_id, i, (1, 2, 3), (1, 2, 3), 1) for i in range(args.records)]
    best_encode = best_decode = float("inf")
    data = b""
    for _ in range(args.rounds):
        start = time.perf_counter()
        data = encode_records(records)
        best_encode = min(best_encode, time.perf_counter() - start)
        start = time.perf_counter()
        decode_records(data)
        best_decode = min(best_decode, time.perf_counter() - start)
    n = len(records)
    print(f"load average {os.getloadavg()[0]:.2f}; {n} records, {len(data)} bytes")
    print(f"| encode | {best_encode * 1e6 / n:.2f} us/record |")
    print(f"| decode | {best_decode * 1e6 / n:.2f} us/record |")


if __name__ == "__main__":
    main()
