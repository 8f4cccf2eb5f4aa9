"""A Jepsen-like run: idempotent acks=all producers on a real 3-node cluster under every fault we know.

Three `kraftpy server` processes on 127.0.0.2-4 (`cluster start --host ...`),
one of them with its data on a small disk of its own; a topic of three
partitions, replication factor 3, min_insync_replicas 2. Producer processes
record every send in a history while the nemesis kills, pauses, isolates,
cuts unsynced tails and fills the disk, one fault at a time (nemesis.py), and
a hostile local process sends malformed, forged and oversized requests
throughout (hostile.py). Every named fault must have happened at least once.
Then every fault is healed, the test waits (bounded) until every replica is
back in its ISR, a consumer reads everything back into the same history, and:

1. `kraftpy check HISTORY --model kafka` must find no anomaly (no lost,
   duplicated or reordered write; every acknowledged value read at its offset);
2. after a graceful `cluster stop`, `kraftpy audit --history HISTORY` must find
   nothing in the replicas' files (no divergence below the high watermark, no
   gap, no epoch going back, no acknowledged write missing, no duplicate).

No node may die on its own, and no poison batch of the hostile process may be
stored. `--jepsen-time-s 600` makes it a soak; `--jepsen-seed N` replays a nemesis order.
The history, the audit's HTML and the cluster's files stay in the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.workload import produce, read_all
from tests.integration.test_cluster_support import wait_for
from tests.jepsen_like.cluster import JepsenCluster, partition_supported
from tests.jepsen_like.disk import loop_disk_supported
from tests.jepsen_like.hostile import HostileClient
from tests.jepsen_like.nemesis import FAULTS, run_nemesis

pytestmark = pytest.mark.slow

TOPIC = "jepsen"
PARTITIONS = 3
PROCESSES = 6
DEFAULT_TIME_S = 30.0  # two rounds of the five faults, on average
MAX_SENDS_PER_S = 2_000  # bounds the send count however fast the cluster is
AUDIT_TIMEOUT_S = 300


def hostile_client(cluster: JepsenCluster, rng: random.Random) -> HostileClient:
    layout = cluster.layout()
    nodes = {n.node_id: (n.host, n.port) for n in layout.nodes}
    kafka = {n.node_id: (n.host, n.kafka_port) for n in layout.nodes}
    return HostileClient(nodes, kafka, layout.cluster_id, TOPIC, random.Random(rng.random()))


async def workload_under_faults(
    cluster: JepsenCluster, history: HistoryWriter, time_s: float, rng: random.Random, faults: tuple[str, ...]
):
    end = RunEnd(time_s)
    hostile = hostile_client(cluster, rng)
    stats, done, attacks = await asyncio.gather(
        produce(
            history,
            cluster.bootstrap,
            TOPIC,
            PARTITIONS,
            processes=PROCESSES,
            end=end,
            max_sends=int(time_s * MAX_SENDS_PER_S),
            rng=random.Random(rng.random()),
        ),
        run_nemesis(cluster, history, end=end, rng=rng, faults=faults, topic=TOPIC),
        hostile.run(end),
    )
    return stats, done, attacks


def machine_supports_every_fault() -> None:
    """A fault the machine cannot do fails the run: a run that skips a fault proves nothing about it."""
    for name, (ok, how) in (("isolate", partition_supported()), ("disk-full", loop_disk_supported())):
        if not ok:
            pytest.fail(f"the {name} fault cannot run here: {how} (fault runs need root; see docs/jepsen.md)")


class Phases:
    """Wall time of each phase, printed as a figure (never asserted)."""

    def __init__(self) -> None:
        self.took: list[tuple[str, float]] = []
        self._at = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.took.append((name, now - self._at))
        self._at = now


def diagnosis(cluster: JepsenCluster) -> str:
    """What a stuck run looks like: the topic, the cluster's health, each node's log tail."""
    parts = [json.dumps(cluster.describe(TOPIC)["partitions"]), json.dumps(cluster.health())]
    for node in (1, 2, 3):
        parts.append(
            f"--- node {node} (pid {cluster.pid(node)}):\n" + "\n".join(cluster.log_text(node).splitlines()[-25:])
        )
    return "\n".join(parts)


def replicas_in_sync(cluster: JepsenCluster) -> bool:
    partitions = cluster.describe(TOPIC)["partitions"]
    return all(len(p["isr"]) == 3 and p["leader"] in (1, 2, 3) for p in partitions)


def test_acked_writes_survive_every_fault(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    time_s = request.config.getoption("--jepsen-time-s", default=None) or DEFAULT_TIME_S
    seed = request.config.getoption("--jepsen-seed", default=None)
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    machine_supports_every_fault()
    faults = FAULTS
    small_disk_node = rng.choice((1, 2, 3))
    print(f"jepsen run: seed {seed}, {time_s:.0f} s, faults {faults}, small disk on node {small_disk_node}")
    history_path = tmp_path / "history.jsonl"
    history = HistoryWriter(history_path)
    cluster = JepsenCluster(tmp_path / "cluster", small_disk_node=small_disk_node)
    try:
        run_checked(cluster, history, history_path, time_s, seed, rng, faults)
    finally:
        cluster.release_disk()


def run_checked(
    cluster: JepsenCluster,
    history: HistoryWriter,
    history_path: Path,
    time_s: float,
    seed: int,
    rng: random.Random,
    faults: tuple[str, ...],
) -> None:
    tmp_path = history_path.parent
    phases = Phases()
    try:
        cluster.start_cluster()
        phases.done("cluster start")
        cluster.ok(
            "topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3",
            "--config", "min_insync_replicas=2",
        )  # fmt: skip
        stats, done, attacks = asyncio.run(workload_under_faults(cluster, history, time_s, rng, faults))
        phases.done("workload under faults")
        print(f"hostile client: {json.dumps(attacks.summary())}")
        missing = [f for f in faults if not done[f]]
        assert not missing, f"seed {seed}: faults {missing} never happened in {time_s:.0f} s (done: {dict(done)})"
        assert attacks.poison_accepted == 0, f"seed {seed}: a leader stored {attacks.poison_accepted} poison batch(es)"
        restarted = cluster.heal_all()
        assert not restarted, f"seed {seed}: nodes {restarted} died during the run (see their server.log)"
        try:
            wait_for("every replica back in its ISR", lambda: replicas_in_sync(cluster), timeout_s=90)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}\n{diagnosis(cluster)}") from None
        phases.done("ISRs full again")
        seen = asyncio.run(read_all(history, cluster.bootstrap, TOPIC, PARTITIONS))
        history.close()
        phases.done("read back")
        print(f"seed {seed}: {stats.invoked} sends, {stats.ok} ok, {stats.info} info; faults {dict(done)}")
        assert stats.ok > 0 and sum(done.values()) > 0, (stats, done)
        for partition, acked in stats.acked.items():  # the workload's own view, before the checkers'
            at = {m: o for o, m in enumerate(seen[partition])}
            lost = [m for m, o in acked.items() if at.get(m) != o]
            assert not lost, f"seed {seed}: partition {partition} lost or moved acknowledged {lost[:5]}"
        check = cluster.cli("check", str(history_path), "--model", "kafka", "--json")
        assert check.code == 0, f"seed {seed}: {check}"
        assert json.loads(check.stdout)["valid"] is True, check.stdout[:2000]
        phases.done("kraftpy check")
    finally:
        history.close()
        cluster.close()  # graceful: every replica checkpoints its final high watermark
    phases.done("cluster stop")
    audit = cluster.cli(
        "audit", "--cluster-dir", str(cluster.dir), "--history", str(history_path), "--topic", TOPIC,
        "--json", "--html", str(tmp_path / "audit.html"), timeout_s=AUDIT_TIMEOUT_S,
    )  # fmt: skip
    phases.done("kraftpy audit")
    print("phases (s): " + ", ".join(f"{name} {took:.1f}" for name, took in phases.took))
    assert audit.code == 0, f"seed {seed}: {audit}"
    report = json.loads(audit.stdout)
    assert report["ok"] and report["findings"] == []
    assert report["acked_writes"] == sum(len(acked) for acked in stats.acked.values())
    records = {(r["topic"], r["partition"], r["node"]): r["records"] for r in report["replicas"]}
    for partition in range(PARTITIONS):
        assert {records[(TOPIC, partition, node)] for node in (1, 2, 3)} == {len(seen[partition])}
