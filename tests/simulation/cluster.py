"""The Raft workload on the simulation kernel: a quorum under a faulty network and a lossy disk.

The kernel (tests/simulation/kernel/) supplies the loop, the seeded generator
(network delays, drops, duplicates, faults, the nodes' election jitter through
their own seeded generators), the network, the disk's fsync timing and the
violation type, so a run is a pure function of (seed, SimConfig): any failure
replays exactly.

Each simulated node is a tiny shell around `RaftNode`, playing the part the real
asyncio shell will: it performs the core's actions in order on a `MemoryLog`
(volatile tail + durable prefix), keeps the durable quorum state, runs a state
machine (a hash chain of applied entries) with snapshots, and feeds the core
messages, ticks and flush completions. A crash throws away the core, the state
machine and every unflushed write; a restart builds a new core from what was
durable. A crash may also hit in the middle of performing a step's actions.

`Invariants` (invariants.py) is checked as the actions are performed and after
every step; a violation raises `InvariantViolation` with the seed, the replay
command and the tail of the trace.
"""

from __future__ import annotations

import dataclasses
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.actions import (
    AppendEntries,
    AppendResolved,
    CommitAdvanced,
    Flush,
    InstallSnapshot,
    PersistQuorumState,
    ReadResolved,
    RoleChanged,
    Send,
    TrimLog,
    TruncateTo,
    WriteSnapshotChunk,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.memory_log import MemoryLog
from kraftpy.raft.node import NotLeaderError, RaftNode
from kraftpy.raft.quorum_state import QuorumState, Role
from tests.simulation.invariants import GENESIS, Invariants, InvariantViolation, chain_digest
from tests.simulation.kernel import Disk, DiskConfig, Loop, Network, NetworkConfig

CLUSTER_ID = "sim-cluster"


@dataclass(frozen=True)
class SimConfig:
    voters: int = 3
    observers: int = 1
    # Kafka's 25 ms append linger (RaftConfig's default is the node's 0), as the seeds were run with.
    raft: RaftConfig = field(default_factory=lambda: RaftConfig(append_linger_ms=25))
    # network
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    spike_rate: float = 0.03  # some messages take much longer (reordering)
    spike_max_ms: int = 300
    drop_rate: float = 0.02
    duplicate_rate: float = 0.02
    # disk
    flush_min_ms: int = 1
    flush_max_ms: int = 6
    flush_spike_rate: float = 0.05  # a slow fsync: the window in which a crash loses a tail
    flush_spike_max_ms: int = 400
    # workload
    proposal_interval_ms: int = 40
    read_interval_ms: int = 400
    snapshot_every_entries: int = 60
    # faults (random runs)
    faults: bool = True
    fault_interval_min_ms: int = 300
    fault_interval_max_ms: int = 2500
    crash_mid_step_rate: float = 0.002
    fault_weights: tuple[tuple[str, int], ...] = (
        ("crash", 4),
        ("crash_leader", 3),
        ("power_loss", 1),
        ("partition_one", 2),
        ("partition_split", 2),
        ("isolate_leader", 2),
        ("one_way", 1),
        ("resign", 2),
        ("heal", 3),
    )
    duration_ms: int = 12_000
    settle_ms: int = 12_000  # fault-free time at the end in which the cluster must converge
    profile: str = "default"
    label: str = ""
    scripted: bool = False  # a scenario test drives the run (not replayable from a seed alone)

    def replay_args(self) -> str:
        args = f"--profile {self.profile} --voters {self.voters} --observers {self.observers}"
        return args if self.profile == "mixed" else f"{args} --duration-ms {self.duration_ms}"


PROFILES: dict[str, dict[str, Any]] = {
    # KRaft's default timeouts; faults every 0.3-2.5 s
    "default": {},
    # more loss, more duplicates, long delay spikes, faults twice as often
    "harsh": {
        "drop_rate": 0.15,
        "duplicate_rate": 0.1,
        "spike_rate": 0.1,
        "spike_max_ms": 1500,
        "fault_interval_min_ms": 150,
        "fault_interval_max_ms": 1200,
        "crash_mid_step_rate": 0.01,
    },
    # timeouts and limits drawn per seed (see mixed_changes): short elections, tiny fetches
    # and batches, frequent snapshots in small chunks, so many leaderships commit in one run
    "mixed": {},
}


def mixed_changes(seed: int) -> dict[str, Any]:
    """The per-seed configuration of the "mixed" profile (a function of the seed alone)."""
    rng = random.Random(seed * 7919 + 17)
    t = rng.choice([50, 100, 150, 300, 1000])
    max_fetch_bytes = rng.choice([40, 200, 1 << 20])
    # a backlog must stay fetchable: with tiny fetches (one entry per round trip) keep it small
    max_uncommitted_bytes = rng.choice([500, 5000] if max_fetch_bytes < 1000 else [5000, 8 << 20])
    raft = RaftConfig(
        election_timeout_ms=t,
        election_backoff_max_ms=rng.choice([t // 2, t]),
        fetch_timeout_ms=t * rng.choice([2, 3]),
        fetch_timeout_jitter_ms=rng.choice([0, t // 10]),
        fetch_max_wait_ms=rng.choice([t // 4, t, 500]),
        request_timeout_ms=rng.choice([t, 2 * t, 2000]),
        retry_backoff_ms=rng.choice([5, 20]),
        append_linger_ms=rng.choice([0, 5, 25]),
        max_batch_bytes=rng.choice([64, 1 << 20]),
        max_fetch_bytes=max_fetch_bytes,
        max_uncommitted_bytes=max_uncommitted_bytes,
        snapshot_chunk_bytes=rng.choice([7, 64, 1 << 16]),
        proposal_timeout_ms=rng.choice([5 * t, 5000]),
        read_timeout_ms=rng.choice([5 * t, 5000]),
    )
    changes = {
        "raft": raft,
        "duration_ms": max(3000, 40 * t),
        "settle_ms": max(6000, 30 * t),
        "proposal_interval_ms": rng.choice([10, 40]),
        "snapshot_every_entries": rng.choice([0, 10, 60]),
        "fault_interval_min_ms": t,
        "fault_interval_max_ms": 8 * t,
        "max_delay_ms": rng.choice([3, 10]),
        "spike_max_ms": rng.choice([t, 300]),
    }
    # drawn last, so every earlier draw (and so each seed's other settings) stays as it was
    changes["raft"] = dataclasses.replace(raft, fetch_high_watermark_linger_ms=rng.choice([0, 5, 50]))
    return changes


def profile_config(profile: str, voters: int, observers: int = 1, seed: int = 0, **changes: Any) -> SimConfig:
    """The configuration of a named profile; "mixed" depends on the seed too."""
    base = mixed_changes(seed) if profile == "mixed" else PROFILES[profile]
    return SimConfig(
        voters=voters,
        observers=observers,
        profile=profile,
        label=f"{profile}{voters}",
        **{**base, **changes},
    )


class StateMachine:
    """Applied entries folded into a hash chain; its snapshot is (applied, digest)."""

    def __init__(self, applied: int = 0, digest: bytes = GENESIS) -> None:
        self.applied = applied
        self.digest = digest

    def apply(self, epoch: int, data: bytes) -> None:
        self.digest = chain_digest(self.digest, epoch, data)
        self.applied += 1

    def snapshot(self) -> bytes:
        return cbor2.dumps({"applied": self.applied, "digest": self.digest})

    @classmethod
    def load(cls, data: bytes) -> StateMachine:
        body = cbor2.loads(data)
        return cls(body["applied"], body["digest"])


class SimNode:
    def __init__(self, sim: Simulator, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.log = MemoryLog()
        self.quorum_state = QuorumState()
        self.core: RaftNode | None = None
        self.sm = StateMachine()
        self.incarnation = 0
        self.tick_at: int | None = None
        self.life_epoch = 0
        self.life_hw = 0
        self.rng_seed = sim.rng.getrandbits(64)

    @property
    def up(self) -> bool:
        return self.core is not None

    def start(self) -> None:
        self.incarnation += 1
        self.sm = StateMachine()
        snapshot = self.log.latest_snapshot()
        if snapshot is not None:
            self.sm = StateMachine.load(self.log.snapshot_data(snapshot))
        rng = random.Random(self.rng_seed + self.incarnation)
        self.core = self.sim.core_factory(
            node_id=self.node_id,
            voters=self.sim.voter_ids,
            cluster_id=CLUSTER_ID,
            log=self.log,
            quorum_state=self.quorum_state,
            rng=rng,
            now_ms=self.sim.now,
            config=self.sim.config.raft,
        )
        self.life_epoch = self.core.epoch
        self.life_hw = 0
        self.tick_at = None
        self.sim.invariants.on_restart(self.node_id, self.core.epoch)
        self.sim.trace("start", self.node_id, f"epoch {self.core.epoch} log {self._log_desc()}")
        self.after_input()

    def crash(self) -> None:
        if self.core is None:
            return
        self.core = None
        self.log.crash()
        self.tick_at = None
        self.sim.disk.crash(self.node_id)
        self.sim.trace("crash", self.node_id, f"durable log {self._log_desc()}")

    def _log_desc(self) -> str:
        return f"[{self.log.log_start_offset}, {self.log.end_offset}) last epoch {self.log.last_epoch}"

    # ---- the shell: perform actions in order ---------------------------------------------

    def after_input(self) -> None:
        core = self.core
        if core is None:
            return
        actions = core.take_actions()
        sim = self.sim
        crash_at = -1
        if len(actions) > 1 and sim.faults_on and sim.rng.random() < sim.config.crash_mid_step_rate:
            crash_at = sim.rng.randrange(1, len(actions))
        for i, action in enumerate(actions):
            if i == crash_at:
                sim.trace("fault", self.node_id, f"crash in the middle of a step, before {action}")
                self.crash()
                sim.schedule_restart(self.node_id)
                return
            self.perform(action)
            if self.core is None:
                return
        if core.epoch < self.life_epoch:
            raise InvariantViolation(f"node {self.node_id}: epoch went back from {self.life_epoch} to {core.epoch}")
        self.life_epoch = core.epoch
        self.maybe_snapshot()
        if self.core is not core:
            return
        deadline = core.next_deadline_ms()
        if self.tick_at is None or deadline < self.tick_at:
            self.tick_at = max(deadline, sim.now)
            sim.push(self.tick_at, "tick", (self.node_id, self.incarnation, self.tick_at))

    def perform(self, action: Any) -> None:
        sim = self.sim
        inv = sim.invariants
        if isinstance(action, Send):
            msg = action.message
            epoch = getattr(msg, "epoch", None)
            if epoch is None:
                epoch = getattr(msg, "candidate_epoch", 0) - (1 if getattr(msg, "pre_vote", False) else 0)
            inv.on_epoch_sent(self.node_id, epoch)
            sim.network_send(msg)
        elif isinstance(action, PersistQuorumState):
            inv.on_persist(self.node_id, action.state.epoch)
            self.quorum_state = action.state
        elif isinstance(action, AppendEntries):
            prev = self.log.entry_epoch(action.entries[0].offset - 1) or 0
            inv.on_append(self.node_id, action.entries, prev)
            self.log.append(action.entries)
        elif isinstance(action, TruncateTo | TrimLog | WriteSnapshotChunk):
            sim.trace("log", self.node_id, action)
            self.log.apply(action)
        elif isinstance(action, InstallSnapshot):
            sim.trace("log", self.node_id, action)
            self.log.apply(action)
            data = self.log.snapshot_data(action.snapshot_id)
            inv.on_snapshot_bytes(self.node_id, action.snapshot_id, data)
            sm = StateMachine.load(data)
            inv.on_snapshot(self.node_id, action.snapshot_id, sm.digest)
            if sm.applied != action.snapshot_id.offset:
                raise InvariantViolation(f"node {self.node_id}: snapshot {action.snapshot_id} holds {sm.applied}")
            if sm.applied > self.sm.applied:
                self.sm = sm
        elif isinstance(action, Flush):
            flushed = (self.node_id, self.incarnation, action.up_to_offset)
            sim.disk.fsync(self.node_id, lambda: sim.dispatch("flushed", flushed))
        elif isinstance(action, CommitAdvanced):
            hw = action.high_watermark
            if hw <= self.life_hw:
                raise InvariantViolation(f"node {self.node_id}: high watermark {hw} after {self.life_hw}")
            self.life_hw = hw
            inv.on_exposed_hw(self.node_id, hw)
            if hw > self.log.durable_end_offset:
                raise InvariantViolation(
                    f"node {self.node_id} exposed high watermark {hw} beyond its durable log "
                    f"{self.log.durable_end_offset}"
                )
            while self.sm.applied < hw:
                o = self.sm.applied
                if o < self.log.log_start_offset:
                    raise InvariantViolation(f"node {self.node_id}: entry {o} to apply is gone from its log")
                entry = self.log.read(o, 1)[0]
                inv.on_apply(self.node_id, entry, self.core.epoch if self.core is not None else None)
                self.sm.apply(entry.epoch, entry.data)
            sim.trace("commit", self.node_id, hw)
        elif isinstance(action, AppendResolved):
            sim.on_append_resolved(self.node_id, action)
        elif isinstance(action, ReadResolved):
            sim.on_read_resolved(self.node_id, action)
        elif isinstance(action, RoleChanged):
            sim.trace("role", self.node_id, f"{action.role} epoch {action.epoch} leader {action.leader_id}")
            if action.role is Role.LEADER:
                inv.on_leader(self.node_id, action.epoch)
                inv.check_leader_log(self.node_id, action.epoch, self.log.log_start_offset, self._entry_at)
                snapshot = self.log.latest_snapshot()
                if snapshot is not None and snapshot.offset > 0:
                    inv.on_snapshot(self.node_id, snapshot, StateMachine.load(self.log.snapshot_data(snapshot)).digest)
                sim.leader_hint = self.node_id
        else:  # pragma: no cover
            raise AssertionError(f"unknown action {action!r}")

    def _entry_at(self, offset: int):
        if self.log.log_start_offset <= offset < self.log.end_offset:
            return self.log.read(offset, 1)[0]
        return None

    def maybe_snapshot(self) -> None:
        core = self.core
        every = self.sim.config.snapshot_every_entries
        if core is None or every <= 0:
            return
        applied = self.sm.applied
        if applied - self.log.log_start_offset < every or applied > core.high_watermark:
            return
        snapshot_id = core.snapshot_id_at(applied)
        data = self.sm.snapshot()
        self.sim.invariants.on_snapshot(self.node_id, snapshot_id, self.sm.digest)
        self.sim.invariants.on_snapshot_bytes(self.node_id, snapshot_id, data)
        self.log.create_snapshot(snapshot_id, data)
        self.sim.trace("snapshot", self.node_id, snapshot_id)
        core.on_snapshot_created(snapshot_id, self.sim.now)
        self.after_input()


class Simulator:
    def __init__(
        self,
        seed: int,
        config: SimConfig | None = None,
        core_factory: Callable[..., RaftNode] = RaftNode,
        trace_limit: int = 200_000,
    ) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        cfg = self.config
        self.loop = Loop(seed)
        self.rng = self.loop.rng
        self.net = Network(
            self.loop,
            NetworkConfig(
                cfg.min_delay_ms, cfg.max_delay_ms, cfg.drop_rate, cfg.duplicate_rate, cfg.spike_rate, cfg.spike_max_ms
            ),
        )
        self.disk = Disk(
            self.loop, DiskConfig(cfg.flush_min_ms, cfg.flush_max_ms, cfg.flush_spike_rate, cfg.flush_spike_max_ms)
        )
        self.core_factory = core_factory
        self.invariants = Invariants()
        self.voter_ids = frozenset(range(1, self.config.voters + 1))
        ids = list(range(1, self.config.voters + self.config.observers + 1))
        self.nodes = {i: SimNode(self, i) for i in ids}
        self.flush_extra_ms = self.disk.extra_ms  # a slow disk on some nodes (scenarios)
        self.leader_hint: int | None = None
        self.proposals: dict[tuple[int, int, int], bytes] = {}  # (node, epoch, last_offset) -> data
        self.acked: list[tuple[int, int, bytes]] = []
        self.reads: dict[tuple[int, int], int] = {}  # (node, read_id) -> required index
        self.reads_ok = 0
        self._proposal_seq = 0
        self.backpressured = 0
        self._trace: list[tuple[int, str, int, Any]] = []
        self._trace_limit = trace_limit
        self.steps = 0

    # ---- the kernel's pieces ------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.loop.now

    @property
    def events(self) -> int:
        return self.loop.events

    @property
    def faults_on(self) -> bool:
        return self.net.faulty

    @faults_on.setter
    def faults_on(self, on: bool) -> None:
        self.net.faulty = self.disk.faulty = on

    @property
    def cut(self) -> set[tuple[int, int]]:
        return self.net.cut

    def push(self, time: int, kind: str, payload: Any) -> None:
        self.loop.at(time, lambda: self.dispatch(kind, payload))

    def trace(self, kind: str, node: int, what: Any) -> None:
        if len(self._trace) < self._trace_limit:
            self._trace.append((self.now, kind, node, what))

    def format_trace(self, last: int | None = None) -> str:
        rows = self._trace if last is None else self._trace[-last:]
        return "\n".join(f"{t:>8} ms  {kind:<9} n{node}  {what}" for t, kind, node, what in rows)

    def fail(self, error: InvariantViolation) -> InvariantViolation:
        path = os.path.join(tempfile.gettempdir(), f"kraftpy-sim-{self.config.voters}v-seed-{self.seed}.trace")
        with open(path, "w") as fh:
            fh.write(self.format_trace())
        if self.config.profile in PROFILES and not self.config.scripted:
            how = (
                f"  replay: python -m tests.simulation.replay --seed {self.seed} {self.config.replay_args()}\n"
                f"  or:     python -m pytest tests/simulation -k '{self.config.label or 'random'}' "
                f"--seeds 1 --seed-start {self.seed}\n"
            )
        else:
            how = "  replay: run the same test again: a scripted run is deterministic too\n"
        message = (
            f"{error}\n  seed {self.seed} {self.config.label} at {self.now} ms after {self.events} events\n"
            f"{how}  full trace: {path}\n  last events:\n{self.format_trace(40)}"
        )
        return InvariantViolation(message)

    # ---- the network --------------------------------------------------------------------

    def network_send(self, msg: Any) -> None:
        self.trace("send", msg.src, msg)
        if not self.net.send(msg.src, msg.dst, lambda: self.dispatch("deliver", msg)):
            self.trace("drop", msg.src, type(msg).__name__)

    def partition(self, *groups: set[int] | frozenset[int] | list[int]) -> None:
        """Only nodes in the same group can talk; nodes in no group are cut from everyone."""
        self.net.partition(self.nodes, *groups)
        self.trace("fault", 0, f"partition {[sorted(set(g)) for g in groups]}")

    def isolate(self, node: int) -> None:
        others = set(self.nodes) - {node}
        self.partition({node}, others)

    def heal(self) -> None:
        self.net.heal()
        self.trace("fault", 0, "heal")

    # ---- nodes --------------------------------------------------------------------------

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].crash()

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.up:
            node.start()

    def schedule_restart(self, node_id: int, after_ms: int | None = None) -> None:
        delay = after_ms if after_ms is not None else self.rng.randint(50, 2000)
        self.push(self.now + delay, "restart", node_id)

    def leader(self) -> int | None:
        """The live leader of the highest epoch, if any."""
        best = None
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.role is Role.LEADER and (best is None or core.epoch > best[0]):
                best = (core.epoch, node.node_id)
        return None if best is None else best[1]

    def resign(self, node_id: int) -> None:
        core = self.nodes[node_id].core
        if core is not None:
            core.resign(self.now)
            self.nodes[node_id].after_input()

    # ---- clients ------------------------------------------------------------------------

    def propose(self, target: int | None = None) -> bool:
        node_id = target if target is not None else (self.leader_hint or self.rng.choice(sorted(self.voter_ids)))
        node = self.nodes[node_id]
        if node.core is None:
            self.leader_hint = None
            return False
        self._proposal_seq += 1
        data = f"p{self._proposal_seq}".encode()
        try:
            epoch, _base, last = node.core.append([data], self.now)
        except NotLeaderError as exc:
            hint = exc.details.get("leader_id")
            self.leader_hint = hint if hint in self.nodes else None
            node.after_input()
            return False
        except KafkaError as exc:
            if exc.code is not ErrorCode.NOT_ENOUGH_REPLICAS:
                raise
            self.backpressured += 1  # the uncommitted backlog is full: the client backs off
            node.after_input()
            return False
        self.proposals[(node_id, epoch, last)] = data
        node.after_input()
        return True

    def on_append_resolved(self, node_id: int, result: AppendResolved) -> None:
        data = self.proposals.pop((node_id, result.epoch, result.last_offset), None)
        if data is None:
            return
        if result.error is ErrorCode.NONE:
            self.invariants.on_acked(node_id, result.epoch, result.last_offset, data)
            self.acked.append((result.epoch, result.last_offset, data))

    def read(self, node_id: int) -> bool:
        core = self.nodes[node_id].core
        if core is None:
            return False
        required = max(self.invariants.acked_high, len(self.invariants.committed))
        try:
            read_id = core.read_index(self.now)
        except NotLeaderError:
            self.nodes[node_id].after_input()
            return False
        self.reads[(node_id, read_id)] = required
        self.nodes[node_id].after_input()
        return True

    def on_read_resolved(self, node_id: int, result: ReadResolved) -> None:
        required = self.reads.pop((node_id, result.read_id), None)
        if required is None or result.error is not ErrorCode.NONE:
            return
        self.invariants.on_read(node_id, result.read_index, required)
        self.reads_ok += 1

    # ---- running --------------------------------------------------------------------------

    def step(self) -> bool:
        return self.loop.step()

    def dispatch(self, kind: str, payload: Any) -> None:
        if kind == "deliver":
            node = self.nodes[payload.dst]
            if node.core is None:  # the network dropped it already if the link is cut
                return
            self.trace("recv", payload.dst, payload)
            node.core.handle(payload, self.now)
            node.after_input()
        elif kind == "tick":
            node_id, incarnation, at = payload
            node = self.nodes[node_id]
            if node.core is None or node.incarnation != incarnation or node.tick_at != at:
                return
            node.tick_at = None
            core = node.core
            core.tick(self.now)
            node.after_input()
            if node.core is core and core.next_deadline_ms() <= self.now:
                # a due timer the tick did not consume: a real shell would spin on it
                raise InvariantViolation(
                    f"node {node_id}: busy loop: next_deadline_ms {core.next_deadline_ms()} is not after "
                    f"the tick at {self.now} ({core.role})"
                )
        elif kind == "flushed":
            node_id, incarnation, offset = payload
            node = self.nodes[node_id]
            if node.core is None or node.incarnation != incarnation:
                return
            node.log.flush(offset)
            node.core.on_flushed(offset, self.now)
            node.after_input()
        elif kind == "restart":
            self.restart(payload)
        elif kind == "call":
            payload()
        self.steps += 1

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Run events until `predicate()` holds (checked after each event) or the virtual
        deadline passes. Returns whether the predicate held."""
        try:
            return self.loop.run_until(predicate, self.now + timeout_ms)
        except InvariantViolation as exc:
            raise self.fail(exc) from None
        except Exception as exc:  # a core error (RaftInvariantError, ShellContractError, ...) with its trace
            raise self.fail(InvariantViolation(f"{type(exc).__name__}: {exc}")) from exc

    def run_for(self, ms: int) -> None:
        self.run_until(lambda: False, ms)

    def every(self, interval_ms: int, fn: Callable[[], Any], until_ms: int, jitter: bool = True) -> None:
        """Call fn every ~interval_ms of virtual time until `until_ms`."""

        def fire() -> None:
            if self.now >= until_ms:
                return
            fn()
            gap = self.rng.randint(interval_ms // 2, interval_ms * 3 // 2) if jitter else interval_ms
            self.push(self.now + max(1, gap), "call", fire)

        self.push(self.now + 1, "call", fire)

    # ---- random faults ------------------------------------------------------------------

    def random_fault(self) -> None:
        names = [n for n, _ in self.config.fault_weights]
        weights = [w for _, w in self.config.fault_weights]
        fault = self.rng.choices(names, weights)[0]
        up = [n for n in sorted(self.nodes) if self.nodes[n].up]
        leader = self.leader()
        if fault == "crash" and up:
            victim = self.rng.choice(up)
            self.trace("fault", victim, "crash")
            self.crash(victim)
            self.schedule_restart(victim)
        elif fault == "crash_leader" and leader is not None:
            self.trace("fault", leader, "crash the leader")
            self.crash(leader)
            self.schedule_restart(leader)
        elif fault == "power_loss":
            self.trace("fault", 0, "power loss: every node crashes at once")
            for victim in up:
                self.crash(victim)
                self.schedule_restart(victim)
        elif fault == "partition_one":
            self.isolate(self.rng.choice(sorted(self.nodes)))
        elif fault == "one_way":
            a, b = self.rng.sample(sorted(self.nodes), 2)
            self.cut.add((a, b))  # a's messages to b are lost, b's to a still arrive
            self.trace("fault", a, f"one-way partition: {a} -> {b} cut")
        elif fault == "isolate_leader" and leader is not None:
            self.isolate(leader)
        elif fault == "partition_split":
            ids = sorted(self.nodes)
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.partition(set(ids[:cut]), set(ids[cut:]))
        elif fault == "resign" and leader is not None:
            self.trace("fault", leader, "graceful restart (resign, stop, start)")
            self.resign(leader)
            self.crash(leader)
            self.schedule_restart(leader, self.rng.randint(10, 500))
        elif fault == "heal":
            self.heal()

    def run_random(self) -> dict[str, int]:
        """The random run: a workload under faults, then a fault-free settle period in which
        the cluster must elect a leader, commit, and converge."""
        cfg = self.config
        self.run_until(lambda: (self.start(), True)[1], 0)
        end = cfg.duration_ms
        self.faults_on = cfg.faults
        self.every(cfg.proposal_interval_ms, self.propose, end)
        self.every(cfg.read_interval_ms, lambda: self.leader() is not None and self.read(self.leader()), end)
        if cfg.faults:

            def fault() -> None:
                if self.now >= end:
                    return
                self.random_fault()
                self.push(
                    self.now + self.rng.randint(cfg.fault_interval_min_ms, cfg.fault_interval_max_ms), "call", fault
                )

            self.push(self.rng.randint(cfg.fault_interval_min_ms, cfg.fault_interval_max_ms), "call", fault)
        self.run_until(lambda: False, end)
        # settle: no more faults; everyone up and connected
        self.faults_on = False
        self.heal()
        for node_id in sorted(self.nodes):
            self.restart(node_id)
        self.settle(cfg.settle_ms)
        return {"events": self.events, "acked": len(self.acked), "committed": len(self.invariants.committed)}

    def settle(self, timeout_ms: int) -> None:
        """Liveness: a leader exists, a fresh proposal commits, and every node (voters and
        observers) applies the whole committed log."""
        marker: list[bytes] = []  # the latest settle proposal, re-proposed until one is acknowledged

        def acked(data: bytes) -> bool:
            return any(d == data for _, _, d in self.acked)

        def propose_marker() -> None:
            if marker and (acked(marker[-1]) or marker[-1] in self.proposals.values()):
                return
            leader = self.leader()
            if leader is not None and self.propose(leader):
                marker.append(f"p{self._proposal_seq}".encode())

        start = self.now
        self.every(100, propose_marker, start + timeout_ms, jitter=False)

        def converged() -> bool:
            if not marker or not acked(marker[-1]):
                return False
            target = len(self.invariants.committed)
            if target < self.invariants.acked_high:
                return False  # acknowledged by the quorum, not yet applied anywhere
            return all(n.up and n.sm.applied == target for n in self.nodes.values())

        if not self.run_until(converged, timeout_ms):
            states = "; ".join(
                f"n{n.node_id}: {n.core.role if n.core else 'down'} epoch {n.core.epoch if n.core else '-'} "
                f"applied {n.sm.applied} log {n._log_desc()}"
                for n in self.nodes.values()
            )
            raise self.fail(
                InvariantViolation(f"liveness: no convergence {timeout_ms} ms after the faults stopped: {states}")
            )
        try:
            self.invariants.check_acked_in_log(self.acked)
        except InvariantViolation as exc:
            raise self.fail(exc) from None


def run_seed(seed: int, config: SimConfig, core_factory: Callable[..., RaftNode] = RaftNode) -> dict[str, int]:
    sim = Simulator(seed, config, core_factory)
    return sim.run_random()


def with_overrides(config: SimConfig, **changes: Any) -> SimConfig:
    return dataclasses.replace(config, **changes)
