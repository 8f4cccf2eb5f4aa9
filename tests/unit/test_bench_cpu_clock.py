"""benchmarks/kafka_clients_bench.py's CPU clock of the cluster's nodes: every node's user and system time.

The paced runs and produce_cost_bench.py divide this by requests or records
(docs/perf-kafka-clients.md); two live processes stand in for the nodes here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from kafka_clients_bench import Cluster


def test_the_clock_sums_every_nodes_cpu_time(tmp_path: Path) -> None:
    # A child that burns 0.3 s of CPU, then waits, and this process: node-1 and node-2.
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ninput()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
    try:
        for name, pid in (("node-1", child.pid), ("node-2", os.getpid())):
            (tmp_path / name).mkdir()
            (tmp_path / name / "server.pid").write_text(str(pid))
        cluster = Cluster.__new__(Cluster)  # only its directory: no ports, no processes started
        cluster.dir = tmp_path
        deadline = time.monotonic() + 10
        while sum(cluster.cpu_times()) - sum(os.times()[:2]) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        user, system = cluster.cpu_times()
        own = os.times()
        # Both processes count: more than this process alone by the child's 0.3 s (ticks of 10 ms).
        assert user + system >= own.user + own.system + 0.25
        assert abs(cluster.cpu_seconds() - (user + system)) < 0.2  # the same clock, read again
    finally:
        child.communicate(b"\n", timeout=10)
