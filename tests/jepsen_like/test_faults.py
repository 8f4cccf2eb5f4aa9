"""The Jepsen-like run: `kraftpy faults run` on a real 3-node cluster under every fault of the trust issue.

Three `kraftpy server` processes, each in a network namespace of its own (tools/faults/netns.py), one
of them with its data on a small disk of its own; a topic of three partitions, replication factor 3,
min_insync_replicas 2. Idempotent acks=all producers record every send in a history while the nemesis
kills, pauses, isolates (a real two-way partition, nftables), cuts unsynced tails and fills the disk,
one fault at a time, each at least once, and a hostile local process sends malformed, forged and
oversized requests throughout. Then every fault is healed, the run waits (bounded) for full ISRs, a
consumer reads everything back into the same history, and the run's judges must all find nothing
(tools/faults/run.py): the workload's own view (every acknowledged message read back at its offset),
`kraftpy check --model kafka`, no node dead on its own, no poison batch stored, and, after a graceful
`cluster stop`, `kraftpy audit` over the replicas' files with each replica holding what was read back.

`--jepsen-time-s 600` makes it a soak; `--jepsen-seed N` replays a nemesis schedule. The run's
directory (history, check.json, audit.json, report.html, the cluster's files) stays in the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.disk import loop_disk_supported
from kraftpy.tools.faults.netns import list_namespaces, supported

pytestmark = pytest.mark.slow

DEFAULT_TIME_S = 20.0  # each of the five faults once at least (the run waits for that)
NEMESES = ("kill", "pause", "isolate", "lose-tail", "disk-full")
RUN_TIMEOUT_S = 900


def break_env(broken: str | None) -> dict[str, str]:
    """This process's environment for a run, with KRAFTPY_TEST_BREAK set to `broken` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "KRAFTPY_TEST_BREAK"}
    if broken:
        env["KRAFTPY_TEST_BREAK"] = broken
    return env


def faults_run(out: Path, *args: str, env: dict[str, str] | None = None, timeout_s: float = RUN_TIMEOUT_S):
    """`kraftpy faults run ... --out OUT`; returns the process and the run's summary.json (None if absent)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "faults", "run", *args, "--out", str(out)],
        capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    path = out / "summary.json"
    return proc, json.loads(path.read_text()) if path.exists() else None


def machine_supports_every_fault() -> None:
    """A fault the machine cannot do fails the run: a run that skips a fault proves nothing about it."""
    for name, (ok, how) in (("partitions", supported()), ("disk-full", loop_disk_supported())):
        if not ok:
            pytest.fail(f"the {name} faults cannot run here: {how} (fault runs need root; see docs/jepsen.md)")


def assert_left_nothing(out: Path) -> None:
    """No namespace of this run and no node of it left (other runs may be going on beside it)."""
    layout = ClusterLayout.load(out / "cluster")
    runs = {n.netns.rsplit("-", 1)[0] + "-" for n in layout.nodes if n.netns}
    leftover = [n for n in list_namespaces() if any(n.startswith(r) for r in runs)]
    assert not leftover, f"the run left namespaces behind: {leftover}"
    assert all(layout.read_pid(n) is None for n in layout.nodes), "the run left a node running"


def test_acked_writes_survive_every_fault(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    time_s = request.config.getoption("--jepsen-time-s", default=None) or DEFAULT_TIME_S
    seed = request.config.getoption("--jepsen-seed", default=None)
    seed = random.randrange(2**32) if seed is None else seed
    machine_supports_every_fault()
    out = tmp_path / "run"
    nemeses = [a for n in NEMESES for a in ("--nemesis", n)]
    proc, summary = faults_run(out, "--seed", str(seed), "--time-limit-s", f"{time_s:g}", *nemeses, "--hostile")
    print(proc.stderr[-3000:], proc.stdout, sep="\n")
    assert proc.returncode == 0, f"seed {seed}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-5000:]}"
    assert "fault run: valid" in proc.stdout and "replay" in proc.stdout, proc.stdout
    assert summary is not None and summary["valid"] is True and summary["anomalies"] == {}, summary
    missing = [n for n in NEMESES if not summary["faults"].get(n)]
    assert not missing, f"seed {seed}: faults {missing} never happened (done: {summary['faults']})"
    assert summary["sends"]["ok"] > 0, summary
    assert summary["hostile"]["poison_accepted"] == 0 and sum(summary["hostile"]["sent"].values()) > 0
    assert json.loads((out / "check.json").read_text())["valid"] is True
    audit = json.loads((out / "audit.json").read_text())
    assert audit["ok"] and audit["findings"] == []
    events = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    acked = [  # Jepsen's micro-ops: a send acknowledged with its offset is ["send", key, [offset, value]]
        m for e in events if e["f"] == "send" and e["type"] == "ok" for m in e["value"] if isinstance(m[2], list)
    ]
    assert audit["acked_writes"] == len(acked) > 0
    polls = [e for e in events if e["f"] == "poll" and e["type"] == "ok" and isinstance(e["process"], int)]
    assert any(m[1] for e in polls for m in e["value"] if m[0] == "poll"), "no records polled"
    assert any(e["process"] >= 2_000_000 for e in polls), "no final drain"
    nemesis_lines = [e["f"] for e in events if e["process"] == "nemesis"]
    for n in NEMESES:  # every fault logged with its start and its end
        assert nemesis_lines.count(f"{n}-start") == nemesis_lines.count(f"{n}-end") > 0, nemesis_lines
    assert (out / "report.html").stat().st_size > 0
    assert_left_nothing(out)
