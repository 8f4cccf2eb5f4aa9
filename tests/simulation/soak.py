"""The soak workload: the production controller and the replication core together on the kernel.

The replication workload's brokers, client and checker (replication_sim.py)
run against the real `QuorumController` (metadata/controller/quorum_controller.py, in the
ControllerHarness shell) instead of the replication workload's minimal one:
brokers register (a new incarnation on every restart), heartbeat, are fenced
by the controller's own session timeout, and send their ISR changes as
AlterPartition requests; the partition's leader and ISR are what the
controller's committed image says. The controller's records commit a random
few milliseconds after they are appended (the metadata quorum's latency), and
a controller failover loses what had not committed yet, as a new Raft leader
truncates it; its waiting answers are lost (brokers retry).

Faults, all drawn from the kernel loop's seeded generator: broker crashes that
lose the unsynced tail, power loss of the leader with a fast restart, broker
partitions, a broker cut from the controller, message loss, controller
failovers. Checked after every event: the replication checker's invariants
(no committed or acknowledged record lost, replicas identical below the HW,
HW monotonic, no duplicate producer sequence), one leader per leader epoch
among the brokers acting as leaders, and at every controller commit the
controller's invariants (controller_sim.CommittedHistoryChecker). A run ends
with a fault-free period after which every replica must be identical and the
controller must hold every broker's current incarnation, unfenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.replication import AlterPartitionRequest, AlterPartitionResponse, PartitionRegistration
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AlterPartitionItem,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerResult,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.controller.requests import AlterPartitionRequest as MetadataAlterPartition
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.simulation import replication_sim
from tests.simulation.controller_sim import CommittedHistoryChecker
from tests.simulation.replication_sim import CONTROLLER, SimConfig, SimResult

CLUSTER_ID = "soak"
TOPIC = "soak"
# A soak run's timing: slower heartbeats and ticks than the replication workload's 3-second runs, so
# minutes of virtual time cost seconds of wall time; session and lag timeouts scale with them.
SOAK = {
    "duration_ms": 200_000,
    "heal_ms": 5_000,
    "tick_interval_ms": 20,
    "heartbeat_interval_ms": 50,
    "session_timeout_ms": 400,
    "replica_lag_time_max_ms": 300,
    "fetch_max_wait_ms": 50,
    "fetch_timeout_ms": 150,
    "produce_timeout_ms": 400,
    "client_timeout_ms": 600,
    "fault_interval_ms": (100, 800),
    "downtime_ms": (50, 1_500),
    "partition_ms": (100, 1_500),
}
COMMIT_LATENCY_MS = (2, 30)
FAILOVER_SHARE = 0.1  # of the faults, the share that are controller failovers


@dataclass
class _Registered:
    broker_epoch: int  # the broker's own incarnation number (replication_sim.Broker.broker_epoch)


class QuorumControllerShell:
    """The real QuorumController behind the replication workload's controller interface.

    The workload's brokers number their incarnations 0, 1, 2...; the controller
    assigns its own broker epochs. This shell keeps the map between them, so a
    broker acts on an image only once it holds this incarnation's registration.
    """

    def __init__(self, sim: SoakSimulation) -> None:
        self.sim = sim
        config = sim.config
        self.harness = ControllerHarness(
            ControllerConfig(
                cluster_id=CLUSTER_ID,
                broker_session_timeout_ms=config.session_timeout_ms,
                broker_heartbeat_interval_ms=config.heartbeat_interval_ms,
                metadata_max_idle_interval_ms=0,
                # The brokers' min ISR: the ELR (KIP-966) rests on their HW standing still below it.
                min_insync_replicas=config.min_insync_replicas,
            ),
            seed=config.seed,
            auto_commit=False,
        )
        self.checker = CommittedHistoryChecker(min_isr_default=config.min_insync_replicas)
        self.incarnation_of: dict[tuple[int, int], int] = {}  # (broker, controller epoch) -> incarnation
        self.controller_epoch: dict[tuple[int, int], int] = {}  # (broker, incarnation) -> controller epoch
        self.waiting: dict[int, Callable[[Any], None]] = {}  # id(result) -> what to do with its answer
        self.commit_scheduled = False
        self.failovers = 0
        self.registration: PartitionRegistration | None = None  # None while bootstrapping
        # Bootstrap: every broker's first incarnation registered and unfenced, then the topic.
        for b in config.brokers:
            self.register(b, 0)
        self.commit()
        for b in config.brokers:
            self.heartbeat(b, 0)
        self.commit()
        result = self.harness.send(CreateTopicsRequest((CreatableTopic(TOPIC, 1, len(config.brokers)),)))
        self.commit()
        self.topic_id: uuid.UUID = result.response.results[0].topic_id
        self.registration = self._registration(self.harness.committed)

    # -- the workload's controller interface ----------------------------------------------------------------

    @property
    def brokers(self) -> dict[int, _Registered]:
        image = self.harness.committed
        out = {}
        for b in self.sim.config.brokers:
            reg = image.broker(b)
            epoch = -1 if reg is None else self.incarnation_of.get((b, reg.broker_epoch), -1)
            out[b] = _Registered(epoch)
        return out

    def tick(self) -> None:
        self._send(self.harness.tick(self.sim.loop.now))

    def register(self, broker: int, incarnation: int, on_answer: Callable[[Any], None] | None = None) -> None:
        listeners = (Listener("PLAINTEXT", "127.0.0.1", 9092 + broker),)
        # After a process crash the log is whole: the broker names the epoch of its last registration
        # (KIP-966's PreviousBrokerEpoch), and the controller keeps it among the eligible leaders.
        node = self.sim.brokers.get(broker)  # none yet while bootstrapping
        previous = node.previous_epoch_of.get(incarnation, -1) if node is not None else -1
        request = BrokerRegistrationRequest(
            broker, CLUSTER_ID, f"broker-{broker}-inc-{incarnation}", listeners, None, previous
        )
        result = self.harness.send(request, self.sim.loop.now)
        if isinstance(result.response, BrokerRegistrationResponse):
            epoch = result.response.broker_epoch
            self.incarnation_of[(broker, epoch)] = incarnation
            self.controller_epoch[(broker, incarnation)] = epoch
        self._send(result, on_answer)

    def heartbeat(self, broker: int, incarnation: int) -> None:
        epoch = self.controller_epoch.get((broker, incarnation))
        if epoch is None:
            return  # its registration was lost in a failover: it registers again
        offset = self.harness.committed.offset
        self._send(self.harness.send(BrokerHeartbeatRequest(broker, epoch, offset), self.sim.loop.now))

    def alter_partition(self, broker: int, request: AlterPartitionRequest, reply: Callable[[Any], None]) -> None:
        incarnation = self.sim.brokers[broker].broker_epoch
        epoch = self.controller_epoch.get((broker, incarnation), -1)
        item = AlterPartitionItem(self.topic_id, 0, request.leader_epoch, request.isr, request.partition_epoch)
        result = self.harness.send(MetadataAlterPartition(broker, epoch, (item,)), self.sim.loop.now)
        self._send(result, lambda response: reply(_alter_partition_answer(response)))

    # -- committing -----------------------------------------------------------------------------------------

    def _send(self, result: ControllerResult, on_answer: Callable[[Any], None] | None = None) -> None:
        if on_answer is not None:
            self.waiting[id(result)] = on_answer
        if self.harness.pending and not self.commit_scheduled:
            self.commit_scheduled = True
            self.sim.loop.after(self.sim.rng.randint(*COMMIT_LATENCY_MS), self.commit)
        elif not self.harness.pending:
            self.commit()  # nothing to wait for: answer now (the answer may still wait for older records)

    def commit(self) -> None:
        self.commit_scheduled = False
        old = self.harness.committed
        released = self.harness.commit()
        new = self.harness.committed
        if new is not old:
            records = [r for offset, r in self.harness.log if old.offset < offset <= new.offset]
            problem = self.checker.check(old, new, records)
            if problem is not None:
                self.sim.checker.violation(f"controller: {problem}")
            if self.registration is not None:
                registration = self._registration(new)
                if registration != self.registration:
                    previous, self.registration = self.registration, registration
                    self.sim.on_registration_committed(previous, registration)
                elif old.partition(self.topic_id, 0).elr != new.partition(self.topic_id, 0).elr:
                    self.sim.checker.on_isr_change()  # who may lead changed: forfeits are counted again
                for b in self.sim.config.brokers:
                    self.sim.push_metadata(b)
        for result in released:
            on_answer = self.waiting.pop(id(result), None)
            if on_answer is not None:
                on_answer(result.response)

    def fail_over(self) -> None:
        """A new active controller: uncommitted records are gone, waiting answers never come."""
        self.harness.fail_over()
        self.waiting.clear()
        self.failovers += 1

    def protected_replicas(self) -> set[int]:
        """The replicas a committed record must survive on: the ISR, and the eligible leader replicas
        (KIP-966) the controller elects from once the ISR is empty."""
        part = self.harness.committed.partition(self.topic_id, 0)
        return set(part.isr) | set(part.elr)

    def _registration(self, image: MetadataImage) -> PartitionRegistration:
        part = image.partition(self.topic_id, 0)
        return PartitionRegistration(part.replicas, part.isr, part.leader, part.leader_epoch, part.partition_epoch)


def _alter_partition_answer(response: Any) -> AlterPartitionResponse:
    if isinstance(response, KafkaError):
        return AlterPartitionResponse(response.code)
    (result,) = response.results
    if result.error is not None:
        return AlterPartitionResponse(result.error.code)
    return AlterPartitionResponse(ErrorCode.NONE, result.leader_epoch, result.isr, result.partition_epoch)


class SoakSimulation(replication_sim.Simulation):
    controller: QuorumControllerShell

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.leaders_by_epoch: dict[int, int] = {}
        replication_checks = self.checker.after_event

        def after_event() -> None:
            replication_checks()
            self.check_one_leader_per_epoch()

        self.checker.after_event = after_event
        replicas_converged = self.checker.check_converged

        def check_converged() -> None:
            replicas_converged()
            self.check_controller_settled()

        self.checker.check_converged = check_converged

    def make_controller(self) -> QuorumControllerShell:
        return QuorumControllerShell(self)

    def controller_alter_partition(
        self, broker: int, request: AlterPartitionRequest, reply: Callable[[AlterPartitionResponse], None]
    ) -> None:
        self.controller.alter_partition(broker, request, reply)

    def controller_heartbeat(self, broker: int, broker_epoch: int) -> None:
        self.controller.heartbeat(broker, broker_epoch)
        self.push_metadata(broker)

    def controller_register(self, broker: int, broker_epoch: int) -> None:
        target = self.brokers[broker]

        def answer(response: Any) -> None:
            if isinstance(response, BrokerRegistrationResponse):
                self.net.send(CONTROLLER, broker, lambda: registered(response.broker_epoch))

        def registered(controller_epoch: int) -> None:
            if target.alive and target.broker_epoch == broker_epoch:
                target.recorded_epoch = controller_epoch  # the restart record, written on the answer
            target.on_registered(broker_epoch)

        self.controller.register(broker, broker_epoch, answer)

    def _fault(self) -> None:
        if self.loop.now < self.config.duration_ms and self.rng.random() < FAILOVER_SHARE:
            self.trace.append(f"t={self.loop.now} controller failover")
            self.controller.fail_over()
            self._schedule_fault()
            return
        super()._fault()

    def check_one_leader_per_epoch(self) -> None:
        for broker in self.brokers.values():
            core = broker.partition.leader if broker.alive else None
            if core is None:
                continue
            seen = self.leaders_by_epoch.setdefault(core.leader_epoch, broker.id)
            if seen != broker.id:
                self.checker.violation(f"brokers {seen} and {broker.id} both led leader epoch {core.leader_epoch}")

    def check_controller_settled(self) -> None:
        """After the fault-free period the controller knows every broker's current incarnation, unfenced."""
        image = self.controller.harness.committed
        for broker in self.brokers.values():
            reg = image.broker(broker.id)
            incarnation = None if reg is None else self.controller.incarnation_of.get((broker.id, reg.broker_epoch))
            if reg is None or reg.fenced or incarnation != broker.broker_epoch:
                held = "nothing" if reg is None else f"incarnation {incarnation}, fenced={reg.fenced}"
                self.checker.violation(
                    f"after healing the controller holds {held} for broker {broker.id}, "
                    f"not its incarnation {broker.broker_epoch} unfenced"
                )


def run(config: SimConfig) -> SimResult:
    return SoakSimulation(config).run()


def soak_config(seed: int, **changes: Any) -> SimConfig:
    return SimConfig(seed=seed, **{**SOAK, **changes})
