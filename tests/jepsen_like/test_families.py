"""A short `kraftpy faults run` per nemesis family, valid; the broken builds are in broken_builds.py.

Each family gets a bounded run with every nemesis of the family done at least once, which must exit 0
(valid) and leave nothing behind: in CI partition and leader-targeted, since test_faults.py's run has
kill and pause (broken_builds.py runs all four). The same command run against brokers started with
KRAFTPY_TEST_BREAK (a test-only switch of broker/shell/fault_injection.py) must exit 1 with acknowledged
writes lost: a fault run that cannot fail proves nothing. Whether one short run loses a write on a
broken build depends on timing (which writes were in flight when the leadership moved), so that side is
`python -m tests.jepsen_like.broken_builds`, which runs several seeds per family and reports the catch
rate (docs/jepsen.md), not a CI test that could fail by chance.

- truncate-to-hw: a new partition leader cuts its log to the high watermark it knew as a follower,
  dropping what it had fetched above it: writes acknowledged once it fetched them are gone. Any fault
  that moves a partition leadership while producers write shows it (a kill, a pause longer than the
  broker session timeout, a leader-targeted fault on a partition leader, a power loss or a full disk).
- ack-before-hw: acks=all answered at the leader's append; an isolated leader keeps acknowledging
  writes its followers never get, and they are gone when it rejoins as a follower. (On the disk family
  it is caught less often: followers fetch within milliseconds, so a power loss takes few writes that
  only the leader had.)
- append-duplicates (the client family's): a retried idempotent batch is appended again instead of
  answered with the original's offsets; a client cut while its answer was on the way retries after the
  heal, and the value is in the log twice (`duplicate`).

The seeds fix the schedules (which node, how long, which role): the leader family's seed starts with
kill-leader on a partition leader. The replica audit (a JVM start per run) is left to test_faults.py;
these runs pass --no-audit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.faults.netns import supported
from tests.jepsen_like.test_faults import assert_left_nothing, break_env

pytestmark = pytest.mark.slow

FAMILIES = {
    "kill": ("kill",),
    "pause": ("pause",),
    "partition": ("isolate", "majority", "bridge", "ring", "one-way"),
    "leader": ("kill-leader", "pause-leader", "isolate-leader"),
}
CASES = {  # family: (seed, broken build)
    "kill": (11, "truncate-to-hw"),
    "pause": (21, "truncate-to-hw"),
    "partition": (22, "ack-before-hw"),
    "leader": (34, "truncate-to-hw"),
}
# Families whose valid run is elsewhere in CI (test_faults.py: lose-tail, disk-full; test_schedules.py: the
# client partitions), with a broken build only: broken_builds.py measures their catch rate.
BROKEN_ONLY = {
    "disk": (("lose-tail", "disk-full"), "truncate-to-hw"),  # caught 4 of 5; ack-before-hw 2 of 5 (docs/jepsen.md)
    "client": (("client-partition", "client-partition-leader"), "append-duplicates"),
}
NEMESES_OF = {**FAMILIES, **{f: nemeses for f, (nemeses, _) in BROKEN_ONLY.items()}}
BREAK_OF = {**{f: broken for f, (_, broken) in CASES.items()}, **{f: b for f, (_, b) in BROKEN_ONLY.items()}}
TIME_LIMIT_S = 6
RUN_TIMEOUT_S = 400
LOST = ("lost-write", "inconsistent-offsets", "unseen", "workload-acked-not-read-at-offset")


def start_run(out: Path, family: str, broken: str | None, seed: int) -> subprocess.Popen[str]:
    env = break_env(broken)
    args = ("--seed", str(seed), "--time-limit-s", str(TIME_LIMIT_S), "--nemesis", family, "--no-audit")
    return subprocess.Popen(
        [sys.executable, "-m", "kraftpy.tools.cli", "faults", "run", *args, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], out: Path, family: str) -> tuple[int, dict, str]:
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # its owner gone, the next run's setup (or `faults cleanup`) removes its network
        output, _ = proc.communicate()
    path = out / "summary.json"
    assert path.exists(), f"{family}: no summary; exit {proc.returncode}\n{output[-5000:]}"
    summary = json.loads(path.read_text())
    missing = [n for n in NEMESES_OF[family] if not summary["faults"].get(n)]
    assert not missing, f"{family}: {missing} never happened: {summary['faults']}"
    return proc.returncode, summary, output[-5000:]


# kill and pause run in test_faults.py's run (with the other trust faults); here the families it lacks.
IN_CI = ("leader", "partition")


@pytest.mark.parametrize("family", IN_CI)
def test_a_short_run_of_each_family_is_valid(tmp_path: Path, family: str) -> None:
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")
    seed, _ = CASES[family]
    code, summary, output = finish(start_run(tmp_path / "run", family, None, seed), tmp_path / "run", family)
    assert code == 0 and summary["valid"] is True, output
    assert summary["sends"]["ok"] > 0
    if family == "leader":  # the roles' holders come from the cluster's metadata, not the fallback
        starts = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
        found = [e["value"]["holder_found"] for e in starts if e["f"].endswith("-leader-start")]
        assert any(found), found
    assert_left_nothing(tmp_path / "run")
