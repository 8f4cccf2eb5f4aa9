"""The nemesis: one fault at a time on a random node, held for a while, then healed; logged in the history.

Faults: `kill` (SIGKILL, then the node is started again), `pause` (SIGSTOP, then
SIGCONT) and `isolate` (nobody can reach the node; see cluster.py), the last
only where partition_supported() says the machine allows it. The schedule
comes from a seeded Random, so a failing run names its seed and can be
replayed in the same order (timing still varies: real processes).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

from tests.jepsen_like.cluster import JepsenCluster
from tests.jepsen_like.history import HistoryWriter

HOLD_S = (0.5, 2.5)  # how long a fault lasts
QUIET_S = (0.5, 1.5)  # how long the cluster gets between faults
FAULTS = ("kill", "pause", "isolate")

_UNDO = {"kill": "restart", "pause": "resume", "isolate": "heal"}


async def run_nemesis(
    cluster: JepsenCluster,
    history: HistoryWriter,
    *,
    deadline: float,
    rng: random.Random,
    faults: tuple[str, ...],
) -> Counter[str]:
    """Inject faults until the deadline; every fault is healed before this returns."""
    done: Counter[str] = Counter()
    nodes = [n.node_id for n in cluster.layout().nodes]
    order: list[str] = []
    while time.monotonic() < deadline:
        await asyncio.sleep(rng.uniform(*QUIET_S))
        if time.monotonic() >= deadline:
            break
        if not order:  # every kind of fault once per round, in a random order
            order = rng.sample(faults, len(faults))
        fault, node = order.pop(), rng.choice(nodes)
        history.nemesis(fault, node)
        if fault == "kill":
            await asyncio.to_thread(cluster.kill, node)
        elif fault == "pause":
            cluster.pause(node)
        else:
            cluster.isolate(node)
        done[fault] += 1
        try:
            await asyncio.sleep(rng.uniform(*HOLD_S))
        finally:
            if fault == "kill":
                cluster.restart(node)
            elif fault == "pause":
                cluster.resume(node)
            else:
                cluster.heal(node)
            history.nemesis(_UNDO[fault], node)
    return done
