"""Consumer groups end to end on a real 3-node cluster: Consumer(group_id=...) against the brokers' coordinator.

One cluster for the module (`kraftpy cluster start`, group_initial_rebalance_delay_ms 0 as every local
cluster); each test has its own topic and group. Consumers run in this process, except those that get
SIGKILLed (test_groups_consumer_child.py, by pid). Every wait is bounded and fails with what it saw; nothing
asserts on elapsed time. The coordinator's node is killed last, since the cluster stays one node short.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from kraftpy.client import ConsumerRebalanceListener, Producer, TopicPartition
from kraftpy.client.cluster_client import monotonic_ms
from kraftpy.client.consumer import Consumer
from kraftpy.client.types import ConsumerRecord
from tests.conftest import REPO_ROOT
from tests.integration.test_cluster_support import LocalCluster

pytestmark = pytest.mark.slow
SESSION_TIMEOUT_MS = 6_000  # the broker's minimum
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("groups") / "cluster")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def bootstrap(cluster: LocalCluster) -> str:
    return cluster.layout().bootstrap_servers


def create_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    cluster.ok("topics", "create", name, "--partitions", str(partitions), "--replication-factor", "3")


def consumer(cluster: LocalCluster, group: str, **config: Any) -> Consumer:
    settings = {
        "group_id": group,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": 500,
        **config,
    }
    return Consumer(bootstrap(cluster), **settings)


async def produce(cluster: LocalCluster, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    async with Producer(bootstrap(cluster), linger_ms=0) as producer:
        for i in range(start, start + per_partition):
            for p in range(partitions):
                await producer.send(topic, f"{p}:{i}".encode(), partition=p)
        await producer.flush()


@dataclass
class Member:
    """A consumer in this process, with every assignment it got (per generation) and every record it polled."""

    name: str
    consumer: Consumer
    assignments: list[tuple[int, frozenset[TopicPartition]]] = field(default_factory=list)
    revoked: list[frozenset[TopicPartition]] = field(default_factory=list)
    records: list[tuple[int, ConsumerRecord]] = field(default_factory=list)  # (ms received, record)

    def listener(self) -> ConsumerRebalanceListener:
        member = self

        class Record(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, partitions):
                member.revoked.append(frozenset(partitions))

            async def on_partitions_assigned(self, partitions):
                generation = member.consumer.group_metadata().generation_id
                member.assignments.append((generation, frozenset(member.consumer.assignment())))

        return Record()

    def offsets(self, tp: TopicPartition) -> list[int]:
        return [r.offset for _, r in self.records if r.topic_partition == tp]


async def poll_until(members: list[Member], what: str, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Poll every member (each in its own loop, as separate applications would) until `done()`; bounded."""
    stop = asyncio.Event()

    async def run(member: Member) -> None:
        while not stop.is_set():
            for record in await member.consumer.poll(100):
                member.records.append((monotonic_ms(), record))

    tasks = [asyncio.create_task(run(m)) for m in members]
    try:
        deadline = monotonic_ms() + timeout_s * 1000
        while not done():
            for task in tasks:
                if task.done():
                    task.result()  # a poll() raised: fail with it
            if monotonic_ms() > deadline:
                seen = {m.name: (sorted(map(str, m.consumer.assignment())), len(m.records)) for m in members}
                raise AssertionError(f"timed out waiting for {what}; assignments and record counts: {seen}")
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


def assert_no_partition_owned_twice(members: list[Member]) -> None:
    by_generation: dict[int, list[frozenset[TopicPartition]]] = {}
    for m in members:
        for generation, parts in m.assignments:
            by_generation.setdefault(generation, []).append(parts)
    for generation, sets in by_generation.items():
        flat = [tp for s in sets for tp in s]
        assert len(flat) == len(set(flat)), f"generation {generation}: a partition was assigned twice: {sets}"


def owners(members: list[Member]) -> dict[TopicPartition, str]:
    return {tp: m.name for m in members for tp in m.consumer.assignment()}


class Child:
    """test_groups_consumer_child.py in a subprocess; its JSON lines are collected by a reader thread."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, commit_every: int) -> None:
        args = [bootstrap(cluster), group, topic, str(commit_every)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_groups_consumer_child", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def latest(self, kind: str) -> Any:
        found = [e[kind] for e in list(self.events) if kind in e]
        return found[-1] if found else None

    def all(self, kind: str) -> list[Any]:
        return [e[kind] for e in list(self.events) if kind in e]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)


# (1) ------------------------------------------------------------------------------------------------------------


async def test_three_consumers_share_six_partitions_never_owning_one_twice(cluster: LocalCluster) -> None:
    topic, group = "share", "share-group"
    create_topic(cluster, topic, 6)
    members = [Member(f"c{i}", consumer(cluster, group)) for i in range(3)]
    try:
        for m in members:
            m.consumer.subscribe([topic], listener=m.listener())
        await poll_until(
            members,
            "a generation with two partitions each",
            lambda: all(len(m.consumer.assignment()) == 2 for m in members) and len(owners(members)) == 6,
        )
        await produce(cluster, topic, 6, 5)
        await poll_until(members, "all 30 records", lambda: sum(len(m.records) for m in members) >= 30)
    finally:
        for m in members:
            await m.consumer.close()
    assert_no_partition_owned_twice(members)
    final = {m.assignments[-1][0] for m in members}
    assert len(final) == 1, f"the members ended in different generations: {final}"
    for m in members:
        # Each record came to the one member owning its partition, once.
        assert {r.topic_partition for _, r in m.records} <= m.assignments[-1][1]
        for tp in m.assignments[-1][1]:
            assert m.offsets(tp) == list(range(5)), f"{m.name} read {tp}: {m.offsets(tp)}"
    assert sum(len(m.records) for m in members) == 30


# (2) ------------------------------------------------------------------------------------------------------------


async def test_a_sigkilled_consumer_loses_its_partitions_after_the_session_timeout(cluster: LocalCluster) -> None:
    topic, group = "crash", "crash-group"
    create_topic(cluster, topic, 6)
    child = Child(cluster, group, topic, commit_every=0)
    members = [Member(f"c{i}", consumer(cluster, group)) for i in range(2)]
    try:
        for m in members:
            m.consumer.subscribe([topic], listener=m.listener())

        def three_way() -> bool:
            theirs = child.latest("assigned")
            return theirs is not None and len(theirs) == 2 and all(len(m.consumer.assignment()) == 2 for m in members)

        await poll_until(members, "three members with two partitions each", three_way)
        dead = {TopicPartition(t, p) for t, p in child.latest("assigned")}
        assert not dead & set(owners(members)), "the child's partitions were also ours"
        child.kill()
        # The coordinator removes the dead member when its session times out, then the two survivors split all six.
        await poll_until(
            members,
            "the dead member's partitions reassigned",
            lambda: len(owners(members)) == 6 and all(len(m.consumer.assignment()) == 3 for m in members),
        )
        await produce(cluster, topic, 6, 2)
        await poll_until(members, "records of the dead member's partitions", lambda: all(
            any(r.topic_partition == tp for m in members for _, r in m.records) for tp in dead
        ))  # fmt: skip
    finally:
        child.kill()
        for m in members:
            await m.consumer.close()
    assert_no_partition_owned_twice(members)


# (3) ------------------------------------------------------------------------------------------------------------


async def test_commits_after_processing_lose_nothing_and_redeliver_only_the_uncommitted(cluster: LocalCluster) -> None:
    topic, group, per_partition, commit_every = "commits", "commits-group", 40, 7
    create_topic(cluster, topic, 2)
    await produce(cluster, topic, 2, per_partition)
    child = Child(cluster, group, topic, commit_every=commit_every)
    try:
        deadline = monotonic_ms() + WAIT_S * 1000
        # Kill it mid-stream: after a few commits, with records handled since the last one.
        while len(child.all("committed")) < 3 and monotonic_ms() < deadline and child.proc.poll() is None:
            await asyncio.sleep(0.02)
        child.kill()
    finally:
        child.kill()
    assert len(child.all("committed")) >= 3, f"the child did not get going: {child.events[-5:]}"
    handled_before = {(p, o) for p, o in child.all("processed")}
    last_commit = {int(p): o for p, o in child.latest("committed").items()}

    member = Member("after", consumer(cluster, group, enable_auto_commit=False))
    try:
        member.consumer.subscribe([topic], listener=member.listener())
        committed = await member.consumer.committed([TopicPartition(topic, p) for p in range(2)])
        # The child may have died between a commit and its line: the group's offset is at least the one printed.
        for p in range(2):
            seen = last_commit.get(p, 0)
            got = committed[TopicPartition(topic, p)]
            assert (got.offset if got else 0) >= seen
        await poll_until(
            [member], "the rest of the records", lambda: len({(r.partition, r.offset) for _, r in member.records}
                                                             | handled_before) >= 2 * per_partition,
        )  # fmt: skip
    finally:
        await member.consumer.close()
    after = [(r.partition, r.offset) for _, r in member.records]
    assert len(after) == len(set(after)), "the new member got a record twice"
    assert handled_before | set(after) == {(p, o) for p in range(2) for o in range(per_partition)}, "a record was lost"
    for p in range(2):
        resumed_at = min(o for q, o in after if q == p) if any(q == p for q, _ in after) else per_partition
        handled_up_to = max((o for q, o in handled_before if q == p), default=-1) + 1
        committed_offset = committed[TopicPartition(topic, p)]
        start = committed_offset.offset if committed_offset else 0
        assert resumed_at == start, f"partition {p}: resumed at {resumed_at}, committed {start}"
        redelivered = handled_up_to - resumed_at
        # Only what was handled after the last commit comes again: at most one commit interval.
        assert 0 <= redelivered <= commit_every, f"partition {p}: {redelivered} records redelivered"


# (4) ------------------------------------------------------------------------------------------------------------


async def test_cooperative_rebalance_keeps_untouched_partitions_flowing(cluster: LocalCluster) -> None:
    topic, group, partitions = "coop", "coop-group", 6
    create_topic(cluster, topic, partitions)
    coop = {"partition_assignment_strategy": ["cooperative-sticky"]}
    members = [Member(f"c{i}", consumer(cluster, group, **coop)) for i in range(3)]
    newcomer = Member("c3", consumer(cluster, group, **coop))
    stop_producing = asyncio.Event()

    async def keep_producing() -> None:
        async with Producer(bootstrap(cluster), linger_ms=0) as producer:
            i = 0
            while not stop_producing.is_set():
                for p in range(partitions):
                    await producer.send(topic, f"{p}:{i}".encode(), partition=p)
                i += 1
                await asyncio.sleep(0.01)

    producing = asyncio.create_task(keep_producing())
    try:
        for m in members:
            m.consumer.subscribe([topic], listener=m.listener())
        await poll_until(
            members,
            "three members with two partitions each",
            lambda: len(owners(members)) == partitions and all(len(m.consumer.assignment()) == 2 for m in members),
        )
        before = owners(members)
        for m in members:
            m.revoked.clear()
        everyone = [*members, newcomer]
        joined_at = monotonic_ms()
        newcomer.consumer.subscribe([topic], listener=newcomer.listener())
        await poll_until(
            everyone,
            "the fourth member owning partitions, all six owned",
            lambda: bool(newcomer.consumer.assignment()) and len(owners(everyone)) == partitions,
        )
        settled_at = min(at for at, _ in newcomer.records) if newcomer.records else monotonic_ms()
        moved = {tp for m in members for revoked in m.revoked for tp in revoked}  # before close() revokes the rest
    finally:
        stop_producing.set()
        await asyncio.gather(producing, return_exceptions=True)
        for m in [*members, newcomer]:
            await m.consumer.close()
    assert moved, "nothing moved to the fourth member"
    assert moved == set(newcomer.assignments[-1][1]), "only the partitions that moved were revoked"
    untouched = set(before) - moved
    assert len(untouched) == partitions - len(moved) >= 4
    # While the newcomer was joining (before its first record), the others kept consuming what stayed theirs.
    during = [(m.name, r.topic_partition) for m in members for at, r in m.records if joined_at <= at < settled_at]
    assert {tp for _, tp in during} & untouched, "no record of an untouched partition arrived during the rebalance"
    for name, tp in during:
        assert before[tp] == name, f"{tp} went to {name} during the rebalance, but was {before[tp]}'s"
    assert_no_partition_owned_twice(everyone)


# (5) ------------------------------------------------------------------------------------------------------------


async def test_the_group_moves_to_a_new_coordinator_with_its_offsets(cluster: LocalCluster) -> None:
    topic, group = "moves", "moves-group"
    create_topic(cluster, topic, 3)
    await produce(cluster, topic, 3, 10)
    member = Member("c0", consumer(cluster, group, enable_auto_commit=False))
    try:
        member.consumer.subscribe([topic], listener=member.listener())
        await poll_until([member], "the first 30 records", lambda: len(member.records) >= 30)
        await member.consumer.commit()
        first = await member.consumer.committed([TopicPartition(topic, p) for p in range(3)])
        assert {tp: om.offset for tp, om in first.items() if om} == {TopicPartition(topic, p): 10 for p in range(3)}
        old = member.consumer._group.core.coordinator  # type: ignore[union-attr]
        assert old is not None
        cluster.kill(old.node_id)

        await produce(cluster, topic, 3, 5, start=10)
        await poll_until([member], "the records produced after the kill", lambda: len(member.records) >= 45)
        await member.consumer.commit()  # to the new coordinator (it retries until the group has moved)
        new = member.consumer._group.core.coordinator  # type: ignore[union-attr]
        assert new is not None and new.node_id != old.node_id
        assert len({(r.partition, r.offset) for _, r in member.records}) == 45, "a record came twice"
    finally:
        await member.consumer.close()

    # A new member of the group finds the offsets at the new coordinator, and resumes there.
    late = Member("late", consumer(cluster, group))
    try:
        late.consumer.subscribe([topic], listener=late.listener())
        committed = await late.consumer.committed([TopicPartition(topic, p) for p in range(3)])
        assert {tp: om.offset for tp, om in committed.items() if om} == {TopicPartition(topic, p): 15 for p in range(3)}
        await produce(cluster, topic, 3, 1, start=15)
        await poll_until([late], "the one new record per partition", lambda: len(late.records) >= 3)
    finally:
        await late.consumer.close()
    assert sorted((r.partition, r.offset) for _, r in late.records) == [(p, 15) for p in range(3)]
