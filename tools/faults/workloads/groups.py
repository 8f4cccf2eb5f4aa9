"""The `groups` workload: consumer-group members joining, leaving, crashing and stalling while producers write.

`MEMBERS` slots each run one member process at a time (group_member.py, kraftpy's client). After a
random lifetime (counted from its first
operation) the slot ends it one of three ways: `leave` (SIGTERM: LeaveGroup, a clean exit),
`crash` (SIGKILL: the coordinator notices at the session timeout) or `stall` (SIGSTOP past the
session timeout, then SIGCONT: a zombie of an old generation that resumes polling and committing,
which a coordinator must fence), then starts a fresh member under a new process number. Each
member's operations go into the history; the member faults are logged as nemesis events. After the
heal `final_committed` reads the group's committed offsets: `kraftpy check --model kafka-groups`
judges the whole (tools/checker/kafka_groups.py, docs/jepsen.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sys
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
# Past the session timeout and a rebalance: the others take the zombie's partitions and commit before it wakes.
STALL_S = SESSION_TIMEOUT_MS / 1000 + 8.0
LEAVE_TIMEOUT_S = 15.0
ENDINGS = ("leave", "crash", "stall")
FINAL_PROCESS = 2_000_000


class _Member:
    def __init__(self, proc: asyncio.subprocess.Process, process: int, history: HistoryWriter) -> None:
        self.proc, self.process, self.history = proc, process, history
        self.ready = asyncio.Event()  # its first operation: a start takes seconds on a loaded machine
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                continue  # a log line; the member's stderr holds its logs
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


async def _spawn(bootstrap: str, topic: str, process: int, history: HistoryWriter, log_dir: Path) -> _Member:
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"member-{process}.log").open("wb") as log:  # the member's own logs, for a post-mortem
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kraftpy.tools.faults.workloads.group_member", bootstrap, topic, GROUP,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    history.nemesis("member-start", {"process": process, "pid": proc.pid})
    return _Member(proc, process, history)


async def run_members(
    history: HistoryWriter, bootstrap: str, topic: str, *, end: RunEnd, rng: random.Random, log_dir: Path
) -> dict[str, int]:
    """Run the member slots until `end`; returns how many members ended each way."""
    counts = dict.fromkeys(ENDINGS, 0)
    one_at_a_time = asyncio.Lock()  # one member fault at a time: the others keep the group going
    numbers = iter(range(FIRST_PROCESS, FIRST_PROCESS + 1_000_000))

    async def slot() -> None:
        member = await _spawn(bootstrap, topic, next(numbers), history, log_dir)
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(member.ready.wait(), START_TIMEOUT_S)
                await asyncio.sleep(rng.uniform(*LIFETIME_S))
                if end.passed():
                    break
                async with one_at_a_time:
                    if end.passed():
                        break
                    # The first is a stall: the zombie a coordinator must fence, in every run however short.
                    ending = rng.choice(ENDINGS) if any(counts.values()) else "stall"
                    counts[ending] += 1
                    history.nemesis(f"member-{ending}", {"process": member.process})
                    if ending == "stall":
                        member.signal(signal.SIGSTOP)
                        await asyncio.sleep(STALL_S)
                        member.signal(signal.SIGCONT)  # the zombie carries on: the next lifetime ends it
                        continue
                    member.signal(signal.SIGTERM if ending == "leave" else signal.SIGKILL)
                    await member.ended(LEAVE_TIMEOUT_S)
                member = await _spawn(bootstrap, topic, next(numbers), history, log_dir)
        finally:
            member.signal(signal.SIGCONT)
            member.signal(signal.SIGTERM)
            await member.ended(LEAVE_TIMEOUT_S)
            history.nemesis("member-end", {"process": member.process})

    await asyncio.gather(*(slot() for _ in range(MEMBERS)))
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
