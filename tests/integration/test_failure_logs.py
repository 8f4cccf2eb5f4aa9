"""Post-mortems of integration tests: node logs in a failed test's report, and what a hung process is doing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry
from tests.integration.test_cluster_support import (
    FAILURE_LOG_TAIL_BYTES,
    LocalCluster,
    failure_log_sections,
    hung_process_report,
)


def test_the_sections_hold_the_end_of_every_node_log_of_every_cluster_fixture(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "c")  # not started: only its layout and logs are read
    layout = ClusterLayout(cluster.dir, "id", tuple(NodeEntry(i, "127.0.0.1", 1000 + i, ("broker",)) for i in (1, 2)))
    layout.save()
    for entry in layout.nodes:
        layout.node_dir(entry).mkdir(parents=True, exist_ok=True)
    layout.log_path(layout.nodes[0]).write_text("old line\n" * 2_000 + "the last line\n")
    sections = failure_log_sections(["not a cluster", cluster, LocalCluster(tmp_path / "never-started")])
    ((title, text),) = sections  # node 2 has no log yet; the unstarted cluster has no layout
    assert title.startswith("node 1: the last ") and str(layout.log_path(layout.nodes[0])) in title
    assert text.endswith("the last line\n") and len(text) == FAILURE_LOG_TAIL_BYTES


def test_a_hung_process_report_shows_an_ignored_sigint() -> None:
    program = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "1\n"
        report = hung_process_report(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    fields = dict(line.split(":", 1) for line in report.splitlines() if line.startswith(("SigIgn", "State")))
    assert int(fields["SigIgn"], 16) & (1 << (signal.SIGINT - 1)), report
    assert fields["State"].strip()[0] in "RS", report  # running or asleep, not a zombie: it was still alive
