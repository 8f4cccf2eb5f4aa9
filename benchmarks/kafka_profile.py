"""Where the brokers' CPU goes under issue 15's paced load: py-spy on every broker while librdkafka
produces at a fixed rate.

Starts kafka_clients_bench.py's 3-node cluster and topic (6 partitions, RF 3, min ISR 2), produces
`--records` records of 100 B with acks=all at `--rate` records/s through confluent-kafka (the
bench's own pacer), and after two seconds records each broker with `py-spy record --nonblocking -f
raw` for `--seconds`. Prints the produce figures (the sampler takes CPU from the brokers, so these
latencies are not the bench's) and, over all brokers together, the share of samples whose innermost
frame is each function and the share with each function anywhere on the stack. Needs py-spy (`pip
install py-spy`). docs/perf-kafka-clients.md has the results.

    python benchmarks/kafka_profile.py --rate 230000 --records 2400000 --seconds 6
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kafka_clients_bench import Cluster, load1, log, produce  # benchmarks/ is on sys.path when run
from pyspy_raw import profile, share_table

TOPIC = "profiled"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=230_000, help="records/s (issue 15: half the peak)")
    parser.add_argument("--records", type=int, default=2_400_000, help="records produced in all")
    parser.add_argument("--seconds", type=int, default=6, help="py-spy's recording time, from 2 s in")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.rate <= 0 or args.records < 1 or args.seconds < 1:
        parser.error("--rate, --records and --seconds must be positive")
    if shutil.which("py-spy") is None:
        parser.error("py-spy is not installed (pip install py-spy)")
    with tempfile.TemporaryDirectory(prefix="kafka-profile-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        log("starting 3 nodes")
        cluster.start()
        try:
            cluster.create_topic(TOPIC)
            pids = [int(p.read_text()) for p in sorted(cluster.dir.glob("node-*/server.pid"))]
            result: dict[str, Any] = {}

            def load() -> None:
                result.update(produce(cluster.bootstrap, TOPIC, args.records, 100, args.rate, {}, cluster.cpu_seconds))

            log(f"producing {args.records:,} records at {args.rate:,.0f}/s (load1 {load1():.2f})")
            producer = threading.Thread(target=load)
            producer.start()
            time.sleep(2)
            raws = [Path(tmp) / f"broker-{i}.txt" for i in range(len(pids))]
            record = ["py-spy", "record", "-r", "200", "-d", str(args.seconds), "-f", "raw", "--nonblocking"]
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            spies = [
                subprocess.Popen([*record, "-o", str(raw), "-p", str(pid)], **quiet)
                for raw, pid in zip(raws, pids, strict=True)
            ]
            for spy in spies:
                spy.wait(args.seconds + 60)
            producer.join()
        finally:
            cluster.stop()
        print(
            f"\nproduced {result['acked']:,} at {result['records_s']:,.0f}/s, p50 / p99 {result['p50_ms']:.1f} / "
            f"{result['p99_ms']:.1f} ms, brokers {result['broker_cores']:.2f} cores (with the sampler attached)"
        )
        total, by_leaf, by_frame = profile([raw for raw in raws if raw.exists()])
        print(f"\nall brokers: {total:,} samples; innermost function, share of samples")
        print(share_table(total, by_leaf, args.top))
        print("\nfunction anywhere on the stack, share of samples")
        print(share_table(total, by_frame, args.top * 2))


if __name__ == "__main__":
    main()
