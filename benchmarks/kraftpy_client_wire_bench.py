"""kraftpy's client over Kafka's protocol beside librdkafka, one 3-node cluster, one run.

    python benchmarks/kraftpy_client_wire_bench.py [RECORDS]   # default 300,000 per row; JSON in /tmp/kc-perf.json

Per repetition (2): librdkafka produce (kafka_clients_bench.produce), then
`kraftpy perf produce` at default settings and with 256 KiB batches (linger
10 ms), over the Kafka listeners (the client's only protocol since issue 16);
100 B records, acks=all, 6 partitions, RF 3, min.insync.replicas=2. Results: docs/perf-kafka-clients.md.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_clients_bench as kb

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
d = Path(tempfile.mkdtemp(prefix="kc-perf-"))
c = kb.Cluster(d / "cluster")
c.start()
rows = {}


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def perf(name, servers, *extra):
    t = f"t-{name}"
    c.create_topic(t)
    up = uptime()
    out = kb.cli(
        "perf",
        "produce",
        "--topic",
        t,
        "--num-records",
        str(N),
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--acks",
        "all",
        "--json",
        "--bootstrap-server",
        servers,
        *extra,
        timeout_s=900,
    )
    r = json.loads(out.strip().splitlines()[-1])
    r["uptime"] = up
    rows[name] = r
    print(
        name,
        f"{r['records_per_s']:,.0f} rec/s p50 {r['latency_ms']['p50']:.1f} p99 {r['latency_ms']['p99']:.1f}",
        up,
        flush=True,
    )


try:
    for rep in range(2):
        t = f"rd-{rep}"
        c.create_topic(t)
        up = uptime()
        r = kb.produce(c.bootstrap, t, N, 100, None, {})
        r["uptime"] = up
        rows[f"librdkafka_{rep}"] = r
        print(
            f"librdkafka_{rep}",
            f"{r['records_s']:,.0f} rec/s p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f}",
            up,
            flush=True,
        )
        perf(f"kafka_default_{rep}", c.bootstrap)
        perf(f"kafka_256k_{rep}", c.bootstrap, "--batch-size", "262144", "--linger-ms", "10")
finally:
    c.stop()
Path("/tmp/kc-perf.json").write_text(json.dumps(rows, indent=1))
