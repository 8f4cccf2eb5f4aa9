"""The audit of `__cluster_metadata`: every voter's Raft log identical below the commit index.

Each voter's log is written by the real DurableLog (so each node stamps its own clock on its
batches, as in a cluster); one cluster is clean (with an uncommitted tail that differs, which is
legitimate), one has a voter whose log was tampered with below the commit index.
"""

from __future__ import annotations

import time
from pathlib import Path

from kraftpy.raft.log import Entry, EntryKind
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR, DurableLog
from kraftpy.spark_jobs.audit import plan_audit, run_audit
from kraftpy.spark_jobs.replicas import METADATA_TOPIC
from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry

VOTERS = (1, 2, 3)
BROKER_ONLY = 4
COMMITTED = 8  # every voter's checkpointed high watermark


def entries(node: int, *, tamper_at: int | None = None, tail: int = 0) -> list[Entry]:
    """Leader change at 0 (epoch 1), data 1-3, leader change at 4 (epoch 2), data 5-9, then `tail` of the node's own."""
    out = [Entry(0, 1, b"lc-1", EntryKind.LEADER_CHANGE)]
    out += [Entry(o, 1, f"record-{o}".encode()) for o in range(1, 4)]
    out += [Entry(4, 2, b"lc-2", EntryKind.LEADER_CHANGE)]
    out += [Entry(o, 2, f"record-{o}".encode()) for o in range(5, 10)]
    if tamper_at is not None:
        out[tamper_at] = Entry(tamper_at, out[tamper_at].epoch, b"forged")
    out += [Entry(10 + i, 3, f"uncommitted-{node}-{i}".encode()) for i in range(tail)]
    return out


def write_raft_cluster(root: Path, tampered: dict[int, int] | None = None) -> None:
    """Three voters and a broker; `tampered` maps a voter to the offset its log is forged at."""
    nodes = tuple(NodeEntry(n, "127.0.0.1", 19_000 + n, ("broker", "controller")) for n in VOTERS)
    nodes += (NodeEntry(BROKER_ONLY, "127.0.0.1", 19_000 + BROKER_ONLY, ("broker",)),)
    layout = ClusterLayout(root.resolve(), "metadata-audit", nodes)
    layout.save()
    for entry in layout.nodes:
        log = DurableLog.open(layout.data_dir(entry) / METADATA_LOG_DIR)
        try:
            found = entries(entry.node_id, tamper_at=(tampered or {}).get(entry.node_id), tail=2)
            for at in range(0, len(found), 3):  # several appends: several batches, several timestamps
                log.append(found[at : at + 3])
            log.flush(log.end_offset)
            log.set_high_watermark(COMMITTED)
        finally:
            log.close()
        time.sleep(0.01)  # the next voter's batches carry a later clock, as on real nodes


def metadata_findings(spark, root: Path) -> list[dict]:
    result = run_audit(spark, plan_audit(root))
    return [f for f in result.findings if f["topic"] == METADATA_TOPIC]


def test_every_voter_log_is_audited_and_a_clean_quorum_has_no_finding(spark, tmp_path: Path) -> None:
    root = tmp_path / "clean"
    write_raft_cluster(root)
    plan = plan_audit(root)
    voters = sorted(r.node_id for r in plan.replicas if r.topic == METADATA_TOPIC)
    assert voters == list(VOTERS)  # the broker-only node is no voter
    result = run_audit(spark, plan)
    assert [f for f in result.findings if f["topic"] == METADATA_TOPIC] == []
    rows = [r for r in result.replicas if r["topic"] == METADATA_TOPIC]
    assert sorted((r["node"], r["records"], r["high_watermark"]) for r in rows) == [(n, 12, COMMITTED) for n in VOTERS]


def test_a_tampered_voter_log_below_the_commit_index_is_found_and_one_above_it_is_not(spark, tmp_path: Path) -> None:
    """Node 2 forged below the commit index: a finding. Node 3 differs at the first uncommitted offset, as
    a voter may before its tail is truncated to the new leader's: no finding (one audit checks both)."""
    root = tmp_path / "tampered"
    write_raft_cluster(root, tampered={2: 6, 3: COMMITTED})
    found = metadata_findings(spark, root)
    assert [(f["kind"], f["offset"]) for f in found] == [("divergence", 6)]  # none at offset 8
    assert "node 2" in found[0]["detail"] and "forged" in found[0]["detail"]
