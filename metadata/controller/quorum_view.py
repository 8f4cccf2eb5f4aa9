"""The describe_quorum answer (kafka-metadata-quorum describe --status/--replication) from Raft's status.

A pure function of what the raft component reports, so the route, the CLI and
tests agree on one shape: `{leader_id, epoch, high_watermark, voters: [{node_id,
log_end_offset, lag, last_fetch_ms_ago}], observers: [same]}`. `lag` is the
leader's log end offset minus the replica's (None while the leader has not
heard from it); the leader's own row has lag 0 and last_fetch_ms_ago 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _replicas(rows: Any, leader_end: int, leader_id: Any) -> list[dict[str, Any]]:
    out = []
    for row in rows or ():
        if not isinstance(row, Mapping):
            continue
        end = row.get("log_end_offset", row.get("end_offset", -1))
        end = end if isinstance(end, int) else -1
        ago = 0 if row.get("node_id") == leader_id else row.get("last_fetch_ms_ago")
        out.append(
            {
                "node_id": row.get("node_id"),
                "log_end_offset": end,
                "lag": max(0, leader_end - end) if end >= 0 else None,
                "last_fetch_ms_ago": ago if isinstance(ago, int) else None,
            }
        )
    return sorted(out, key=lambda r: (r["node_id"] is None, r["node_id"]))


def describe_quorum(status: Mapping[str, Any], raft: Any = None) -> dict[str, Any]:
    leader_end = status.get("log_end_offset", -1)
    leader_end = leader_end if isinstance(leader_end, int) else -1
    hw = status.get("high_watermark", -1)
    return {
        "leader_id": status.get("leader_id"),
        "epoch": status.get("epoch", -1),
        "high_watermark": hw if isinstance(hw, int) else -1,
        "voters": _replicas(status.get("voters"), leader_end, status.get("leader_id")),
        "observers": _replicas(status.get("observers"), leader_end, status.get("leader_id")),
    }
