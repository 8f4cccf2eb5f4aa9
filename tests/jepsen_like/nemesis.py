"""The nemesis: one fault at a time on a random node, held for a while, then healed; logged in the history.

Faults:
- `kill`: SIGKILL, then the node is started again;
- `pause`: SIGSTOP, then SIGCONT;
- `isolate`: nobody can reach the node (see cluster.py), only where partition_supported() allows it;
- `lose-tail`: SIGKILL, a power loss's cut of the unsynced tails, an immediate restart (disk.py);
- `disk-full`: the small-disk node's file system filled to the last byte, then freed and the
  node restarted gracefully (Kafka's procedure once a log directory failed).

Every named fault runs once per round, in a random order, so a run of a few
rounds has done each; the caller checks that. The schedule comes from a seeded
Random, so a failing run names its seed and can be replayed in the same order
(timing still varies: real processes).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from tests.jepsen_like.cluster import JepsenCluster

HOLD_S = (0.5, 2.5)  # how long a fault lasts
QUIET_S = (0.5, 1.5)  # how long the cluster gets between faults
FAULTS = ("kill", "pause", "isolate", "lose-tail", "disk-full")

_UNDO = {"kill": "restart", "pause": "resume", "isolate": "heal", "lose-tail": "restarted", "disk-full": "free-disk"}


async def _inject(cluster: JepsenCluster, fault: str, node: int, topic: str, rng: random.Random) -> object:
    """Start one fault; returns what the history should say about it."""
    if fault == "kill":
        await asyncio.to_thread(cluster.kill, node)
    elif fault == "pause":
        cluster.pause(node)
    elif fault == "isolate":
        await asyncio.to_thread(cluster.isolate, node)
    elif fault == "lose-tail":
        cuts = await asyncio.to_thread(cluster.lose_tail, node, topic, rng)
        return {"node": node, "cuts": [c.describe() for c in cuts]}
    elif fault == "disk-full":
        taken = await asyncio.to_thread(cluster.fill_disk, node)
        return {"node": node, "bytes_taken": taken}
    else:
        raise ValueError(f"unknown fault {fault!r}")
    return node


def _heal(cluster: JepsenCluster, fault: str, node: int) -> None:
    if fault == "kill":
        cluster.restart(node)
    elif fault == "pause":
        cluster.resume(node)
    elif fault == "isolate":
        cluster.heal(node)
    elif fault == "disk-full":
        cluster.free_disk()
        cluster.restart_gracefully(node)
    # lose-tail restarted the node at once: nothing to undo


async def run_nemesis(
    cluster: JepsenCluster,
    history: HistoryWriter,
    *,
    end: RunEnd,
    rng: random.Random,
    faults: tuple[str, ...],
    topic: str,
) -> Counter[str]:
    """Inject faults until the run's end (holding it until every fault has run once); all healed on return."""
    done: Counter[str] = Counter()
    nodes = [n.node_id for n in cluster.layout().nodes]
    order: list[str] = []
    while True:
        if not order:  # every kind of fault once per round, in a random order
            order = rng.sample(faults, len(faults))
        fault = order.pop()
        # The next fault is chosen, and the end held for a first-round one, before the quiet gap: checking
        # the end after a slow heal instead let a run stop with a fault never done (seen under load).
        if not done[fault]:
            end.hold_until_done()
        elif end.passed():
            break
        await asyncio.sleep(rng.uniform(*QUIET_S))
        node = cluster.small_disk_node if fault == "disk-full" else rng.choice(nodes)
        try:
            history.nemesis(fault, await _inject(cluster, fault, node, topic, rng))
            done[fault] += 1
            await asyncio.sleep(rng.uniform(*HOLD_S))
        finally:
            await asyncio.to_thread(_heal, cluster, fault, node)
            history.nemesis(_UNDO[fault], node)
    return done
