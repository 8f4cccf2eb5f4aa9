"""Helpers shared by the Raft unit tests (no tests here): build a node, play a shell's part by hand."""

from __future__ import annotations

import random

from kraftpy.raft.actions import Action, Flush, Send
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import Entry
from kraftpy.raft.memory_log import MemoryLog
from kraftpy.raft.node import RaftNode
from kraftpy.raft.quorum_state import QuorumState

CLUSTER = "unit-cluster"


def make_log(*epochs: int, start: int = 0) -> MemoryLog:
    """A log whose entries have these epochs (offsets from `start`)."""
    log = MemoryLog()
    log.append(Entry(start + i, e, f"e{start + i}".encode()) for i, e in enumerate(epochs))
    log.flush(log.end_offset)
    return log


def make_node(
    node_id: int = 1,
    voters: tuple[int, ...] = (1, 2, 3),
    log: MemoryLog | None = None,
    state: QuorumState | None = None,
    now_ms: int = 0,
    **config: int,
) -> tuple[RaftNode, MemoryLog]:
    log = log if log is not None else MemoryLog()
    # These tests exercise the append linger at Kafka's 25 ms (quorum.append.linger.ms);
    # RaftConfig's default is the node's, 0 (append at once).
    config.setdefault("append_linger_ms", 25)
    node = RaftNode(
        node_id=node_id,
        voters=voters,
        cluster_id=CLUSTER,
        log=log,
        quorum_state=state or QuorumState(),
        rng=random.Random(0),
        now_ms=now_ms,
        config=RaftConfig(**config),
    )
    return node, log


def drain(node: RaftNode, log: MemoryLog, flush: bool = True, now_ms: int = 0) -> list[Action]:
    """Perform the node's actions as a shell would; flushes complete at once if `flush`."""
    actions = node.take_actions()
    flushes = []
    for action in actions:
        if log.apply(action):
            continue
        if isinstance(action, Flush):
            flushes.append(action.up_to_offset)
    if flush:
        for offset in flushes:
            log.flush(offset)
            node.on_flushed(offset, now_ms)
            actions += drain(node, log, flush=True, now_ms=now_ms)
    return actions


def sent(actions: list[Action], kind: type | None = None) -> list:
    return [a.message for a in actions if isinstance(a, Send) and (kind is None or isinstance(a.message, kind))]
