"""Short `kraftpy faults run`s of the overlapping schedule and of the loopback fallback.

- overlapping (in network namespaces, as CI must run): kills and pauses during partitions; the run is
  valid, used namespaces, every fault's start and end are in the history with its id, and at least two
  faults were on at the same time.
- clients cut from some nodes and from a partition leader (nftables in the client namespace): valid.
- loopback (`--network loopback`, what a machine without root or `ip`/`nft` gets): the run says so,
  runs kill and pause on nodes at 127.x.y.z addresses, is valid, and refuses a partition nemesis
  with exit 2 and a message that says why.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from kraftpy.tools.faults.netns import supported
from tests.jepsen_like.test_faults import assert_left_nothing, faults_run

pytestmark = pytest.mark.slow  # in the "processes" xdist group, as all of tests/jepsen_like (tests/conftest.py)

TIME_LIMIT_S = "6"
RUN_TIMEOUT_S = 300


def spans(out: Path) -> dict[int, dict]:
    """fault id -> its nemesis, start and end (monotonic ns) from the history."""
    found: dict[int, dict] = {}
    for line in (out / "history.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["process"] != "nemesis" or not e["f"].endswith(("-start", "-end")):
            continue
        name, _, phase = e["f"].rpartition("-")
        found.setdefault(e["value"]["fault"], {"nemesis": name})[phase] = e["time"]
    return found


def test_overlapping_faults_in_namespaces_are_valid_and_overlap(tmp_path: Path) -> None:
    ok, why = supported()
    if not ok:
        pytest.fail(f"CI runs fault runs in network namespaces: {why} (docs/jepsen.md)")
    out = tmp_path / "run"
    args = ("--seed", "7", "--time-limit-s", TIME_LIMIT_S, "--schedule", "overlapping", "--no-audit")
    nemeses = ("--nemesis", "kill", "--nemesis", "pause", "--nemesis", "isolate", "--network", "netns")
    proc, summary = faults_run(out, *args, *nemeses, timeout_s=RUN_TIMEOUT_S)
    assert proc.returncode == 0 and summary is not None and summary["valid"] is True, proc.stderr[-4000:]
    assert summary["network"] == "netns"
    layout = json.loads((out / "cluster" / "cluster.json").read_text())
    assert all(n.get("netns", "").startswith("kpf-") for n in layout["nodes"]), layout  # each node in a namespace
    found = spans(out)
    assert {s["nemesis"] for s in found.values()} == {"kill", "pause", "isolate"}
    assert all("start" in s and "end" in s and s["start"] < s["end"] for s in found.values()), found
    on = sorted(found.values(), key=lambda s: s["start"])
    assert any(b["start"] < a["end"] for a, b in itertools.pairwise(on)), on  # two faults on at once
    assert_left_nothing(out)


def test_loopback_mode_runs_node_faults_and_refuses_partitions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("--seed", "3", "--time-limit-s", TIME_LIMIT_S, "--network", "loopback", "--no-audit")
    proc, summary = faults_run(out, *args, "--nemesis", "kill", "--nemesis", "pause", timeout_s=RUN_TIMEOUT_S)
    assert proc.returncode == 0 and summary is not None and summary["valid"] is True, proc.stderr[-4000:]
    assert summary["network"] == "loopback" and "loopback mode" in proc.stderr
    assert summary["faults"].get("kill") and summary["faults"].get("pause"), summary
    layout = json.loads((out / "cluster" / "cluster.json").read_text())
    assert all(n["host"].startswith("127.") and not n.get("netns") for n in layout["nodes"]), layout
    assert_left_nothing(out)

    refused, none = faults_run(tmp_path / "refused", *args, "--nemesis", "isolate", timeout_s=60)
    assert refused.returncode == 2 and none is None
    assert "isolate" in refused.stderr and "network namespaces" in refused.stderr, refused.stderr


def test_clients_cut_from_nodes_and_from_a_partition_leader_is_valid(tmp_path: Path) -> None:
    ok, why = supported()
    if not ok:
        pytest.fail(f"CI runs fault runs in network namespaces: {why} (docs/jepsen.md)")
    out = tmp_path / "run"
    args = ("--seed", "9", "--time-limit-s", TIME_LIMIT_S, "--nemesis", "client", "--no-audit")
    proc, summary = faults_run(out, *args, timeout_s=RUN_TIMEOUT_S)
    assert proc.returncode == 0 and summary is not None and summary["valid"] is True, proc.stderr[-4000:]
    assert summary["faults"].get("client-partition") and summary["faults"].get("client-partition-leader")
    events = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    starts = [e["value"] for e in events if e["process"] == "nemesis" and e["f"].startswith("client-partition")]
    starts = [v for v in starts if "drops" in v]
    assert starts and all(v["drops"] and all(0 in pair for pair in v["drops"]) for v in starts), starts
    assert any(v.get("holder_found") for v in starts if v["nemesis"] == "client-partition-leader"), starts
    assert_left_nothing(out)
