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

from kraftpy.client import AdminClient, ConsumerRebalanceListener, Producer, TopicPartition
from kraftpy.client.shell.consumer import Consumer
from kraftpy.client.types import ConsumerRecord
from kraftpy.protocol.shell.clock import monotonic_ms
from tests.conftest import REPO_ROOT
from tests.integration.test_cluster_support import LocalCluster, hung_process_report

pytestmark = pytest.mark.slow
SESSION_TIMEOUT_MS = 6_000  # the broker's minimum
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups") / "cluster") as c:
        yield c


def bootstrap(cluster: LocalCluster) -> str:
    return cluster.layout().kafka_bootstrap_servers


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


class Program:
    """A Python program in a subprocess (`python ARGS...`); its stdout lines are collected by a reader thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    async def wait_for(self, what: str, done: Callable[[list[str]], bool]) -> None:
        deadline = monotonic_ms() + WAIT_S * 1000
        while not done(list(self.lines)):
            if self.proc.poll() is not None or monotonic_ms() > deadline:
                self.stop()
                raise AssertionError(f"{what}: exit {self.proc.returncode}, printed {self.lines}, stderr {self.stderr}")
            await asyncio.sleep(0.05)

    def interrupt(self) -> None:
        """Ctrl-C, and wait (bounded) for the program to finish."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            report = hung_process_report(self.proc.pid)
            self.stop()
            raise AssertionError(f"the program did not stop on Ctrl-C; stderr {self.stderr}\nthen: {report}") from None

    @property
    def stderr(self) -> str:
        return self.proc.stderr.read()[-2000:] if self.proc.poll() is not None and self.proc.stderr else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Child(Program):
    """test_groups_consumer_child.py: a group member that prints JSON lines, to be SIGKILLed."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, commit_every: int) -> None:
        args = [bootstrap(cluster), group, topic, str(commit_every)]
        super().__init__("-m", "tests.integration.test_groups_consumer_child", *args)

    def all(self, kind: str) -> list[Any]:
        events = [json.loads(line) for line in list(self.lines)]
        return [e[kind] for e in events if kind in e]

    def latest(self, kind: str) -> Any:
        found = self.all(kind)
        return found[-1] if found else None

    def kill(self) -> None:
        self.stop()


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
    assert len(child.all("committed")) >= 3, f"the child did not get going: {child.lines[-5:]}"
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
        # Done when every record was handled and the member has resumed at each committed offset: the child may
        # have handled a partition to its end before dying, so the union alone can be complete before redelivery.
        resume_points = {(p, o.offset if (o := committed[TopicPartition(topic, p)]) else 0) for p in range(2)}
        resume_points = {(p, o) for p, o in resume_points if o < per_partition}

        def done() -> bool:
            got = {(r.partition, r.offset) for _, r in member.records}
            return len(got | handled_before) >= 2 * per_partition and resume_points <= got

        await poll_until([member], "the rest of the records, from each committed offset", done)
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
        # Bounded: a send that cannot complete fails in seconds instead of the default two minutes.
        bounds = {"request_timeout_ms": 5_000, "delivery_timeout_ms": 10_000, "max_block_ms": 10_000}
        async with Producer(bootstrap(cluster), linger_ms=0, **bounds) as producer:
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


# Heartbeats between polls ---------------------------------------------------------------------------------------


async def test_a_static_member_restarting_within_its_session_gets_its_partitions_back_without_a_rebalance(
    cluster: LocalCluster,
) -> None:
    # KIP-345: a member with group_instance_id does not leave on close; its next incarnation, within the session
    # timeout, takes its place and assignment in the same generation, and the other member is not disturbed.
    topic, group = "static", "static-group"
    create_topic(cluster, topic, 4)
    # A session long enough that a slow machine restarts the member well within it.
    static = {"session_timeout_ms": 30_000}
    members = [Member(f"s{i}", consumer(cluster, group, group_instance_id=f"instance-{i}", **static)) for i in range(2)]
    try:
        for m in members:
            m.consumer.subscribe([topic], listener=m.listener())
        await poll_until(
            members, "two partitions each", lambda: all(len(m.consumer.assignment()) == 2 for m in members)
        )
        generation = members[0].consumer.group_metadata().generation_id
        held = frozenset(members[1].consumer.assignment())
        revocations_before = list(members[0].revoked)
        await members[1].consumer.close()
        again = Member("s1-again", consumer(cluster, group, group_instance_id="instance-1", **static))
        members[1] = again
        again.consumer.subscribe([topic], listener=again.listener())
        await poll_until(members, "the restarted member's partitions", lambda: len(again.consumer.assignment()) == 2)
        await poll_until(members, "a few more polls", lambda: True)
        assert frozenset(again.consumer.assignment()) == held
        assert again.consumer.group_metadata().generation_id == generation
        assert members[0].consumer.group_metadata().generation_id == generation
        assert members[0].revoked == revocations_before, "the other member went through a rebalance"
    finally:
        for m in members:
            await m.consumer.close()


async def test_heartbeats_keep_a_member_that_is_busy_between_polls(cluster: LocalCluster) -> None:
    topic, group = "busy", "busy-group"
    create_topic(cluster, topic, 2)
    busy, steady = Member("busy", consumer(cluster, group)), Member("steady", consumer(cluster, group))  # both idle
    try:
        for m in (busy, steady):
            m.consumer.subscribe([topic], listener=m.listener())
        await poll_until([busy, steady], "one partition each", lambda: len(owners([busy, steady])) == 2 and all(
            len(m.consumer.assignment()) == 1 for m in (busy, steady)
        ))  # fmt: skip
        generation = busy.consumer.group_metadata().generation_id
        rebalances = len(busy.assignments) + len(steady.assignments)
        # Longer than the session timeout without a poll() (but within max_poll_interval_ms): the background
        # task's heartbeats keep the member, so the group does not rebalance.
        await asyncio.sleep(SESSION_TIMEOUT_MS * 1.5 / 1000)
        await produce(cluster, topic, 2, 1)
        await poll_until([busy, steady], "a record each", lambda: bool(busy.records) and bool(steady.records))
        assert busy.consumer.group_metadata().generation_id == generation
        assert steady.consumer.group_metadata().generation_id == generation
        assert len(busy.assignments) + len(steady.assignments) == rebalances, "no rebalance while they were busy"
    finally:
        for m in (busy, steady):
            await m.consumer.close()


# A pattern subscription ------------------------------------------------------------------------------------------


async def test_a_pattern_subscription_follows_topics_as_they_are_created(cluster: LocalCluster) -> None:
    create_topic(cluster, "pat-a", 2)
    create_topic(cluster, "nopat-a", 2)
    # A short metadata age: new topics are seen at the next refresh (Kafka's default is 5 minutes).
    member = Member("c0", consumer(cluster, "pattern-group", metadata_max_age_ms=500))
    try:
        member.consumer.subscribe(pattern=r"pat-.*", listener=member.listener())
        await poll_until([member], "pat-a's partitions", lambda: len(member.consumer.assignment()) == 2)
        assert member.consumer.subscription() == {"pat-a"}, "fullmatch: nopat-a does not match; no internal topic"
        create_topic(cluster, "pat-b", 1)
        await poll_until([member], "pat-b joining the assignment", lambda: len(member.consumer.assignment()) == 3)
        await produce(cluster, "pat-b", 1, 2)
        await poll_until([member], "pat-b's records", lambda: len(member.offsets(TopicPartition("pat-b", 0))) == 2)
    finally:
        await member.consumer.close()
    assert member.consumer.subscription() == set()
    assert {tp.topic for tp in member.assignments[-1][1]} == {"pat-a", "pat-b"}


# The runnable examples of docs/groups.md ------------------------------------------------------------------------


def doc_examples() -> list[str]:
    text = (REPO_ROOT / "docs" / "groups.md").read_text()
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


async def test_the_examples_in_docs_groups_run_as_written(cluster: LocalCluster) -> None:
    queue, pubsub, listener_example = doc_examples()[:3]
    create_topic(cluster, "orders", 6)

    async def send_orders(orders: range) -> None:
        async with Producer(bootstrap(cluster), value_serializer="json") as producer:
            for order in orders:
                await producer.send("orders", {"order": order}, partition=order % 6)
            await producer.flush()

    await send_orders(range(6))
    # The queue program runs until stopped: run it as written (on this cluster's port) until it billed every
    # order, then Ctrl-C it: its consumers close, committing their positions and leaving the group.
    with Program("-c", queue.replace("127.0.0.1:9092", bootstrap(cluster))) as program:
        await program.wait_for("every order billed", lambda lines: len(lines) >= 6)
        program.interrupt()
    # Every member left on close: the group is Empty, so a new member joins without waiting for anyone.
    async with AdminClient(bootstrap(cluster)) as admin:
        deadline = monotonic_ms() + 10_000
        while (billing := (await admin.describe_consumer_groups(["billing"]))["billing"]).state != "Empty":
            assert monotonic_ms() < deadline, f"members stayed in the group after close: {billing}"
            await asyncio.sleep(0.1)
    billed = sorted(line.split(" bills order ")[1].split(" from ")[0] for line in program.lines)
    assert billed == sorted(str({"order": o}) for o in range(6)), f"each order billed once: {program.lines}"

    # Publish-subscribe: "shipping" and "analytics" see every order; "billing" is the queue's group, which
    # resumes from its committed offsets and so sees only what came since.
    with Program("-c", pubsub.replace("127.0.0.1:9092", bootstrap(cluster))) as program:

        def saw(lines: list[str], group: str, offset: int) -> list[str]:
            return [line for line in lines if line.startswith(f"{group} saw offset {offset} of ")]

        await program.wait_for(
            "shipping and analytics seeing every order",
            lambda lines: len(saw(lines, "shipping", 0)) == 6 and len(saw(lines, "analytics", 0)) == 6,
        )
        await send_orders(range(6, 7))
        await program.wait_for(
            "the new order in every group",
            lambda lines: all(saw(lines, group, 1) for group in ("billing", "shipping", "analytics")),
        )
    assert not saw(program.lines, "billing", 0), f"billing read its committed orders again: {program.lines}"

    # The listener example defines run(consumer, handle): drive it until every order was handled, then close
    # (the listener commits on revoke); a new member finds exactly those commits.
    namespace: dict[str, Any] = {}
    exec(compile(listener_example, "docs/groups.md", "exec"), namespace)
    handled: list[ConsumerRecord] = []
    app = consumer(cluster, "listener-doc", enable_auto_commit=False)
    running = asyncio.create_task(namespace["run"](app, handled.append))
    try:
        deadline = monotonic_ms() + WAIT_S * 1000
        while len(handled) < 7 and not running.done() and monotonic_ms() < deadline:
            await asyncio.sleep(0.05)
    finally:
        running.cancel()  # it runs forever; stopped in poll(), after the handled records were noted
        await asyncio.gather(running, return_exceptions=True)
        await app.close()
    assert sorted((r.partition, r.offset) for r in handled) == [(0, 0), (0, 1), *((p, 0) for p in range(1, 6))]
    async with consumer(cluster, "listener-doc") as check:
        committed = await check.committed([TopicPartition("orders", p) for p in range(6)])
    assert {tp.partition: om.offset if om else None for tp, om in committed.items()} == {
        0: 2,
        **dict.fromkeys(range(1, 6), 1),
    }


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
