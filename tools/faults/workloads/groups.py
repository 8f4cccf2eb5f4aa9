"""The `groups` workload: consumer-group members joining, leaving, crashing and stalling while producers write.

`MEMBERS` slots each run one member process at a time (group_member.py, kraftpy's client, or with
`--client confluent` group_member_confluent.py, librdkafka). After a random lifetime the slot ends it
by `leave` (SIGTERM: LeaveGroup), `crash` (SIGKILL: expired at the session timeout) or `stall` (the
member stops itself between a poll and its commit; woken once the others committed its partitions in a
newer generation, it is a zombie whose first act is a commit the coordinator must fence), then starts a
fresh member under a new process number. Member faults are nemesis events in the history; after the heal
`final_committed` reads the group's offsets, and `kraftpy check --model kafka-groups` judges the whole
(tools/checker/kafka_groups.py, docs/jepsen.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from kraftpy.client import Consumer, TopicPartition
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.workloads import queue
from kraftpy.tools.faults.workloads.entry import Beside, RunCluster, Workload
from kraftpy.tools.faults.workloads.group_member import SESSION_TIMEOUT_MS

GROUP = "faults-group"
MEMBERS = 3
FIRST_PROCESS = 100  # members' process numbers, apart from the producers' and the final reader's
LIFETIME_S = (4.0, 10.0)  # from the member's first operation
START_TIMEOUT_S = 30.0
# A stall lasts until the others have taken the zombie's partitions and committed them in a newer generation
# (the session timeout, a rebalance, new commits), then STALL_MARGIN_S more so the new owners get ahead of
# where the zombie stopped; at most STALL_MAX_S (a coordinator that moves restarts every session, as Kafka's).
STALL_MARGIN_S = 2.0
STALL_MAX_S = SESSION_TIMEOUT_MS / 1000 * 4  # below group_member.MAX_POLL_INTERVAL_MS
ZOMBIE_S = 5.0  # at most this long for the woken zombie's first commit, before anything ends it
STOP_TIMEOUT_S = 10.0  # for the member to reach a commit and stop there; then it is stopped where it is
HOLD_S = 2.0  # while a zombie is being made, the run's end stays at least this far ahead
# Every run's first member faults are stalls, until two zombies' commits reached a coordinator. The client may
# refuse a zombie's commit itself (the coordinator moved as it committed, and a heartbeat told it of its expulsion
# before the retry): that zombie shows a coordinator nothing, and one more stall is owed, up to MAX_STALLS.
OWED_STALLS = 2
MAX_STALLS = 4
LEAVE_TIMEOUT_S = 15.0
ENDINGS = ("leave", "crash", "stall")
FINAL_PROCESS = 2_000_000


class _GroupView:
    """What the members' own lines say: who committed which partitions in which generation."""

    def __init__(self) -> None:
        self.commits: list[tuple[int, int, set[int]]] = []  # (process, generation, partitions), ok commits
        self.changed = asyncio.Event()

    def note(self, process: int, event: dict[str, Any]) -> None:
        if event.get("type") == "ok" and event.get("f") == "commit":
            self.commits.append((process, event.get("generation", -1), {p for p, _ in event.get("value", ())}))
            self.changed.set()

    def moved_on(self, zombie: int, generation: int, partitions: set[int]) -> bool:
        """Others committed every one of the zombie's partitions (or anything, if it had none) after `generation`."""
        done: set[int] = set()
        for process, g, committed in self.commits:
            if process != zombie and g > generation:
                if not partitions:
                    return True
                done |= committed
        return bool(partitions) and partitions <= done

    async def wait_moved_on(self, zombie: int, generation: int, partitions: set[int], timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until moved_on(); whether it is."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not self.moved_on(zombie, generation, partitions):
                    self.changed.clear()
                    await self.changed.wait()
        return self.moved_on(zombie, generation, partitions)


class _Member:
    def __init__(
        self, proc: asyncio.subprocess.Process, process: int, history: HistoryWriter, view: _GroupView
    ) -> None:
        self.proc, self.process, self.history, self.view = proc, process, history, view
        self.ready = asyncio.Event()  # its first operation: a start takes seconds on a loaded machine
        self.generation = -1  # of its last assignment
        self.owned: set[int] = set()
        self.committed = asyncio.Event()  # set at each commit's end (ok or info)
        self.last_commit: dict[str, Any] | None = None  # that end's line
        self.assigned = asyncio.Event()  # it has partitions in a generation
        self.stalled: dict[str, Any] | None = None  # its `stalled` line: the generation and the commit it holds
        self.stopped = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                continue  # a log line; the member's stderr holds its logs
            if event.get("f") == "stalled":  # not an operation: where it stopped itself
                self.stalled = event
                self.stopped.set()
                continue
            self.view.note(self.process, event)
            if event["type"] == "ok" and event["f"] == "assign":
                self.generation, self.owned = event.get("generation", -1), set(event.get("value", ()))
                if self.owned and self.generation > 0:
                    self.assigned.set()
                else:
                    self.assigned.clear()
            if event["type"] != "invoke" and event["f"] == "commit":
                self.last_commit = dict(event)
                self.committed.set()
            self.history.event(self.process, event.pop("type"), event.pop("f"), **event)
            self.ready.set()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    async def ended(self, timeout_s: float) -> None:
        """Wait for the exit (SIGKILL past `timeout_s`) and for its last lines."""
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            self.signal(signal.SIGKILL)
            await self.proc.wait()
        await self.reader


MEMBER_MODULES = {  # --client: the member process's module
    "kraftpy": "kraftpy.tools.faults.workloads.group_member",
    "confluent": "kraftpy.tools.faults.workloads.group_member_confluent",
}


async def _spawn(
    bootstrap: str, topic: str, process: int, history: HistoryWriter, log_dir: Path, view: _GroupView, client: str
) -> _Member:
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"member-{process}.log").open("wb") as log:  # the member's own logs, for a post-mortem
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", MEMBER_MODULES[client], bootstrap, topic, GROUP,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    history.nemesis("member-start", {"process": process, "pid": proc.pid})
    return _Member(proc, process, history, view)


async def _hold(end: RunEnd) -> None:
    """Keep the run going (producers writing, the other members consuming) until cancelled."""
    while True:
        end.extend_to(time.monotonic() + HOLD_S)
        await asyncio.sleep(HOLD_S / 4)


async def _live(seconds: float, end: RunEnd) -> None:
    """A member's lifetime: `seconds`, or less when the run ends first."""
    until = asyncio.get_running_loop().time() + seconds
    while not end.passed() and (left := until - asyncio.get_running_loop().time()) > 0:
        await asyncio.sleep(min(left, 0.2))


async def _stall(member: _Member, view: _GroupView, end: RunEnd) -> bool:
    """SIGSTOP until the others committed the member's partitions in a newer generation, then SIGCONT: a
    zombie, whose first commit the run waits for (bounded) with producers still writing, so it has
    something to commit. True when it was a zombie and that commit reached a coordinator (which had to fence
    it); the `member-stall-wake` event says whether the group had moved on."""
    holding = asyncio.create_task(_hold(end))
    try:
        generation, owned = member.generation, set(member.owned)
        member.stopped.clear()  # a member stalled before (its client refused that zombie's commit) stalls anew
        member.stalled = None
        member.signal(signal.SIGUSR1)
        try:
            await asyncio.wait_for(member.stopped.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            member.signal(signal.SIGSTOP)  # it never reached a commit: stopped wherever it is
            at_commit = False
        else:
            assert member.stalled is not None
            generation = member.stalled["generation"]
            owned = {p for p, _ in member.stalled["value"]}
            detail = {"process": member.process, "generation": generation, "commit": member.stalled["value"]}
            member.history.nemesis("member-stall-detail", detail)  # stopped there: its next commit is a zombie's
            at_commit = True
        # Coordinator moves restart every session: the group may still count the member in when the wait ends,
        # and then its commit is rightly taken. It is a zombie only once the others moved on.
        moved_on = await view.wait_moved_on(member.process, generation, owned, STALL_MAX_S)
        await asyncio.sleep(STALL_MARGIN_S)
        member.committed.clear()
        member.last_commit = None
        member.history.nemesis("member-stall-wake", {"process": member.process, "moved_on": moved_on})
        member.signal(signal.SIGCONT)  # the zombie carries on: the next lifetime ends it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(member.committed.wait(), ZOMBIE_S)
        return at_commit and moved_on and zombie_reached_coordinator(member.last_commit)
    finally:
        holding.cancel()


def zombie_reached_coordinator(outcome: dict[str, Any] | None) -> bool:
    """A woken zombie's first commit end: did a coordinator decide it? `ok` (a broken one took it) or a
    refusal that was not the client's own (`local`); no answer in time proves nothing."""
    return outcome is not None and (outcome["type"] == "ok" or not outcome.get("local", False))


async def run_members(
    history: HistoryWriter,
    bootstrap: str,
    topic: str,
    *,
    end: RunEnd,
    rng: random.Random,
    log_dir: Path,
    client: str = "kraftpy",
) -> dict[str, int]:
    """Run the member slots until `end`; returns how many members ended each way."""
    counts = dict.fromkeys(ENDINGS, 0)
    one_at_a_time = asyncio.Lock()  # one member fault at a time: the others keep the group going
    numbers = iter(range(FIRST_PROCESS, FIRST_PROCESS + 1_000_000))
    view = _GroupView()
    # However short the time limit or slow the members' start, a run lasts until its owed stalls are done
    # (within RunEnd's hard limit), as the nemesis waits for each fault's first round.
    owed = asyncio.create_task(_hold(end))
    zombies = 0  # stalled members whose first commit on waking reached a coordinator

    def owing() -> bool:
        return zombies < OWED_STALLS and counts["stall"] < MAX_STALLS

    async def slot() -> None:
        nonlocal zombies
        member = await _spawn(bootstrap, topic, next(numbers), history, log_dir, view, client)
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(member.ready.wait(), START_TIMEOUT_S)
                await _live(rng.uniform(*LIFETIME_S), end)
                if end.passed():
                    break
                async with one_at_a_time:
                    if end.passed() or (not owing() and end.time_limit_passed()):
                        break  # past the time limit only the owed stalls are still to do
                    # The first ones are stalls: zombies a coordinator must fence, in every run however short.
                    ending = "stall" if owing() else rng.choice(ENDINGS)
                    if ending == "stall":  # a zombie needs partitions of a generation to commit
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(member.assigned.wait(), START_TIMEOUT_S)
                    counts[ending] += 1
                    history.nemesis(f"member-{ending}", {"process": member.process})
                    if ending == "stall":
                        zombies += await _stall(member, view, end)
                        if not owing():
                            owed.cancel()
                        continue
                    member.signal(signal.SIGTERM if ending == "leave" else signal.SIGKILL)
                    await member.ended(LEAVE_TIMEOUT_S)
                member = await _spawn(bootstrap, topic, next(numbers), history, log_dir, view, client)
        finally:
            member.signal(signal.SIGCONT)
            member.signal(signal.SIGTERM)
            await member.ended(LEAVE_TIMEOUT_S)
            history.nemesis("member-end", {"process": member.process})

    try:
        await asyncio.gather(*(slot() for _ in range(MEMBERS)))
    finally:
        owed.cancel()
    return counts


async def warm_up(bootstrap: str, topic: str) -> None:
    """Before the faults: find the group's coordinator once, which makes __consumer_offsets (a topic of
    many partitions, slow to create while nodes die): the run is about the group, not that creation."""
    async with Consumer(bootstrap, group_id=GROUP, enable_auto_commit=False, default_api_timeout_ms=60_000) as c:
        await c.committed([TopicPartition(topic, 0)])


async def final_committed(history: HistoryWriter, bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets after the heal, as the history's `committed` operation."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    history.event(FINAL_PROCESS, "invoke", "committed")
    async with Consumer(bootstrap, group_id=GROUP, enable_auto_commit=False, default_api_timeout_ms=30_000) as c:
        found = await c.committed(tps)
    offsets = {tp.partition: meta.offset for tp, meta in found.items() if meta is not None}
    history.event(FINAL_PROCESS, "ok", "committed", value=sorted(offsets.items()))
    return offsets


async def _members(beside: Beside) -> dict[str, int]:
    cluster = beside.cluster
    return await run_members(
        beside.history,
        cluster.bootstrap,
        cluster.topic,
        end=beside.end,
        rng=beside.rng,
        log_dir=cluster.out / "members",
        client=cluster.client,
    )


async def _warm_up(cluster: RunCluster) -> None:
    await warm_up(cluster.bootstrap, cluster.topic)


async def _final_committed(cluster: RunCluster, history: HistoryWriter) -> None:
    await final_committed(history, cluster.bootstrap, cluster.topic, cluster.partitions)


# The queue workload's producers (and consumers) write what the members consume; the final read back is
# not a member, so it goes apart (it must not cover a commit-skip).
WORKLOAD = Workload(
    make=queue.make,
    model="kafka-groups",
    readback_apart=True,
    warm_up=_warm_up,
    beside=_members,
    after_read=_final_committed,
)
