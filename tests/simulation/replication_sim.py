"""The replication workload on the simulation kernel: one partition replicated on three brokers.

The loop, the seeded generator, the network (delay, loss, cuts), the disk
(fsyncs; a crash keeps the synced prefix) and the violation collector are the
kernel's (tests/simulation/kernel/). The workload's own pieces:

- MemoryLog: an in-memory partition log with a leader-epoch cache, a high
  watermark and an fsync boundary. A crash keeps only the synced prefix
  (and the HW checkpoint taken at the last flush), like a page cache lost
  on power failure.
- Broker: a minimal shell around kraftpy.broker.replication.Partition. It
  performs the core's actions on its MemoryLog, runs one fetcher towards the
  leader, long-polls follower fetches with the core's DelayedFetch rules,
  heartbeats to the controller and re-registers with a new broker epoch
  after a restart. It acts on metadata only once the metadata holds its
  current registration (KIP-631's catch-up; `broken_roles_before_registration`
  is b78d6bc's broker, which acted on the metadata it had persisted).
- Controller: a minimal, always-up KRaft controller for one partition: it
  fences brokers whose heartbeats lapse (dropping them from the ISR unless
  they are its last member), treats a re-registration with a new broker
  epoch as a restart (same), elects leaders from the ISR only (unclean
  election off), and commits AlterPartition requests checked against the
  leader epoch, the partition epoch and the members' broker epochs.
- Faults: crashes of any broker (each loses its unsynced tail; with
  `process_crash_share`, that share of them are process crashes that keep
  it and restart cleanly, KIP-966) with a restart after `downtime_ms`;
  power loss of the partition's leader with a restart after
  `fast_restart_ms`, before the controller has noticed;
  partitions between brokers and between a broker and the controller.
- Network (the kernel's): per-message delay, loss, and partitions between any two nodes.
- Client: one idempotent producer, acks=all, one batch in flight, retrying
  the same batch until it is acknowledged.
- Checker: invariants after every event (see Checker).

`run(SimConfig(seed=...))` returns a SimResult with the violations found.
Everything random comes from the kernel loop's random.Random(seed), so a seed replays.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from kraftpy.broker.replication import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AppendAsFollower,
    AppendAsLeader,
    AssignEpochStartOffset,
    CompleteProduce,
    DelayedFetch,
    FetchPartition,
    FetchPartitionResponse,
    FetchPartitionStatus,
    LeaderEpochCache,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ProducerStateManager,
    RebuildProducerState,
    ReplicationConfig,
    Role,
    SendAlterPartition,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.model import NO_LEADER, UNDEFINED_EPOCH, EpochEndOffset
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batch
from kraftpy.protocol.records.header import BatchHeader, parse_header, patch_offset_and_epoch
from tests.simulation.kernel import Disk, DiskConfig, Loop, Network, NetworkConfig, Violations

CONTROLLER = "controller"
CLIENT = "client"


# -- the in-memory log ---------------------------------------------------------------------------------------------


class MemoryLog:
    """A partition log in memory: batches, epoch cache, HW, and what an fsync has made durable."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.headers: list[BatchHeader] = []
        self.bases: list[int] = []
        self.log_start_offset = 0
        self.cache = LeaderEpochCache()
        self.high_watermark = 0
        self.synced = 0  # how many batches an fsync covers
        self.hw_checkpoint = 0

    @property
    def log_end_offset(self) -> int:
        return self.headers[-1].next_offset if self.headers else self.log_start_offset

    def state(self) -> LogState:
        return LogState(self.log_start_offset, self.log_end_offset, self.high_watermark, self.cache.latest_epoch)

    def end_offset_for(self, epoch: int) -> EpochEndOffset:
        return self.cache.end_offset_for(epoch, self.log_end_offset)

    def batch_at(self, offset: int) -> bytes | None:
        """The batch holding `offset`, or None."""
        index = bisect.bisect_right(self.bases, offset) - 1
        if index < 0 or offset > self.headers[index].last_offset:
            return None
        return self.batches[index]

    def _append(self, data: bytes, header: BatchHeader) -> None:
        if header.base_offset != self.log_end_offset:
            raise AssertionError(f"append at {header.base_offset}, log end is {self.log_end_offset}")
        if header.partition_leader_epoch >= 0:
            self.cache.assign(header.partition_leader_epoch, header.base_offset)
        self.batches.append(data)
        self.headers.append(header)
        self.bases.append(header.base_offset)

    def append_as_leader(self, data: bytes, base_offset: int, leader_epoch: int) -> BatchHeader:
        buf = bytearray(data)
        patch_offset_and_epoch(buf, 0, base_offset, leader_epoch)
        stamped = bytes(buf)
        header = parse_header(stamped)
        self._append(stamped, header)
        return header

    def append_as_follower(self, records: bytes) -> list[BatchHeader]:
        pos, out = 0, []
        while pos < len(records):
            header = parse_header(records, pos, check_crc=True)
            self._append(records[pos : pos + header.size], header)
            out.append(header)
            pos += header.size
        return out

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or past `offset` (whole batches); as Kafka, trim the epoch cache even on a no-op."""
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        keep = bisect.bisect_left([h.last_offset for h in self.headers], offset)
        del self.batches[keep:], self.headers[keep:], self.bases[keep:]
        self.synced = min(self.synced, len(self.batches))
        self.cache.truncate_from_end(min(offset, self.log_end_offset))
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.batches, self.headers, self.bases = [], [], []
        self.log_start_offset = offset
        self.cache.clear()
        self.high_watermark = offset
        self.synced = 0

    def read(self, offset: int, max_offset: int, max_batches: int) -> bytes:
        index = bisect.bisect_right(self.bases, offset) - 1
        index = max(index, 0)
        out = []
        while index < len(self.headers) and len(out) < max_batches and self.headers[index].base_offset < max_offset:
            if self.headers[index].last_offset >= offset:
                out.append(self.batches[index])
            index += 1
        return b"".join(out)

    def flush(self) -> None:
        self.synced = len(self.batches)
        self.hw_checkpoint = self.high_watermark

    def crash(self, *, power_loss: bool = True) -> None:
        """Lose everything not fsynced on a power loss (a process crash keeps it: the page cache);
        recovery trims the epoch cache and the HW restarts from its last checkpoint."""
        if power_loss:
            del self.batches[self.synced :], self.headers[self.synced :], self.bases[self.synced :]
            self.cache.truncate_from_end(self.log_end_offset)
        self.high_watermark = max(min(self.hw_checkpoint, self.log_end_offset), self.log_start_offset)


def rebuild_producer_state(log: MemoryLog, config: ReplicationConfig) -> ProducerStateManager:
    return ProducerStateManager.rebuild(
        None, log.headers, log.log_end_offset, config.producer_batches_to_retain, config.producer_id_expiration_ms
    )


# -- a scripted replica (no network), for deterministic scenario tests -----------------------------------------------


class ScriptedReplica:
    """A Partition over a MemoryLog; a test moves every message by hand.

    `produce` and `fetch_from` perform the core's actions at once; answers
    to producers collect in `completed`, ISR proposals in `alter_requests`.
    `crash` keeps only the flushed prefix, `restart` brings up a fresh core.
    """

    def __init__(self, broker_id: int, config: ReplicationConfig | None = None) -> None:
        self.id = broker_id
        self.config = config or ReplicationConfig()
        self.log = MemoryLog()
        self.broker_epoch = 0
        self.partition = Partition(broker_id, self.config, broker_epoch=0)
        self.pending: dict[object, bytes] = {}
        self.completed: dict[object, CompleteProduce] = {}
        self.alter_requests: list[AlterPartitionRequest] = []
        self.truncations: list[int] = []

    def perform(self, actions) -> None:
        log = self.log
        for action in actions:
            if isinstance(action, AssignEpochStartOffset):
                log.cache.assign(action.leader_epoch, action.start_offset)
            elif isinstance(action, AppendAsLeader):
                header = log.append_as_leader(
                    self.pending.pop(action.request_id), action.base_offset, action.leader_epoch
                )
                assert (header.base_offset, header.last_offset) == (action.base_offset, action.last_offset)
            elif isinstance(action, AppendAsFollower):
                log.append_as_follower(action.records)
            elif isinstance(action, TruncateTo):
                self.truncations.append(action.offset)
                log.truncate_to(action.offset)
            elif isinstance(action, TruncateFullyAndStartAt):
                self.truncations.append(action.offset)
                log.truncate_fully_and_start_at(action.offset)
            elif isinstance(action, RebuildProducerState):
                self.partition.load_producer_state(rebuild_producer_state(log, self.config))
            elif isinstance(action, UpdateHighWatermark):
                assert action.offset <= log.log_end_offset
                log.high_watermark = action.offset
            elif isinstance(action, SendAlterPartition):
                self.alter_requests.append(action.request)
            elif isinstance(action, CompleteProduce):
                self.completed[action.request_id] = action
            else:
                raise AssertionError(f"unknown action {action!r}")

    def become(self, registration: PartitionRegistration, now_ms: int = 0) -> None:
        self.perform(self.partition.apply_registration(registration, self.log.state(), now_ms))

    def produce(self, request_id: object, data: bytes, acks: int = -1, now_ms: int = 0, timeout_ms: int = 30_000):
        self.pending[request_id] = data
        request = ProduceRequest(request_id, parse_header(data), acks=acks, timeout_ms=timeout_ms)
        self.perform(self.partition.handle_produce(request, now_ms))
        self.pending.pop(request_id, None)
        return self.completed.get(request_id)

    def serve(self, request: FetchPartition, now_ms: int, max_batches: int = 100) -> FetchPartitionResponse:
        end = (
            None
            if request.last_fetched_epoch == UNDEFINED_EPOCH
            else self.log.end_offset_for(request.last_fetched_epoch)
        )
        decision = self.partition.handle_fetch(request, end, now_ms)
        self.perform(decision.actions)
        records = b""
        if decision.readable:
            records = self.log.read(decision.fetch_offset, decision.max_offset, max_batches)
        return FetchPartitionResponse.from_decision(decision, records)

    def fetch_from(self, leader: ScriptedReplica, now_ms: int = 0, max_batches: int = 100) -> FetchPartitionResponse:
        """One fetch round trip to `leader`; the follower's backoff is skipped (scripts control time)."""
        follower = self.partition.follower
        assert follower is not None, f"replica {self.id} is not a follower"
        follower.retry_at_ms = 0
        request = self.partition.build_fetch(self.log.state(), now_ms)
        assert request is not None
        response = leader.serve(request, now_ms, max_batches)
        own = None
        if response.diverging_epoch is not None:
            own = self.log.end_offset_for(response.diverging_epoch.epoch)
        self.perform(self.partition.on_fetch_response(request, response, now_ms, own))
        return response

    def crash(self) -> None:
        self.log.crash()
        self.partition = Partition(self.id, self.config, broker_epoch=self.broker_epoch)

    def restart(self) -> None:
        self.broker_epoch += 1
        self.partition = Partition(self.id, self.config, broker_epoch=self.broker_epoch)
        self.partition.load_producer_state(rebuild_producer_state(self.log, self.config))

    def records(self) -> list[tuple[int, bytes]]:
        """(offset, value) of every record, for readable assertions."""
        out = []
        for batch in self.log.batches:
            for record in decode_batch(batch).records:
                out.append((record.offset, record.value))
        return out


# -- configuration and results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    brokers: tuple[int, ...] = (0, 1, 2)
    min_insync_replicas: int = 2
    duration_ms: int = 3_000
    heal_ms: int = 2_000
    replica_lag_time_max_ms: int = 150
    session_timeout_ms: int = 120
    heartbeat_interval_ms: int = 25
    tick_interval_ms: int = 10
    fetch_max_wait_ms: int = 30
    fetch_timeout_ms: int = 80
    fetch_backoff_ms: int = 20
    fetch_max_batches: int = 8
    produce_timeout_ms: int = 200
    client_timeout_ms: int = 300
    client_backoff_ms: int = 15
    delay_ms: tuple[int, int] = (1, 12)
    drop_rate: float = 0.02
    flush_interval_ms: tuple[int, int] = (20, 150)
    fault_interval_ms: tuple[int, int] = (60, 400)
    downtime_ms: tuple[int, int] = (20, 400)
    partition_ms: tuple[int, int] = (50, 500)
    # "Power loss of a leader's unsynced tail plus a fast restart": the partition's leader loses what it
    # had not fsynced and is back this soon, well inside its session timeout (the controller has not
    # fenced it: only its new registration tells the controller it restarted).
    fast_restart_ms: tuple[int, int] = (1, 40)
    # The share of broker crashes that are process crashes (a SIGKILL): the page cache keeps the
    # unsynced tail, and the broker registers again naming its last epoch (KIP-966: a clean restart).
    # 0 draws nothing from the generator, so the seeds of runs without them replay as before.
    process_crash_share: float = 0.0
    # The deliberately broken variant: on becoming follower, truncate to the local HW first (pre-KIP-101).
    broken_truncate_to_hw: bool = False
    # The broken variant of b78d6bc's broker: a restarted broker acts on the metadata it persisted (and on
    # any it receives) before the controller has acted on its new registration.
    broken_roles_before_registration: bool = False


@dataclass
class SimResult:
    seed: int
    violations: list[str]
    acked: int
    committed: int
    leader_changes: int
    crashes: int
    forfeited: int
    events: int
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


# -- the controller ------------------------------------------------------------------------------------------------


@dataclass
class BrokerRegistration:
    broker_epoch: int
    fenced: bool
    last_heartbeat_ms: int


class Controller:
    """One partition's share of a KRaft controller, always up, elections from the ISR only."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        brokers = sim.config.brokers
        self.registration = PartitionRegistration(brokers, brokers, brokers[0], 0, 0)
        self.brokers: dict[int, BrokerRegistration] = {b: BrokerRegistration(0, False, 0) for b in brokers}

    def protected_replicas(self) -> set[int]:
        """The replicas a committed record must survive on: this controller elects from the ISR only."""
        return set(self.registration.isr)

    def _commit(self, registration: PartitionRegistration) -> None:
        old = self.registration
        self.registration = registration
        self.sim.on_registration_committed(old, registration)
        for b in self.sim.config.brokers:
            self.sim.push_metadata(b)

    def _elect(self, isr: tuple[int, ...], excluded: int | None) -> int:
        for b in self.registration.replicas:
            if b in isr and b != excluded and not self.brokers[b].fenced:
                return b
        return NO_LEADER

    def fence(self, broker: int) -> None:
        """Fencing drops the broker from the ISR (unless it is the last member) and from leadership."""
        self.brokers[broker].fenced = True
        reg = self.registration
        isr = reg.isr
        if broker in isr and len(isr) > 1:
            isr = tuple(b for b in isr if b != broker)
        leader, leader_epoch = reg.leader, reg.leader_epoch
        if leader == broker:
            leader = self._elect(isr, broker)
            leader_epoch += 1
        if (isr, leader) != (reg.isr, reg.leader):
            self._commit(PartitionRegistration(reg.replicas, isr, leader, leader_epoch, reg.partition_epoch + 1))

    def _maybe_elect(self) -> None:
        reg = self.registration
        if reg.leader == NO_LEADER:
            leader = self._elect(reg.isr, None)
            if leader != NO_LEADER:
                self._commit(
                    PartitionRegistration(reg.replicas, reg.isr, leader, reg.leader_epoch + 1, reg.partition_epoch + 1)
                )

    def register(self, broker: int, broker_epoch: int) -> None:
        current = self.brokers[broker]
        if current.broker_epoch != broker_epoch:
            # A new incarnation: whatever the old one held in memory is gone, so it leaves the ISR (KIP-903).
            if not current.fenced:
                self.fence(broker)
            current.broker_epoch = broker_epoch
        current.fenced = False
        current.last_heartbeat_ms = self.sim.loop.now
        self._maybe_elect()

    def heartbeat(self, broker: int, broker_epoch: int) -> None:
        current = self.brokers[broker]
        if current.broker_epoch != broker_epoch:
            return
        current.last_heartbeat_ms = self.sim.loop.now
        if current.fenced:
            current.fenced = False
            self._maybe_elect()

    def tick(self) -> None:
        now = self.sim.loop.now
        for b, reg in self.brokers.items():
            if not reg.fenced and now - reg.last_heartbeat_ms > self.sim.config.session_timeout_ms:
                self.fence(b)

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        reg = self.registration
        if request.leader_id != reg.leader or request.leader_epoch != reg.leader_epoch:
            return AlterPartitionResponse(ErrorCode.FENCED_LEADER_EPOCH)
        if request.partition_epoch != reg.partition_epoch:
            return AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION)
        isr = request.isr
        if reg.leader not in isr or not set(isr) <= set(reg.replicas):
            return AlterPartitionResponse(ErrorCode.INVALID_REQUEST)
        for member in request.new_isr:
            broker = self.brokers[member.broker_id]
            if member.broker_id not in reg.isr and broker.fenced:
                return AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA)
            if member.broker_epoch != -1 and member.broker_epoch != broker.broker_epoch:
                return AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA)
        if set(isr) != set(reg.isr):
            self._commit(
                PartitionRegistration(reg.replicas, isr, reg.leader, reg.leader_epoch, reg.partition_epoch + 1)
            )
        reg = self.registration
        return AlterPartitionResponse(ErrorCode.NONE, reg.leader_epoch, reg.isr, reg.partition_epoch)


# -- a broker ------------------------------------------------------------------------------------------------------


@dataclass
class ParkedFetch:
    request: FetchPartition
    wait: DelayedFetch
    reply: Callable[[FetchPartitionResponse], None]


class Broker:
    """The shell: performs the core's actions on a MemoryLog and talks to the others through the network."""

    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.log = MemoryLog()
        self.alive = True
        self.broker_epoch = 0
        self.registered = True
        self.clean_restart = False  # whether the last crash kept the whole log (it registers naming its epoch)
        # What broker/shell/restart_record.py keeps (KIP-966): the controller's epoch of the last answered
        # registration, rewritten at each start with what that start decided; and each incarnation's decision.
        self.recorded_epoch = -1
        self.previous_epoch_of: dict[int, int] = {}
        self.replication_config = ReplicationConfig(
            replica_lag_time_max_ms=sim.config.replica_lag_time_max_ms,
            min_insync_replicas=sim.config.min_insync_replicas,
            replica_fetch_wait_max_ms=sim.config.fetch_max_wait_ms,
            replica_fetch_backoff_ms=sim.config.fetch_backoff_ms,
            alter_partition_retry_ms=100,
        )
        self.partition = Partition(broker_id, self.replication_config, broker_epoch=0)
        self.produce_bytes: dict[object, bytes] = {}
        self.produce_replies: dict[object, Callable[[CompleteProduce], None]] = {}
        self.parked: list[ParkedFetch] = []
        # The last metadata it acted on; it survives a crash (the metadata log is fsynced).
        self.persisted: PartitionRegistration | None = None

    # -- actions -----------------------------------------------------------------------------------------------

    def perform(self, actions) -> None:
        for action in actions:
            self._perform(action)

    def _perform(self, action) -> None:
        log, sim = self.log, self.sim
        if isinstance(action, AssignEpochStartOffset):
            log.cache.assign(action.leader_epoch, action.start_offset)
        elif isinstance(action, AppendAsLeader):
            data = self.produce_bytes.pop(action.request_id)
            header = log.append_as_leader(data, action.base_offset, action.leader_epoch)
            if header.last_offset != action.last_offset:
                raise AssertionError(f"storage put the batch at {header.base_offset}..{header.last_offset}")
            sim.checker.on_append(self.id, header.base_offset, header.last_offset)
            self._recheck_parked()
        elif isinstance(action, AppendAsFollower):
            headers = log.append_as_follower(action.records)
            sim.checker.on_append(self.id, headers[0].base_offset, headers[-1].last_offset)
        elif isinstance(action, TruncateTo):
            log.truncate_to(action.offset)
            sim.checker.on_truncate(self.id)
        elif isinstance(action, TruncateFullyAndStartAt):
            log.truncate_fully_and_start_at(action.offset)
            sim.checker.on_truncate(self.id)
        elif isinstance(action, RebuildProducerState):
            self.partition.load_producer_state(rebuild_producer_state(log, self.replication_config))
        elif isinstance(action, UpdateHighWatermark):
            if action.offset > log.log_end_offset:
                sim.checker.violation(f"broker {self.id} HW {action.offset} beyond its LEO {log.log_end_offset}")
            log.high_watermark = action.offset
            if self.partition.role == Role.LEADER:
                sim.checker.on_leader_hw(self.id, self.partition.leader_epoch, action.offset)
        elif isinstance(action, SendAlterPartition):
            self._send_alter_partition(action.request)
        elif isinstance(action, CompleteProduce):
            self.produce_bytes.pop(action.request_id, None)
            if action.error == ErrorCode.NONE:
                sim.checker.on_ack(self.id, action)
            reply = self.produce_replies.pop(action.request_id, None)
            if reply is not None:
                reply(action)
        else:
            raise AssertionError(f"unknown action {action!r}")

    # -- metadata and liveness ---------------------------------------------------------------------------------

    def on_metadata(self, registration: PartitionRegistration, registered_epoch: int) -> None:
        """Metadata from the controller; `registered_epoch` is this broker's epoch in the same image."""
        if not self.alive:
            return
        if registered_epoch != self.broker_epoch and not self.sim.config.broken_roles_before_registration:
            # Not yet an image that holds this incarnation's registration (KIP-631's catch-up): it may
            # still show the previous incarnation leading, so take no role from it.
            return
        self.persisted = registration
        self._apply(registration)

    def _apply(self, registration: PartitionRegistration) -> None:
        old_follower = self.partition.follower
        actions = self.partition.apply_registration(registration, self.log.state(), self.sim.loop.now)
        new_follower = self.partition.follower
        if self.sim.config.broken_truncate_to_hw and new_follower is not None and new_follower is not old_follower:
            # Pre-KIP-101 behaviour: a new follower truncates to its own high watermark before fetching.
            self.log.truncate_to(self.log.high_watermark)
            self.sim.checker.on_truncate(self.id)
            self.partition.load_producer_state(rebuild_producer_state(self.log, self.replication_config))
        self.perform(actions)
        if self.partition.role != Role.LEADER:
            self._fail_parked()
        self.maybe_fetch()

    def heartbeat(self, broker_epoch: int) -> None:
        # One heartbeat chain per incarnation: a chain of an earlier incarnation stops here.
        if not self.alive or broker_epoch != self.broker_epoch:
            return
        sim = self.sim
        sim.net.send(self.id, CONTROLLER, lambda: sim.controller_heartbeat(self.id, broker_epoch))
        sim.loop.after(sim.config.heartbeat_interval_ms, lambda: self.heartbeat(broker_epoch))

    def register(self) -> None:
        if not self.alive or self.registered:
            return
        sim, epoch = self.sim, self.broker_epoch
        sim.net.send(self.id, CONTROLLER, lambda: sim.controller_register(self.id, epoch))
        sim.loop.after(50, self.register)

    def on_registered(self, broker_epoch: int) -> None:
        if not self.alive or broker_epoch != self.broker_epoch or self.registered:
            return
        self.registered = True
        self.sim.loop.after(self.sim.config.heartbeat_interval_ms, lambda: self.heartbeat(broker_epoch))

    def crash(self, *, power_loss: bool = True) -> None:
        self.alive = False
        self.registered = False
        self.clean_restart = not power_loss
        self.log.crash(power_loss=power_loss)
        if power_loss:
            self.sim.disk.crash(self.id)
        self.produce_bytes.clear()
        self.produce_replies.clear()
        self.parked.clear()

    def restart(self) -> None:
        if self.alive:
            return  # the heal phase may have restarted it already
        self.alive = True
        self.registered = False
        self.broker_epoch += 1
        # broker/clean_restart.py: a start after a process crash names the recorded epoch, any other -1;
        # the record then holds that decision, so a later crash before registering stays unclean.
        self.recorded_epoch = self.recorded_epoch if self.clean_restart else -1
        self.previous_epoch_of[self.broker_epoch] = self.recorded_epoch
        self.partition = Partition(self.id, self.replication_config, broker_epoch=self.broker_epoch)
        self.partition.load_producer_state(rebuild_producer_state(self.log, self.replication_config))
        if self.sim.config.broken_roles_before_registration and self.persisted is not None:
            self._apply(self.persisted)  # b78d6bc: the replayed image, before registering
        self.register()

    def flush(self) -> None:
        if self.alive:
            self.sim.disk.fsync(self.id, self.log.flush)

    def tick(self) -> None:
        if not self.alive:
            return
        now = self.sim.loop.now
        self.perform(self.partition.tick(now))
        self._recheck_parked()
        self.maybe_fetch()

    # -- replication -------------------------------------------------------------------------------------------

    def maybe_fetch(self) -> None:
        partition, sim = self.partition, self.sim
        if not self.alive or partition.follower is None:
            return
        request = partition.build_fetch(self.log.state(), sim.loop.now)
        if request is None:
            return
        leader = partition.follower.leader_id
        me = self.id

        def reply(response: FetchPartitionResponse) -> None:
            sim.net.send(leader, me, lambda: self.on_fetch_response(partition, request, response))

        sim.net.send(me, leader, lambda: sim.brokers[leader].serve_fetch(request, reply))

        def timeout() -> None:
            follower = partition.follower
            if self.alive and self.partition is partition and follower is not None and follower.inflight is request:
                partition.on_fetch_error(request, sim.loop.now)
                sim.loop.after(sim.config.fetch_backoff_ms, self.maybe_fetch)

        sim.loop.after(sim.config.fetch_timeout_ms, timeout)

    def on_fetch_response(self, partition: Partition, request: FetchPartition, response: FetchPartitionResponse):
        if not self.alive or self.partition is not partition:
            return
        own = None
        if response.diverging_epoch is not None and response.error == ErrorCode.NONE:
            own = self.log.end_offset_for(response.diverging_epoch.epoch)
        self.perform(partition.on_fetch_response(request, response, self.sim.loop.now, own))
        if partition.follower is not None and partition.follower.inflight is None:
            if partition.follower.retry_at_ms > self.sim.loop.now:
                self.sim.loop.at(partition.follower.retry_at_ms, self.maybe_fetch)
            else:
                self.maybe_fetch()

    def _leader_epoch_end(self, request: FetchPartition) -> EpochEndOffset | None:
        if request.last_fetched_epoch == UNDEFINED_EPOCH:
            return None
        return self.log.end_offset_for(request.last_fetched_epoch)

    def _respond(self, request: FetchPartition, reply: Callable[[FetchPartitionResponse], None]) -> None:
        now = self.sim.loop.now
        decision = self.partition.handle_fetch(request, self._leader_epoch_end(request), now)
        self.perform(decision.actions)
        records = b""
        if decision.readable:
            records = self.log.read(decision.fetch_offset, decision.max_offset, self.sim.config.fetch_max_batches)
        reply(FetchPartitionResponse.from_decision(decision, records))

    def serve_fetch(self, request: FetchPartition, reply: Callable[[FetchPartitionResponse], None]) -> None:
        if not self.alive:
            return
        now = self.sim.loop.now
        decision = self.partition.check_fetch(request, self._leader_epoch_end(request))
        wait = DelayedFetch(min_bytes=1, max_wait_ms=self.sim.config.fetch_max_wait_ms, start_ms=now)
        if wait.should_complete([self._status(request, decision)], now) is not None:
            self._respond(request, reply)
        else:
            # Record the follower's position now (as Kafka's first read does), then park.
            self.perform(self.partition.handle_fetch(request, self._leader_epoch_end(request), now).actions)
            self.parked.append(ParkedFetch(request, wait, reply))

    def _status(self, request: FetchPartition, decision) -> FetchPartitionStatus:
        if decision.error != ErrorCode.NONE:
            return FetchPartitionStatus(error=decision.error)
        if decision.diverging_epoch is not None:
            return FetchPartitionStatus(diverging=True)
        readable = 0
        if decision.fetch_offset < decision.max_offset:
            readable = len(self.log.read(decision.fetch_offset, decision.max_offset, 1))
        return FetchPartitionStatus(
            fetch_offset_beyond_end=request.fetch_offset > self.log.log_end_offset, bytes_readable=readable
        )

    def _recheck_parked(self) -> None:
        if not self.parked:
            return
        now = self.sim.loop.now
        still = []
        for parked in self.parked:
            decision = self.partition.check_fetch(parked.request, self._leader_epoch_end(parked.request))
            if parked.wait.should_complete([self._status(parked.request, decision)], now) is None:
                still.append(parked)
            else:
                self._respond(parked.request, parked.reply)
        self.parked = still

    def _fail_parked(self) -> None:
        parked, self.parked = self.parked, []
        for p in parked:
            self._respond(p.request, p.reply)

    def _send_alter_partition(self, request: AlterPartitionRequest) -> None:
        sim, partition = self.sim, self.partition

        def reply(response: AlterPartitionResponse) -> None:
            sim.net.send(CONTROLLER, self.id, lambda: self.on_alter_partition_response(partition, request, response))

        def deliver() -> None:
            sim.controller_alter_partition(self.id, request, reply)

        sim.net.send(self.id, CONTROLLER, deliver)

    def on_alter_partition_response(self, partition: Partition, request, response) -> None:
        if self.alive and self.partition is partition:
            self.perform(partition.on_alter_partition_response(request, response, self.sim.loop.now))

    # -- produce -----------------------------------------------------------------------------------------------

    def serve_produce(self, request_id: object, data: bytes, reply: Callable[[CompleteProduce], None]) -> None:
        if not self.alive:
            return
        request = ProduceRequest(request_id, parse_header(data), acks=-1, timeout_ms=self.sim.config.produce_timeout_ms)
        self.produce_bytes[request_id] = data
        self.produce_replies[request_id] = reply
        self.perform(self.partition.handle_produce(request, self.sim.loop.now))
        self.produce_bytes.pop(request_id, None)


# -- the client ----------------------------------------------------------------------------------------------------


class Client:
    """An idempotent producer with one batch in flight, acks=all, retrying until acknowledged."""

    PRODUCER_ID = 7

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.epoch = 0
        self.sequence = 0
        self.batch: bytes | None = None
        self.attempt = 0
        self.active = True
        self.acked = 0

    def _new_batch(self) -> bytes:
        rng = self.sim.rng
        count = rng.randint(1, 3)
        records = [
            (None, f"p{self.epoch}-s{self.sequence + i}".encode(), (), 1_000 + self.sim.loop.now) for i in range(count)
        ]
        return build_batch(
            records,
            producer_id=self.PRODUCER_ID,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
        )

    def send(self) -> None:
        sim = self.sim
        if not self.active:
            return
        if self.batch is None:
            self.batch = self._new_batch()
        self.attempt += 1
        attempt, data = self.attempt, self.batch
        leader = sim.controller.registration.leader
        if leader == NO_LEADER:
            sim.loop.after(sim.config.client_backoff_ms, self.send)
            return

        def reply(result: CompleteProduce) -> None:
            sim.net.send(leader, CLIENT, lambda: self.on_response(attempt, result))

        request_id = (CLIENT, attempt)
        sim.net.send(CLIENT, leader, lambda: sim.brokers[leader].serve_produce(request_id, data, reply))
        sim.loop.after(sim.config.client_timeout_ms, lambda: self.on_timeout(attempt))

    def on_timeout(self, attempt: int) -> None:
        if attempt == self.attempt:
            self.sim.loop.after(self.sim.config.client_backoff_ms, self.send)

    def on_response(self, attempt: int, result: CompleteProduce) -> None:
        if attempt != self.attempt:
            return
        self.attempt += 1  # the answer is in: a late timeout for this attempt must not resend
        error = result.error
        if error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            header = parse_header(self.batch)
            self.sequence = (self.sequence + header.last_offset_delta + 1) % (1 << 31)
            self.batch = None
            self.acked += 1
        elif error in (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            ErrorCode.UNKNOWN_PRODUCER_ID,
            ErrorCode.INVALID_PRODUCER_EPOCH,
        ):
            # The broker lost this producer's state (an acknowledged batch was forfeited): re-initialise.
            self.epoch += 1
            self.sequence = 0
            self.batch = None
        self.sim.loop.after(self.sim.config.client_backoff_ms, self.send)


# -- the checker ---------------------------------------------------------------------------------------------------


class Checker:
    """Invariants, checked after every event.

    `committed` maps an offset to the batch a leader's HW passed over there.
    A committed offset is *forfeited* when a crash has taken it from the disk
    of every replica in the controller's ISR (that is the one way the design
    allows to lose it: all ISR copies gone). Replicas that dropped it by
    truncation still count as holders, so a protocol bug is never excused.

    1. no committed, unforfeited offset is ever committed again with another batch;
    2. every acknowledged write (acks=all, min ISR 2) is committed where it was acknowledged;
    3. the current leader (per the controller) holds every committed, unforfeited offset;
    4. every live replica holds the committed batch at each offset below its HW;
    5. a leader's HW never goes back within its epoch, and once it has reached its epoch start it is at
       least every HW any leader exposed before (unless forfeits lowered that);
    6. no (producer id, epoch, sequence) is committed at two offsets.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.found = Violations(lambda: sim.loop.now)
        self.violations = self.found.found
        self.committed: dict[int, bytes] = {}
        self.ever_held: dict[int, set[int]] = {}
        self.disk_lost: dict[int, set[int]] = {}
        self.forfeited: set[int] = set()
        self.forfeited_batches: dict[int, set[bytes]] = {}
        self.acked: dict[int, bytes] = {}
        self.sequences: dict[tuple[int, int, int], int] = {}
        self.leader_hw: dict[tuple[int, int], int] = {}
        self.exposed_hw = 0
        self.hw_verified: dict[int, int] = {}
        self.leader_verified: dict[tuple[int, int], int] = {}
        self.dirty = False

    def violation(self, message: str) -> None:
        self.found.report(message)

    def _holders(self, offset: int, batch: bytes) -> set[int]:
        return {b.id for b in self.sim.brokers.values() if b.log.batch_at(offset) == batch}

    def on_leader_hw(self, broker: int, epoch: int, hw: int) -> None:
        key = (broker, epoch)
        old = self.leader_hw.get(key, 0)
        if hw < old:
            self.violation(f"leader {broker} epoch {epoch} HW went back {old} -> {hw}")
        self.leader_hw[key] = hw
        log = self.sim.brokers[broker].log
        for offset in range(old, hw):
            batch = log.batch_at(offset)
            if batch is None:
                self.violation(f"leader {broker} HW {hw} covers offset {offset} it does not hold")
                continue
            previous = self.committed.get(offset)
            if previous is not None and previous != batch:
                if offset in self.forfeited:
                    self.forfeited_batches.setdefault(offset, set()).add(previous)
                    self.forfeited.discard(offset)
                else:
                    self.violation(f"offset {offset} committed twice with different batches (leader {broker})")
                    continue
            if previous != batch:
                self.committed[offset] = batch
                self.ever_held[offset] = self._holders(offset, batch)
                self.disk_lost[offset] = set()
                self._check_sequence_unique(offset, batch)
            elif offset in self.forfeited:
                # Committed again with the same batch: protected again, so losing it again forfeits it
                # again (and lowers the HW a leader may expose, as the first loss did).
                self.forfeited.discard(offset)
        self.exposed_hw = max(self.exposed_hw, hw)

    @staticmethod
    def _producer_key(batch: bytes) -> tuple[int, int, int]:
        header = parse_header(batch)
        return header.producer_id, header.producer_epoch, header.base_sequence

    def _check_sequence_unique(self, offset: int, batch: bytes) -> None:
        header = parse_header(batch)
        if offset != header.base_offset or header.producer_id < 0:
            return
        key = self._producer_key(batch)
        first = self.sequences.setdefault(key, offset)
        if first == offset:
            return
        other = self.committed.get(first)
        if other is not None and first not in self.forfeited and self._producer_key(other) == key:
            self.violation(f"producer batch {key} committed twice, at {first} and {offset}")
        else:
            self.sequences[key] = offset

    def on_ack(self, broker: int, result: CompleteProduce) -> None:
        for offset in range(result.base_offset, result.last_offset + 1):
            batch = self.committed.get(offset)
            held = self.sim.brokers[broker].log.batch_at(offset)
            if batch is None or held != batch:
                self.violation(f"broker {broker} acknowledged offset {offset} which is not committed there")
                return
        self.acked[result.base_offset] = self.committed[result.base_offset]

    def on_append(self, broker: int, first: int, last: int) -> None:
        log = self.sim.brokers[broker].log
        for offset in range(first, last + 1):
            batch = self.committed.get(offset)
            if batch is not None and log.batch_at(offset) == batch:
                self.ever_held[offset].add(broker)
                self.disk_lost[offset].discard(broker)

    def on_truncate(self, broker: int) -> None:
        log = self.sim.brokers[broker].log
        self.hw_verified[broker] = min(self.hw_verified.get(broker, 0), log.log_end_offset)

    def on_crash(self, broker: int, lost_from: int, lost_to: int) -> None:
        for offset in range(lost_from, lost_to):
            if offset in self.committed and broker in self.ever_held[offset]:
                self.disk_lost[offset].add(broker)
        # Back in the same epoch (a restart the controller has not noticed), it leads a shorter log:
        # check it again from where the crash cut it.
        for key, verified in self.leader_verified.items():
            if key[0] == broker:
                self.leader_verified[key] = min(verified, lost_from)
        self.on_truncate(broker)
        self.dirty = True

    def on_isr_change(self) -> None:
        self.dirty = True

    def _update_forfeits(self) -> None:
        protected = self.sim.controller.protected_replicas()
        lowest = None
        for offset in self.committed:
            if offset in self.forfeited:
                continue
            holders = self.ever_held[offset] - self.disk_lost[offset]
            if not holders & protected:
                self.forfeited.add(offset)
                lowest = offset if lowest is None else min(lowest, offset)
        if lowest is not None:
            self.exposed_hw = min(self.exposed_hw, lowest)
        self.dirty = False

    def after_event(self) -> None:
        if self.dirty:
            self._update_forfeits()
        sim = self.sim
        reg = sim.controller.registration
        leader = sim.brokers.get(reg.leader)
        if leader is not None and leader.alive and leader.partition.leader is not None:
            core = leader.partition.leader
            if core.leader_epoch == reg.leader_epoch:
                key = (leader.id, core.leader_epoch)
                start = self.leader_verified.get(key, 0)
                end = max(self.committed, default=-1) + 1
                for offset in range(start, end):
                    batch = self.committed.get(offset)
                    if batch is None or offset in self.forfeited:
                        continue
                    if leader.log.batch_at(offset) != batch:
                        what = "an acknowledged" if self.acked.get(offset) is not None else "a committed"
                        self.violation(f"leader {leader.id} epoch {core.leader_epoch} lacks {what} batch at {offset}")
                        break
                self.leader_verified[key] = end
                if core.high_watermark_known and core.high_watermark < self.exposed_hw:
                    self.violation(
                        f"leader {leader.id} epoch {core.leader_epoch} HW {core.high_watermark} is below "
                        f"the HW {self.exposed_hw} exposed before"
                    )
        for broker in sim.brokers.values():
            if not broker.alive:
                continue
            log = broker.log
            start = self.hw_verified.get(broker.id, 0)
            for offset in range(max(start, log.log_start_offset), log.high_watermark):
                batch = self.committed.get(offset)
                held = log.batch_at(offset)
                if batch is None:
                    self.violation(f"broker {broker.id} HW {log.high_watermark} covers uncommitted offset {offset}")
                    break
                if (
                    held != batch
                    and held not in self.forfeited_batches.get(offset, ())
                    and offset not in self.forfeited
                ):
                    self.violation(f"broker {broker.id} holds another batch than the committed one at {offset}")
                    break
            self.hw_verified[broker.id] = max(start, log.high_watermark)

    def check_converged(self) -> None:
        """After the heal phase every replica must be identical to the leader, with the HW at the log end."""
        sim = self.sim
        reg = sim.controller.registration
        leader = sim.brokers.get(reg.leader)
        if leader is None:
            self.violation("no leader after the heal phase")
            return
        for broker in sim.brokers.values():
            if broker.log.batches != leader.log.batches:
                self.violation(
                    f"after healing broker {broker.id} (LEO {broker.log.log_end_offset}) differs from leader "
                    f"{leader.id} (LEO {leader.log.log_end_offset})"
                )
            if broker.log.high_watermark != leader.log.log_end_offset:
                self.violation(
                    f"after healing broker {broker.id} HW {broker.log.high_watermark} != leader LEO "
                    f"{leader.log.log_end_offset} (ISR {reg.isr})"
                )


# -- the simulation ------------------------------------------------------------------------------------------------


class Simulation:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.loop = Loop(config.seed)
        self.rng = self.loop.rng
        self.net = Network(self.loop, NetworkConfig(*config.delay_ms, drop_rate=config.drop_rate))
        self.net.faulty = True
        self.disk = Disk(self.loop, DiskConfig())  # fsyncs complete at once, on the flusher's schedule
        self.checker = Checker(self)
        self.brokers: dict[int, Broker] = {}
        self.controller = self.make_controller()
        self.brokers = {b: Broker(self, b) for b in config.brokers}
        self.client = Client(self)
        self.leader_changes = 0
        self.crashes = 0
        self.events = 0
        self.trace: list[str] = []

    def make_controller(self) -> Controller:
        return Controller(self)

    # controller plumbing: requests arrive over the network, answers go back over it
    def controller_alter_partition(
        self, broker: int, request: AlterPartitionRequest, reply: Callable[[AlterPartitionResponse], None]
    ) -> None:
        reply(self.controller.alter_partition(request))

    def controller_heartbeat(self, broker: int, broker_epoch: int) -> None:
        self.controller.heartbeat(broker, broker_epoch)
        self.push_metadata(broker)

    def controller_register(self, broker: int, broker_epoch: int) -> None:
        self.controller.register(broker, broker_epoch)
        target = self.brokers[broker]
        self.net.send(CONTROLLER, broker, lambda: target.on_registered(broker_epoch))
        self.push_metadata(broker)

    def push_metadata(self, broker: int) -> None:
        # The image a broker replays holds the partition and the broker's own current registration.
        registration = self.controller.registration
        broker_epoch = self.controller.brokers[broker].broker_epoch
        target = self.brokers[broker]
        self.net.send(CONTROLLER, broker, lambda: target.on_metadata(registration, broker_epoch))

    def on_registration_committed(self, old: PartitionRegistration, new: PartitionRegistration) -> None:
        if old.leader_epoch != new.leader_epoch:
            self.leader_changes += 1
        self.trace.append(f"t={self.loop.now} {new}")
        self.checker.on_isr_change()

    # faults
    def _schedule_fault(self) -> None:
        low, high = self.config.fault_interval_ms
        self.loop.after(self.rng.randint(low, high), self._fault)

    def _fault(self) -> None:
        if self.loop.now >= self.config.duration_ms:
            return
        rng, config = self.rng, self.config
        kind = rng.choice(("crash", "crash", "power_loss_leader", "partition", "partition", "isolate_controller"))
        alive = [b for b in self.brokers.values() if b.alive]
        leader = self.brokers.get(self.controller.registration.leader)
        if kind == "power_loss_leader" and leader is not None and leader.alive and len(alive) > 1:
            self._crash(leader, rng.randint(*config.fast_restart_ms))
        elif kind in ("crash", "power_loss_leader") and len(alive) > 1:
            victim, downtime_ms = rng.choice(alive), rng.randint(*config.downtime_ms)
            power_loss = not (config.process_crash_share and rng.random() < config.process_crash_share)
            self._crash(victim, downtime_ms, power_loss=power_loss)
        elif kind == "partition":
            a, b = rng.sample([*config.brokers], 2)
            self._cut(a, b, rng.randint(*config.partition_ms))
        elif kind == "isolate_controller":
            self._cut(rng.choice(config.brokers), CONTROLLER, rng.randint(*config.partition_ms))
        self._schedule_fault()

    def _crash(self, victim: Broker, downtime_ms: int, *, power_loss: bool = True) -> None:
        """Power loss: the victim keeps only what it had fsynced; a process crash keeps its whole log
        (the page cache). Either way it restarts after `downtime_ms` as a new incarnation."""
        leo_before = victim.log.log_end_offset
        victim.crash(power_loss=power_loss)
        self.crashes += 1
        self.checker.on_crash(victim.id, victim.log.log_end_offset, leo_before)
        what = "crash" if power_loss else "process crash"
        self.trace.append(
            f"t={self.loop.now} {what} {victim.id} (LEO {leo_before} -> {victim.log.log_end_offset}), "
            f"back in {downtime_ms} ms"
        )
        self.loop.after(downtime_ms, victim.restart)

    def _cut(self, a: object, b: object, duration_ms: int) -> None:
        self.net.cut_both(a, b)
        self.trace.append(f"t={self.loop.now} cut {a}-{b} for {duration_ms} ms")
        self.loop.after(duration_ms, lambda: self.net.heal_both(a, b))

    def _heal(self) -> None:
        self.client.active = False
        self.net.heal()
        self.net.faulty = False
        for broker in self.brokers.values():
            if not broker.alive:
                broker.restart()

    def run(self) -> SimResult:
        config = self.config
        for broker in self.brokers.values():
            broker.on_metadata(self.controller.registration, self.controller.brokers[broker.id].broker_epoch)
            self.loop.after(config.heartbeat_interval_ms, lambda b=broker: b.heartbeat(0))
            self.loop.every(config.tick_interval_ms, broker.tick)
            self.loop.every(config.flush_interval_ms, broker.flush)
        self.loop.every(config.tick_interval_ms, self.controller.tick)
        self._schedule_fault()
        self.loop.after(1, self.client.send)
        self.loop.at(config.duration_ms, self._heal)
        end = config.duration_ms + config.heal_ms
        while self.loop.next_time is not None and self.loop.next_time <= end:
            self.loop.step()
            self.events += 1
            self.checker.after_event()
            if self.checker.violations:
                break
        if not self.checker.violations:
            self.checker.check_converged()
        return SimResult(
            seed=config.seed,
            violations=list(self.checker.violations),
            acked=len(self.checker.acked),
            committed=len(self.checker.committed),
            leader_changes=self.leader_changes,
            crashes=self.crashes,
            forfeited=len(self.checker.forfeited),
            events=self.events,
            trace=self.trace[-40:],
        )


def run(config: SimConfig) -> SimResult:
    return Simulation(config).run()


def main() -> None:  # pragma: no cover - a debugging entry point
    import sys

    seeds = range(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    for seed in seeds:
        result = run(SimConfig(seed=seed))
        status = "ok" if result.ok else "VIOLATION"
        print(
            f"seed {seed}: {status} acked={result.acked} committed={result.committed} "
            f"leader_changes={result.leader_changes} crashes={result.crashes} forfeited={result.forfeited} "
            f"events={result.events}"
        )
        for v in result.violations:
            print("   ", v)


if __name__ == "__main__":  # pragma: no cover
    main()
