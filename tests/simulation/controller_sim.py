"""The controller workload on the simulation kernel: brokers around the active controller.

Each step is one event of the kernel loop, at a virtual time drawn from the
loop's seeded generator; the violation type is the kernel's.

The controller runs in a ControllerHarness without auto-commit: records
commit only when the simulated quorum says so (a random number of batches at
a time) and a controller failover loses whatever was not committed, as a new
Raft leader truncates it. Brokers register with a fresh incarnation on every
start, replay the committed log with a random lag, heartbeat every
`broker_heartbeat_interval_ms` (jittered, sometimes lost), act only on
responses released after their records committed, crash and restart, ask for
controlled shutdowns, and, when they lead a partition, propose ISR shrinks
and expansions from their own (possibly stale) view. Topics are created as
it runs.

Invariants, checked at every commit (InvariantViolation names seed and step):
- every committed image passes `check_image_invariants` (ISR a non-empty
  subset of the replicas, the leader an ISR member on a usable broker);
- at most one leader per (partition, leader epoch) over the whole committed
  history, and leader epochs and partition epochs never go back;
- a partition's ISR and leader change only through committed PartitionChange
  records for that partition;
- a new leader comes from the ISR in effect just before its record (no topic
  here allows unclean election);
- an AlterPartition is accepted only at the partition epoch the controller
  holds (Kafka's INVALID_UPDATE_VERSION otherwise): a stale view of the ISR
  never becomes the ISR;
and at the end of a fault-free period: every dead broker is fenced and leads
nothing, every live broker is unfenced, and every partition with a live ISR
member has a leader.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.partition_change import merged
from kraftpy.metadata.controller.requests import (
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerResult,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.harness import ControllerHarness, check_image_invariants
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage, PartitionRegistration
from kraftpy.metadata.records import Listener, PartitionChangeRecord, PartitionRecord
from kraftpy.protocol.errors import KafkaError
from tests.simulation.kernel import InvariantViolation, Loop

SESSION_TIMEOUT_MS = 1800
MIN_ISR = 2  # topics of RF 2 and 3 fall below it, so eligible leader replicas (KIP-966) come and go
HEARTBEAT_INTERVAL_MS = 300

__all__ = ["CommittedHistoryChecker", "ControllerSim", "InvariantViolation", "SimStats"]


@dataclass
class SimBroker:
    broker_id: int
    alive: bool = True
    incarnation: int = 0
    epoch: int = -1  # known broker epoch (from a released registration response)
    image_index: int = 0  # how far into the committed history this broker has replayed
    next_heartbeat_ms: int = 0
    in_flight: bool = False
    shutting_down: bool = False
    released: bool = False  # the controller said should_shut_down

    @property
    def incarnation_id(self) -> str:
        return f"broker-{self.broker_id}-inc-{self.incarnation}"


@dataclass
class SimStats:
    commits: int = 0
    fencings: int = 0
    failovers: int = 0
    isr_changes: int = 0
    leader_changes: int = 0
    topics: int = 0
    elr_elections: int = 0  # leaders taken from the ELR of an empty ISR (KIP-966)


@dataclass
class CommittedHistoryChecker:
    """The controller's invariants over its committed history (see the module docstring); the
    controller workload and the soak (soak.py) check every commit with it."""

    stats: SimStats = field(default_factory=SimStats)
    leaders_by_epoch: dict[tuple[uuid.UUID, int, int], int] = field(default_factory=dict)
    min_isr_default: int = 1  # the controller's min_insync_replicas (for the ELR invariant)

    def check(self, old: MetadataImage, new: MetadataImage, records: list[Any]) -> str | None:
        """The first broken invariant going from `old` to `new` through `records`, or None."""
        isr_changed = {
            (r.topic_id, r.partition) for r in records if isinstance(r, PartitionChangeRecord) and r.isr is not None
        }
        leader_changed = {
            (r.topic_id, r.partition) for r in records if isinstance(r, PartitionChangeRecord) and r.leader is not None
        }
        created = {(r.topic_id, r.partition) for r in records if isinstance(r, PartitionRecord)}
        problem = self._check_elections(old, new, records)
        if problem is not None:
            return problem
        try:
            check_image_invariants(new, self.min_isr_default)
        except AssertionError as e:
            return f"committed image breaks an invariant: {e}"
        for topic in new.topics.by_id.values():
            before = old.topics.by_id.get(topic.topic_id)
            for p, part in enumerate(topic.partitions):
                key = (topic.topic_id, p)
                prev = before.partitions[p] if before is not None and p < len(before.partitions) else None
                if prev is None:
                    if key not in created:
                        return f"{topic.name}-{p} appeared without a committed Partition record"
                else:
                    if part.isr != prev.isr:
                        self.stats.isr_changes += 1
                        if key not in isr_changed:
                            return f"{topic.name}-{p} ISR {prev.isr} -> {part.isr} without a committed record"
                    if part.leader != prev.leader:
                        self.stats.leader_changes += 1
                        if key not in leader_changed:
                            return f"{topic.name}-{p} leader {prev.leader} -> {part.leader} without a record"
                    if part.leader_epoch < prev.leader_epoch or part.partition_epoch < prev.partition_epoch:
                        return f"{topic.name}-{p} epochs went back: {prev} -> {part}"
                if part.leader != NO_LEADER:
                    seen = self.leaders_by_epoch.setdefault((topic.topic_id, p, part.leader_epoch), part.leader)
                    if seen != part.leader:
                        return f"{topic.name}-{p} has leaders {seen} and {part.leader} in epoch {part.leader_epoch}"
        for b in new.brokers.values():
            if b.fenced and not (old.broker(b.broker_id) or b).fenced:
                self.stats.fencings += 1
        return None

    def _check_elections(self, old: MetadataImage, new: MetadataImage, records: list[Any]) -> str | None:
        """Each new leader comes from the ISR in effect just before its record; from an empty ISR, from
        the ELR (KIP-966); from an empty ISR and ELR, only the last known leader (Kafka's balanced
        recovery). Several changes to one partition may commit together (an ISR expansion, then a
        fencing that elects the added replica), so the state of the previous commit is not the one to
        check against."""
        state: dict[tuple[uuid.UUID, int], PartitionRegistration] = {}
        for r in records:
            if isinstance(r, PartitionRecord):
                state[(r.topic_id, r.partition)] = PartitionRegistration(
                    r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch, r.elr, r.last_known_elr
                )
            elif isinstance(r, PartitionChangeRecord):
                key = (r.topic_id, r.partition)
                if key not in state:
                    before = old.partition(r.topic_id, r.partition)
                    if before is None:
                        continue
                    state[key] = before
                part = state[key]
                after = merged(part, r)
                leader = r.leader
                if (
                    leader is not None
                    and leader != NO_LEADER
                    and not (
                        leader in part.isr
                        or (leader in part.elr and after.isr == (leader,))
                        or (part.last_known_elr == (leader,) and after.isr == (leader,) and not after.elr)
                    )
                ):
                    topic = new.topics.by_id.get(r.topic_id)
                    name = topic.name if topic is not None else r.topic_id
                    return (
                        f"{name}-{r.partition} elected {leader} from outside its ISR {part.isr}, ELR {part.elr} "
                        f"and last known leader {part.last_known_elr}"
                    )
                if leader is not None and leader not in part.isr and leader in part.elr:
                    self.stats.elr_elections += 1
                state[key] = after
        return None


@dataclass
class ControllerSim:
    seed: int
    brokers: int = 5
    steps: int = 400
    loop: Loop = field(init=False)
    harness: ControllerHarness = field(init=False)
    sim_brokers: dict[int, SimBroker] = field(init=False)
    history: list[MetadataImage] = field(init=False)
    checker: CommittedHistoryChecker = field(init=False)
    waiting: dict[int, tuple[int, str, ControllerResult]] = field(default_factory=dict)
    stats: SimStats = field(default_factory=SimStats)
    step_no: int = 0

    def __post_init__(self) -> None:
        self.loop = Loop(self.seed)
        self.rng = self.loop.rng
        self.checker = CommittedHistoryChecker(self.stats, min_isr_default=MIN_ISR)
        config = ControllerConfig(
            cluster_id="sim",
            broker_session_timeout_ms=SESSION_TIMEOUT_MS,
            broker_heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            leader_imbalance_check_interval_seconds=5,
            metadata_max_idle_interval_ms=0,
            min_insync_replicas=MIN_ISR,
            max_partitions_per_topic=16,
        )
        self.harness = ControllerHarness(config, seed=self.seed, auto_commit=False)
        self.sim_brokers = {b: SimBroker(b) for b in range(1, self.brokers + 1)}
        self.history = [self.harness.committed]

    # --- plumbing ------------------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        raise InvariantViolation(f"seed {self.seed} step {self.step_no} t={self.harness.now_ms}: {message}")

    def send(self, broker_id: int, kind: str, request: Any) -> None:
        result = self.harness.send(request)
        if broker_id >= 0:
            self.waiting[id(result)] = (broker_id, kind, result)

    def commit(self, batches: int | None = None) -> None:
        old = self.harness.committed
        released = self.harness.commit(batches)
        new = self.harness.committed
        if new is not old:
            self.stats.commits += 1
            self.check_commit(old, new)
            self.history.append(new)
        for result in released:
            entry = self.waiting.pop(id(result), None)
            if entry is not None:
                self.deliver(entry[0], entry[1], result.response)

    def deliver(self, broker_id: int, kind: str, response: Any) -> None:
        broker = self.sim_brokers[broker_id]
        broker.in_flight = False
        if not broker.alive:
            return
        if isinstance(response, KafkaError):
            if response.name in ("STALE_BROKER_EPOCH", "BROKER_ID_NOT_REGISTERED"):
                broker.epoch = -1
            return
        if kind == "register" and isinstance(response, BrokerRegistrationResponse):
            broker.epoch = response.broker_epoch
            broker.next_heartbeat_ms = self.harness.now_ms
        elif kind == "heartbeat" and isinstance(response, BrokerHeartbeatResponse) and response.should_shut_down:
            broker.released = True

    # --- invariants ----------------------------------------------------------------------------------
    def check_commit(self, old: MetadataImage, new: MetadataImage) -> None:
        records = [r for offset, r in self.harness.log if old.offset < offset <= new.offset]
        problem = self.checker.check(old, new, records)
        if problem is not None:
            self.fail(problem)

    # --- broker behaviour ----------------------------------------------------------------------------
    def broker_image(self, broker: SimBroker) -> MetadataImage:
        return self.history[broker.image_index]

    def broker_step(self, broker: SimBroker, faults: bool) -> None:
        now = self.harness.now_ms
        # Replay: catch up with the committed log, with a random lag when faults are on.
        behind = len(self.history) - 1 - broker.image_index
        if behind > 0:
            broker.image_index += behind if not faults else self.rng.randint(0, behind)
        if not broker.alive or broker.in_flight or broker.released or now < broker.next_heartbeat_ms:
            return
        broker.next_heartbeat_ms = now + HEARTBEAT_INTERVAL_MS + (self.rng.randint(-50, 50) if faults else 0)
        if faults and self.rng.random() < 0.05:
            return  # this heartbeat is lost on the way
        broker.in_flight = True
        if broker.epoch < 0:
            listeners = (Listener("PLAINTEXT", "127.0.0.1", 9090 + broker.broker_id),)
            request = BrokerRegistrationRequest(broker.broker_id, "sim", broker.incarnation_id, listeners)
            self.send(broker.broker_id, "register", request)
            return
        offset = self.broker_image(broker).offset
        self.send(
            broker.broker_id,
            "heartbeat",
            BrokerHeartbeatRequest(broker.broker_id, broker.epoch, offset, broker.shutting_down),
        )
        if faults and self.rng.random() < 0.3:
            self.propose_isr_change(broker)

    def propose_isr_change(self, broker: SimBroker) -> None:
        """As a partition leader would: shrink a lagging follower out, or expand a caught-up one back."""
        image = self.broker_image(broker)
        led = [
            (t, p, part)
            for t, p, part in image.partitions_on_broker(broker.broker_id)
            if part.leader == broker.broker_id
        ]
        if not led:
            return
        topic, p, part = self.rng.choice(led)
        followers = [r for r in part.replicas if r != broker.broker_id]
        if len(part.isr) > 1 and self.rng.random() < 0.5:
            new_isr = tuple(r for r in part.isr if r != self.rng.choice([r for r in part.isr if r != broker.broker_id]))
        else:
            outside = [r for r in followers if r not in part.isr and self.sim_brokers[r].alive]
            if not outside:
                return
            new_isr = (*part.isr, self.rng.choice(outside))
        item = AlterPartitionItem(topic.topic_id, p, part.leader_epoch, new_isr, part.partition_epoch)
        current = self.harness.latest.partition(topic.topic_id, p)
        result = self.harness.send(AlterPartitionRequest(broker.broker_id, broker.epoch, (item,)))
        (answer,) = result.response.results
        if answer.error is None and current is not None and item.partition_epoch != current.partition_epoch:
            self.fail(
                f"{topic.name}-{p}: AlterPartition at partition epoch {item.partition_epoch} accepted while the "
                f"controller held {current.partition_epoch}"
            )

    # --- the run -------------------------------------------------------------------------------------
    def random_event(self) -> None:
        roll = self.rng.random()
        alive = [b for b in self.sim_brokers.values() if b.alive]
        dead = [b for b in self.sim_brokers.values() if not b.alive]
        if roll < 0.04 and len(alive) > 1:
            victim = self.rng.choice(alive)
            victim.alive = False
            victim.in_flight = False
        elif roll < 0.08 and dead:
            b = self.rng.choice(dead)
            b.alive, b.incarnation, b.epoch, b.image_index = True, b.incarnation + 1, -1, 0
            b.shutting_down = b.released = False
            b.next_heartbeat_ms = self.harness.now_ms
        elif roll < 0.10 and alive:
            b = self.rng.choice(alive)
            if b.epoch >= 0:
                b.shutting_down = True
        elif roll < 0.12:
            self.harness.fail_over()
            self.stats.failovers += 1
            for b in self.sim_brokers.values():
                b.in_flight = False  # waiting answers become NOT_CONTROLLER; brokers retry
            self.waiting.clear()
        elif roll < 0.20:
            name = f"t{self.stats.topics}"
            self.stats.topics += 1
            topic = CreatableTopic(name, self.rng.randint(1, 8), self.rng.randint(1, 3))
            self.send(-1, "create", CreateTopicsRequest((topic,)))

    def finish_shutdowns(self) -> None:
        """A broker the controller released stops (and restarts later with a new incarnation)."""
        for b in self.sim_brokers.values():
            if b.released and b.alive:
                b.alive = False
                b.in_flight = False

    def step(self, faults: bool) -> None:
        """One event of the kernel loop, a random 1-120 ms (50 ms when quiet) after the last."""
        self.loop.after(self.rng.randint(1, 120) if faults else 50, lambda: self._step(faults))
        self.loop.step()

    def _step(self, faults: bool) -> None:
        self.step_no += 1
        self.harness.now_ms = self.loop.now
        if faults:
            self.random_event()
        for b in self.sim_brokers.values():
            self.broker_step(b, faults)
        self.harness.tick()
        if not faults or self.rng.random() < 0.7:
            self.commit(None if not faults else self.rng.randint(0, len(self.harness.pending)))
        self.finish_shutdowns()

    def run(self) -> SimStats:
        for _ in range(self.steps):
            self.step(faults=True)
        self.commit()
        # Fault-free: long enough for every lapsed lease to expire and every live broker to catch up.
        quiet_steps = 3 * SESSION_TIMEOUT_MS // 50
        for _ in range(quiet_steps):
            self.step(faults=False)
        self.check_settled()
        return self.stats

    def check_settled(self) -> None:
        image = self.harness.committed
        for b in self.sim_brokers.values():
            registration = image.broker(b.broker_id)
            if not b.alive:
                if registration is not None and not registration.fenced:
                    self.fail(f"dead broker {b.broker_id} is still unfenced after a quiet period")
                if image.leads_any(b.broker_id):
                    self.fail(f"dead broker {b.broker_id} still leads partitions")
            elif registration is None or registration.fenced:
                self.fail(f"live broker {b.broker_id} is not registered and unfenced: {registration}")
        for topic in image.topics.by_id.values():
            for p, part in enumerate(topic.partitions):
                live_isr = [r for r in part.isr if self.sim_brokers[r].alive]
                if live_isr and part.leader == NO_LEADER:
                    self.fail(f"{topic.name}-{p} has live ISR members {live_isr} but no leader: {part}")
