"""The nemesis of a fault run (a thin shell): does what the schedule's `Fault`s say to the cluster, then heals.

- kill: SIGKILL and restart; pause: SIGSTOP/SIGCONT; partitions (client ones too): nftables drops (netns.py).
- lose-tail: SIGKILL, the unsynced tails cut as on power loss (disk.py), a new boot id, a restart; first a
  bounded wait until no partition would lose its last clean in-sync copy (tail_safety.py), else a logged skip.
- disk-full: the node's small disk filled; the heal frees it and restarts the node (stopping on a full
  disk is no death: disk.stopped_by_full_disk). Leader-targeted: the holder looked up in the metadata.
Every fault is logged with its start and end; a node dead at a heal its fault did not take down fails
the run. An overlapping schedule heals each fault on its own; its events carry the fault's id.
Docs: docs/jepsen.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry, process_is_node
from kraftpy.tools.commands.cluster import LOCAL_CLUSTER_SETTINGS, fetch_statuses, spawn_node
from kraftpy.tools.faults.disk import (
    LoopDisk,
    boot_id_path,
    cut_unsynced_tails,
    new_boot_id,
    partition_dirs,
    stopped_by_full_disk,
)
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.netns import FaultNet, LoopbackNet
from kraftpy.tools.faults.partitions import CLIENT
from kraftpy.tools.faults.schedule import (
    NODE_ACTIONS,
    Fault,
    Schedule,
    TimedFault,
    aim,
    aim_free,
    conflicts,
    may_leave_down,
)
from kraftpy.tools.faults.tail_safety import NodeView, TailSafety

GRACEFUL_STOP_S = 30
LOOKUP_TIMEOUT_MS = 5_000
COORDINATOR_GROUP = "kraftpy-faults"  # the group whose coordinator `coordinator` faults hit
LOSE_TAIL_WAIT_S = 30.0  # how long a lose-tail waits for another clean in-sync copy before it is skipped
VIEW_POLL_S = 0.5
# A lose-tail runs only once the views have allowed it for longer than a broker session: whatever fencing
# the faults before it cause (a pause past the session) is then committed and in every answering image.
SETTLE_S = LOCAL_CLUSTER_SETTINGS["broker_session_timeout_ms"] / 1000 + VIEW_POLL_S
SETTLING = -2  # the blocker when the views allowed the loss only in the last SETTLE_S of the wait


@dataclass
class Nemesis:
    layout: ClusterLayout
    net: FaultNet | LoopbackNet
    topic: str
    cli: Callable[..., subprocess.CompletedProcess[str]]
    log: Callable[[str], None]
    disk: LoopDisk | None = None
    paused: set[int] = field(default_factory=set)
    done: Counter[str] = field(default_factory=Counter)
    died: list[dict[str, Any]] = field(default_factory=list)  # nodes that died on their own
    log_marks: dict[int, int] = field(default_factory=dict)  # each node's server.log size at its last start
    lose_tail_unsafe: bool = False  # the old model: tails lost whatever the ISRs (may lose every copy)
    tails: TailSafety = field(
        default_factory=lambda: TailSafety(heartbeat_fresh_ms=LOCAL_CLUSTER_SETTINGS["broker_session_timeout_ms"] // 2)
    )
    skipped: Counter[str] = field(default_factory=Counter)
    # Held while a fault takes a node down or a heal looks for dead nodes (both in worker threads): a heal
    # that read the faults still on before a kill started, and the node list after, took the kill's node
    # for one that died on its own (seed 2104).
    node_lock: threading.RLock = field(default_factory=threading.RLock)

    def entry(self, node: int) -> NodeEntry:
        return next(n for n in self.layout.nodes if n.node_id == node)

    # --- finding a role's holder ---------------------------------------------------------------------
    async def holder(self, fault: Fault) -> int | None:
        """The node that holds `fault.role` now, from the cluster's metadata (None: unknown right now)."""
        try:
            if fault.role == "raft-leader":
                done = await asyncio.to_thread(self.cli, "quorum", "status", "--json", "--dir", str(self.layout.dir))
                return json.loads(done.stdout)["leader_id"] if done.returncode == 0 else None
            from kraftpy.client.shell.admin import AdminClient

            logging.getLogger("kraftpy.client").setLevel(logging.ERROR)
            admin = AdminClient(
                self.layout.kafka_bootstrap_servers,
                default_api_timeout_ms=LOOKUP_TIMEOUT_MS,
                request_timeout_ms=LOOKUP_TIMEOUT_MS // 2,
            )
            try:
                if fault.role == "partition-leader":
                    described = await admin.describe_topics([self.topic])
                    return described[self.topic].partitions[fault.partition or 0].leader
                found = (await admin.describe_consumer_groups([COORDINATOR_GROUP]))[COORDINATOR_GROUP]
                return None if isinstance(found, Exception) else found.coordinator
            finally:
                await admin.close()
        except Exception:  # a fault may hide the metadata for a while: the fallback node is hit instead
            return None

    # --- whether a tail may be lost now ---------------------------------------------------------------
    async def views(self) -> dict[int, NodeView]:
        """Each answering node's status, then its own metadata of the topic (so that answer is at least as
        new as the status). A node that does not answer both is left out."""
        from kraftpy.client.metadata import parse_metadata_response
        from kraftpy.client.shell.cluster_client import METADATA_PATH
        from kraftpy.client.shell.kafka_transport import KafkaTransport

        try:
            statuses = await fetch_statuses(self.layout, timeout_ms=LOOKUP_TIMEOUT_MS // 5)
        except Exception:  # no view at all: nothing may be lost (tail_safety.NO_ANSWER)
            return {}
        transport = KafkaTransport(request_timeout_ms=LOOKUP_TIMEOUT_MS // 5, client_id="kraftpy-faults-nemesis")

        async def one(entry: NodeEntry) -> NodeView | None:
            status = statuses.get(entry.node_id)
            if status is None or not entry.kafka_port:
                return None
            try:
                answer = await transport.call((entry.host, entry.kafka_port), METADATA_PATH, {"topics": [self.topic]})
                partitions = parse_metadata_response(answer).partitions_for_topic(self.topic)
            except Exception:  # down, cut or starting: this node has no view now
                return None
            broker = status.get("broker") or {}
            return NodeView(
                entry.node_id,
                int(broker.get("partition_roles_from_offset", -1)) >= 0,
                {p.partition: tuple(p.replicas) for p in partitions},
                {p.partition: tuple(p.isr) for p in partitions},
                broker.get("heartbeat_answered_ms_ago"),
            )

        try:
            found = await asyncio.gather(*(one(n) for n in self.layout.nodes))
        finally:
            await transport.close()
        return {v.node: v for v in found if v is not None and v.replicas}

    async def tail_may_be_lost(self, node: int, history: HistoryWriter, note: dict[str, Any]) -> bool:
        """Wait (at most LOSE_TAIL_WAIT_S) until `node` has held no partition's last clean in-sync copy for
        SETTLE_S; the wait is in the history. False: it still does, and the fault is skipped (in the history
        too). One clear look is not enough: a node that went quiet just before it (a pause, a cut) may be
        fenced out of every ISR a moment later, and a node just resumed answers from its stale image."""
        started = time.monotonic()
        clear_since: float | None = None
        while True:
            views = await self.views()
            self.tails.observe(views)
            blocked = self.tails.blockers(node, views)
            now = time.monotonic()
            clear_since = None if blocked else (now if clear_since is None else clear_since)
            waited_s = round(now - started, 1)
            if clear_since is not None and now - clear_since >= SETTLE_S:
                break
            if waited_s >= LOSE_TAIL_WAIT_S:
                blocked = blocked or {SETTLING: []}  # clear at the end but not for long enough: not settled
                break
            await asyncio.sleep(VIEW_POLL_S)
        blockers = {str(p): isr for p, isr in blocked.items()}  # partition -> the ISR all views agree on
        # What the decision saw, so a run's analysis can check it against the nodes' own logs.
        seen = {
            "answered": sorted(views),
            "agreed_isr": {str(p): isr for p, isr in self.tails.agreed_isrs(node, views).items()},
            "tainted": {str(n): sorted(ps) for n, ps in self.tails.tainted.items()},
            "heartbeat_age_ms": {str(n): v.heartbeat_age_ms for n, v in sorted(views.items())},
        }
        history.nemesis("lose-tail-wait", {**note, "node": node, "waited_s": waited_s, "blocked_by": blockers, **seen})
        if not blocked:
            return True
        self.skipped["lose-tail"] += 1
        history.nemesis("lose-tail-skip", {**note, "node": node, "waited_s": waited_s, "blocked_by": blockers})
        self.log(f"lose-tail on node {node} skipped after {waited_s} s: no other clean in-sync copy of {blockers}")
        return False

    async def until_caught_up(self, node: int, history: HistoryWriter, note: dict[str, Any]) -> None:
        """After a lose-tail: wait (at most LOSE_TAIL_WAIT_S) until `node` is back in sync everywhere, its own
        answers say (TailSafety.observe). Until then the next node fault waits for this one: taking a
        remaining member now (a pause, a kill) can fence it out of the ISR before the cut node's old
        incarnation is, which leaves the cut log the ISR's last member (seed 2304, docs/jepsen.md)."""
        started = time.monotonic()
        while node in self.tails.tainted and time.monotonic() - started < LOSE_TAIL_WAIT_S:
            await asyncio.sleep(VIEW_POLL_S)
            self.tails.observe(await self.views())
        caught_up = node not in self.tails.tainted
        waited_s = round(time.monotonic() - started, 1)
        history.nemesis("lose-tail-caught-up", {**note, "node": node, "caught_up": caught_up, "waited_s": waited_s})
        if not caught_up:
            self.log(f"lose-tail: node {node} not back in sync after {waited_s} s; the next node fault goes on")

    # --- faults --------------------------------------------------------------------------------------
    def pid(self, node: int) -> int | None:
        return self.layout.read_pid(self.entry(node))

    def start(self, entry: NodeEntry) -> None:
        path = self.layout.log_path(entry)
        self.log_marks[entry.node_id] = path.stat().st_size if path.exists() else 0
        spawn_node(self.layout, entry)

    def log_since_start(self, node: int) -> str:
        """What the node logged since this nemesis last started it (the whole log before that)."""
        path = self.layout.log_path(self.entry(node))
        try:
            with path.open("rb") as f:
                f.seek(self.log_marks.get(node, 0))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self, node: int) -> None:
        with self.node_lock:
            pid = self.pid(node)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                entry = self.entry(node)
                deadline = time.monotonic() + GRACEFUL_STOP_S  # the files are read only once the process is gone
                while process_is_node(pid, self.layout.config_path(entry)) and time.monotonic() < deadline:
                    time.sleep(0.05)

    def pause(self, node: int) -> None:
        pid = self.pid(node)
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self.paused.add(node)

    def resume_all(self) -> None:
        for node in sorted(self.paused):
            pid = self.pid(node)
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        self.paused.clear()

    def lose_tail(self, node: int, seed: int) -> list[dict[str, object]]:
        with self.node_lock:  # down from the kill to the start: no heal may take it for dead meanwhile
            self.kill(node)
            data_dir = self.layout.data_dir(self.entry(node))
            cuts = cut_unsynced_tails(data_dir, self.topic, random.Random(seed))
            # A power loss costs every partition its unsynced tail (the cut takes one): none is a clean copy now.
            self.tails.lost_tail(node, [p for p, _ in partition_dirs(data_dir, self.topic)])
            # A power loss reboots the machine: the broker must see it, or it registers as a clean restart.
            new_boot_id(boot_id_path(self.layout, self.entry(node)))
            self.start(self.entry(node))
        return [c.describe() for c in cuts]

    def fill_disk(self, node: int) -> int:
        assert self.disk is not None, f"node {node} has no small disk"
        return self.disk.fill()

    def restart_gracefully(self, node: int) -> None:
        """SIGTERM, wait (bounded) for the exit, start again (Kafka's procedure after a log directory failed)."""
        pid = self.pid(node)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACEFUL_STOP_S
            while process_is_node(pid, self.layout.config_path(self.entry(node))):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.1)
        self.start(self.entry(node))

    def restart_dead(self) -> list[int]:
        dead = [n for n in self.layout.nodes if self.layout.read_pid(n) is None]
        for entry in dead:
            self.start(entry)
        return [n.node_id for n in dead]

    def heal_all(self) -> list[int]:
        """Undo every fault (any that is on); returns the nodes that had to be started again."""
        self.resume_all()
        self.net.heal()
        if self.disk is not None:
            self.disk.free()
        return self.restart_dead()

    async def inject(self, fault: Fault) -> dict[str, Any]:
        """Start one fault; returns what the history says about it beyond the fault itself."""
        extra: dict[str, Any] = {}
        action, node = fault.action, fault.node
        assert node is not None or action == "partition"
        if action == "kill":
            await asyncio.to_thread(self.kill, node)
        elif action == "pause":
            self.pause(node)
        elif action == "partition":
            await asyncio.to_thread(self.net.apply, fault.drops)
        elif action == "lose-tail":
            extra["cuts"] = await asyncio.to_thread(self.lose_tail, node, fault.seed)
        elif action == "disk-full":
            extra["bytes_taken"] = await asyncio.to_thread(self.fill_disk, node)
        return extra

    def heal(self, fault: Fault) -> dict[str, Any]:
        """End one fault. A node the fault did not stop (kill, or a full disk at its start) that is gone now
        died on its own."""
        stopped: dict[int, str] = {}  # node -> the line it stopped with at start on its full disk
        if fault.action == "disk-full" and fault.node is not None:
            if self.disk is not None:
                self.disk.free()
            if self.pid(fault.node) is not None:
                self.restart_gracefully(fault.node)
            elif (line := stopped_by_full_disk(self.log_since_start(fault.node))) is not None:
                stopped[fault.node] = line
        restarted = self.heal_all()
        expected = may_leave_down(fault) | set(stopped)
        on_their_own = [n for n in restarted if n not in expected]
        if on_their_own:
            self.died.append({"fault": fault.describe(), "nodes": on_their_own})
        return {
            "restarted": restarted,
            **({"stopped_by_full_disk": stopped} if stopped else {}),
            **({"died": on_their_own} if on_their_own else {}),
        }

    async def run(self, schedule: Schedule, history: HistoryWriter, end: RunEnd) -> Counter[str]:
        """Faults one at a time until the run's end (held until each nemesis has run once); all healed on return."""
        while True:
            fault = schedule.next()
            # Decided before the quiet gap: a check after a slow heal let a run end with a nemesis never done.
            if not self.done[fault.nemesis] and not self.skipped[fault.nemesis]:  # tried once: a skip is logged
                end.hold_until_done()
            elif end.passed():
                break
            await asyncio.sleep(fault.quiet_s)
            if fault.role is not None:
                found = await self.holder(fault)
                fault = aim(fault, found if found is not None else fault.node, schedule.nodes)  # type: ignore[arg-type]
                fault_note = {"holder_found": found is not None}
            else:
                fault_note = {}
            if fault.action == "lose-tail" and not self.lose_tail_unsafe:
                assert fault.node is not None
                if not await self.tail_may_be_lost(fault.node, history, {}):
                    continue
            self.log(f"{fault.nemesis} start: {summary(fault)}")
            history.nemesis(f"{fault.nemesis}-start", {**fault.describe(), **fault_note})
            try:
                extra = await self.inject(fault)
                if extra:
                    history.nemesis(f"{fault.nemesis}-detail", extra)
                self.done[fault.nemesis] += 1
                await asyncio.sleep(fault.hold_s)
            finally:
                healed = await asyncio.to_thread(self.heal, fault)
                history.nemesis(f"{fault.nemesis}-end", healed)
                self.log(f"{fault.nemesis} end" + (f": {healed}" if healed["restarted"] else ""))
            if fault.action == "lose-tail" and not self.lose_tail_unsafe and fault.node is not None:
                await self.until_caught_up(fault.node, history, {})
        return self.done

    # --- overlapping faults --------------------------------------------------------------------------
    def heal_one(self, fault: Fault, still_on: Callable[[], list[Fault]]) -> dict[str, Any]:
        """End one fault of an overlapping schedule, leaving the others on. A node down that no fault still
        on took down died on its own: it is started again and fails the run. `still_on` is read once the
        node lock is held, so a node fault that started during this heal is among them."""
        with self.node_lock:
            return self._heal_one_locked(fault, still_on)

    def _heal_one_locked(self, fault: Fault, still_on: Callable[[], list[Fault]]) -> dict[str, Any]:
        node = fault.node
        if fault.action == "pause" and node is not None:
            pid = self.pid(node)
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(node)
        elif fault.action == "partition":
            self.net.heal()  # the plan has one partition on at a time
        elif fault.action == "disk-full" and node is not None:
            if self.disk is not None:
                self.disk.free()
            if self.pid(node) is not None:
                self.restart_gracefully(node)
        down_on_purpose = {f.node for f in still_on() if f.action in NODE_ACTIONS and f.action != "pause"}
        dead = [n for n in self.layout.nodes if self.layout.read_pid(n) is None and n.node_id not in down_on_purpose]
        for entry in dead:
            spawn_node(self.layout, entry)
        restarted = [n.node_id for n in dead]
        on_their_own = [n for n in restarted if n not in may_leave_down(fault)]
        if on_their_own:
            self.died.append({"fault": fault.describe(), "nodes": on_their_own})
        return {"restarted": restarted, **({"died": on_their_own} if on_their_own else {})}

    async def run_overlapping(
        self, plan: list[TimedFault], nodes: tuple[int, ...], history: HistoryWriter, end: RunEnd
    ) -> Counter[str]:
        """Each planned fault from its start to its end, several at once; all healed on return.

        A fault also waits for the faults it was planned after (a conflicting one, or one holding a node
        fault slot), so a heal that runs late never lets two faults stack on one node."""
        t0 = time.monotonic()
        if plan:
            end.extend_to(t0 + plan[-1].end_s + 1.0)
        ended = {t.fault_id: asyncio.Event() for t in plan}
        on: dict[int, Fault] = {}

        def others_on(fault_id: int) -> list[Fault]:
            """The faults on but `fault_id` (read from a heal's worker thread: one C-level copy)."""
            return [f for i, f in list(on.items()) if i != fault_id]

        def before(t: TimedFault) -> list[asyncio.Event]:
            both_node = t.fault.action in NODE_ACTIONS
            return [
                ended[u.fault_id]
                for u in plan
                if u.end_s <= t.start_s
                and (conflicts(u.fault, t.fault) or (both_node and u.fault.action in NODE_ACTIONS))
            ]

        async def one(t: TimedFault) -> None:
            try:
                await asyncio.sleep(max(0.0, t0 + t.start_s - time.monotonic()))
                for event in before(t):
                    await event.wait()
                if end.passed():  # the run's hard limit came first: the fault is not started
                    return
                fault, note = t.fault, {}
                if fault.role is not None:
                    found = await self.holder(fault)
                    busy = [f.node for f in on.values() if f.action in NODE_ACTIONS and f.node is not None]
                    fault = aim_free(fault, found, busy, nodes)
                    note = {"holder_found": found is not None}
                if fault.action == "lose-tail" and not self.lose_tail_unsafe:
                    assert fault.node is not None
                    if not await self.tail_may_be_lost(fault.node, history, {"fault": t.fault_id}):
                        return
                on[t.fault_id] = fault
                self.log(f"{fault.nemesis} #{t.fault_id} start: {summary(fault)}")
                history.nemesis(f"{fault.nemesis}-start", {"fault": t.fault_id, **fault.describe(), **note})
                try:
                    extra = await self.inject(fault)
                    if extra:
                        history.nemesis(f"{fault.nemesis}-detail", {"fault": t.fault_id, **extra})
                    self.done[fault.nemesis] += 1
                    await asyncio.sleep(fault.hold_s)
                finally:
                    # Listed until its heal is done: another heal meanwhile must not take this fault's node,
                    # down until then, for one that died (seed 2108: two faults ending in the same instant).
                    try:
                        healed = await asyncio.to_thread(self.heal_one, fault, partial(others_on, t.fault_id))
                    finally:
                        del on[t.fault_id]
                    history.nemesis(f"{fault.nemesis}-end", {"fault": t.fault_id, **healed})
                    self.log(f"{fault.nemesis} #{t.fault_id} end" + (f": {healed}" if healed["restarted"] else ""))
                if fault.action == "lose-tail" and not self.lose_tail_unsafe and fault.node is not None:
                    await self.until_caught_up(fault.node, history, {"fault": t.fault_id})  # before `ended`
            finally:
                ended[t.fault_id].set()

        await asyncio.gather(*(one(t) for t in plan))
        return self.done

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.resume_all()


def summary(fault: Fault) -> str:
    role = f" ({fault.role}" + (f" of partition {fault.partition}" if fault.partition is not None else "") + ")"
    if fault.action != "partition" or fault.role is not None:
        return f"node {fault.node}" + (role if fault.role else "")
    cut = sorted({tuple(sorted(p)) for p in fault.drops})
    name = {CLIENT: "clients"}
    return "cut " + (", ".join(f"{name.get(a, a)}-{name.get(b, b)}" for a, b in cut) if cut else "nothing")
