"""The replication workload with transactions: the partition side of issue 17 under crashes and leader churn.

Builds on replication_sim: the same kernel, network, disk, controller and faults. What changes:

- TxnLog: the in-memory log also keeps the aborted-transactions index (storage's .txnindex): an entry
  is durable as it is written (storage fsyncs it), a truncation drops entries past the cut, and a crash
  drops entries whose marker did not survive (storage's recovery does the same).
- TxnBroker: performs IndexAbortedTxn, and rebuilds producer state *and* the aborted index from the log
  on a restart or a RebuildProducerState (as broker/shell/producer_snapshots.py does from no snapshot).
  It appends transaction markers as WriteTxnMarkers does (a control batch, acks=all).
- TxnClient: a stream of transactions, each under a fresh producer id: 1-3 transactional batches
  (acks=all, retried until acknowledged), then the coordinator's decision (commit or abort, random;
  abort when the partition lost the producer's state), then the marker, retried until acknowledged.
- TxnChecker: replication_sim's invariants (a retried marker may be committed twice: markers carry no
  sequence), plus, on the current leader after every event:
  7. the last stable offset never passes an open transaction: every transactional batch below it has its
     producer's marker below the high watermark;
  8. a read_committed read of [0, LSO), done as Kafka's consumers do it (the aborted list from the index,
     control batches skipped), returns no record of an aborted transaction and none of an undecided one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kraftpy.broker.replication import (
    CompleteProduce,
    IndexAbortedTxn,
    Partition,
    ProduceRequest,
    ProducerStateManager,
    RebuildProducerState,
    ReplicationConfig,
)
from kraftpy.broker.replication.model import NO_LEADER
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batch
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch, read_marker
from kraftpy.protocol.records.header import parse_header
from kraftpy.storage.txn_index import AbortedTxn
from tests.simulation.replication_sim import (
    CLIENT,
    Broker,
    Checker,
    MemoryLog,
    SimConfig,
    SimResult,
    Simulation,
)


class TxnLog(MemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.aborted: list[AbortedTxn] = []

    def truncate_to(self, offset: int) -> None:
        super().truncate_to(offset)
        self.aborted = [a for a in self.aborted if a.last_offset < self.log_end_offset]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        super().truncate_fully_and_start_at(offset)
        self.aborted = []

    def crash(self, *, power_loss: bool = True) -> None:
        super().crash(power_loss=power_loss)
        self.aborted = [a for a in self.aborted if a.last_offset < self.log_end_offset]

    def markers(self) -> list[tuple]:
        """(header, marker or None) of every batch, for a replay."""
        return [
            (h, read_marker(b, h) if h.is_control else None) for h, b in zip(self.headers, self.batches, strict=True)
        ]

    def collect_aborted(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        return [a for a in self.aborted if a.last_offset >= fetch_offset and a.first_offset < upper]


def rebuild(log: TxnLog, config: ReplicationConfig) -> ProducerStateManager:
    """Producer state and the aborted index from the whole log (what the shell does without a snapshot)."""
    aborted: list[AbortedTxn] = []
    state = ProducerStateManager.rebuild(
        None,
        log.markers(),
        log.log_end_offset,
        config.producer_batches_to_retain,
        config.producer_id_expiration_ms,
        on_aborted=lambda t, lso: aborted.append(AbortedTxn(t.producer_id, t.first_offset, t.last_offset, lso)),
    )
    log.aborted = aborted
    return state


class TxnBroker(Broker):
    def __init__(self, sim: Simulation, broker_id: int) -> None:
        super().__init__(sim, broker_id)
        self.log = TxnLog()

    def _perform(self, action) -> None:
        if isinstance(action, IndexAbortedTxn) and self.sim.broken_abort_index:
            return  # the broken variant: aborts never reach the index
        if isinstance(action, IndexAbortedTxn):
            entry = AbortedTxn(action.producer_id, action.first_offset, action.last_offset, action.last_stable_offset)
            if not entry.last_offset < self.log.log_end_offset:
                self.sim.checker.violation(f"broker {self.id} indexes an abort at {entry.last_offset} past its log")
            self.log.aborted.append(entry)
        elif isinstance(action, RebuildProducerState):
            self.partition.load_producer_state(rebuild(self.log, self.replication_config))
        else:
            super()._perform(action)

    def restart(self) -> None:
        if self.alive:
            return
        self.alive = True
        self.registered = False
        self.broker_epoch += 1
        self.partition = Partition(self.id, self.replication_config, broker_epoch=self.broker_epoch)
        self.partition.load_producer_state(rebuild(self.log, self.replication_config))
        self.register()

    def serve_marker(
        self, request_id: object, pid: int, committed: bool, reply: Callable[[CompleteProduce], None]
    ) -> None:
        if not self.alive:
            return
        marker = TxnMarker(committed, 0)
        data = build_marker_batch(pid, 0, marker, timestamp_ms=1_000 + self.sim.loop.now)
        request = ProduceRequest(
            request_id, parse_header(data), acks=-1, timeout_ms=self.sim.config.produce_timeout_ms, marker=marker
        )
        self.produce_bytes[request_id] = data
        self.produce_replies[request_id] = reply
        self.perform(self.partition.handle_produce(request, self.sim.loop.now))
        self.produce_bytes.pop(request_id, None)


class TxnClient:
    """Transactions one after another, each under a fresh producer id, against the current leader."""

    FIRST_PRODUCER_ID = 100

    def __init__(self, sim: TxnSimulation) -> None:
        self.sim = sim
        self.pid = self.FIRST_PRODUCER_ID
        self.sequence = 0
        self.left = 0
        self.batch: bytes | None = None
        self.marker_phase = False
        self.attempt = 0
        self.active = True
        self.acked = 0
        # The coordinator's decision per producer id: True commit, False abort (absent: still open).
        self.decided: dict[int, bool] = {}
        self._new_transaction()

    def _new_transaction(self) -> None:
        self.sequence = 0
        self.left = self.sim.rng.randint(1, 3)
        self.batch = None
        self.marker_phase = False

    def _decide(self, commit: bool) -> None:
        self.decided[self.pid] = commit
        self.marker_phase = True

    def send(self) -> None:
        sim = self.sim
        if not self.active:
            return
        self.attempt += 1
        attempt = self.attempt
        leader = sim.controller.registration.leader
        if leader == NO_LEADER:
            sim.loop.after(sim.config.client_backoff_ms, self.send)
            return
        broker = sim.brokers[leader]

        def reply(result: CompleteProduce) -> None:
            sim.net.send(leader, CLIENT, lambda: self.on_response(attempt, result))

        request_id = (CLIENT, attempt)
        if self.marker_phase:
            pid, commit = self.pid, self.decided[self.pid]
            sim.net.send(CLIENT, leader, lambda: broker.serve_marker(request_id, pid, commit, reply))
        else:
            if self.batch is None:
                count = sim.rng.randint(1, 3)
                records = [(None, f"t{self.pid}-{self.sequence + i}".encode(), (), 1_000) for i in range(count)]
                self.batch = build_batch(
                    records, producer_id=self.pid, producer_epoch=0, base_sequence=self.sequence, is_transactional=True
                )
            data = self.batch
            sim.net.send(CLIENT, leader, lambda: broker.serve_produce(request_id, data, reply))
        sim.loop.after(sim.config.client_timeout_ms, lambda: self.on_timeout(attempt))

    def on_timeout(self, attempt: int) -> None:
        if attempt == self.attempt:
            self.sim.loop.after(self.sim.config.client_backoff_ms, self.send)

    def on_response(self, attempt: int, result: CompleteProduce) -> None:
        if attempt != self.attempt:
            return
        self.attempt += 1
        error = result.error
        if self.marker_phase:
            if error == ErrorCode.NONE:
                self.acked += 1
                self.pid += 1
                self._new_transaction()
        elif error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            assert self.batch is not None
            self.sequence += parse_header(self.batch).last_offset_delta + 1
            self.batch = None
            self.acked += 1
            self.left -= 1
            if self.left == 0:
                self._decide(self.sim.rng.random() < 0.5)
        elif error in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            self._decide(False)  # the partition lost this producer's state: the transaction cannot finish
        self.sim.loop.after(self.sim.config.client_backoff_ms, self.send)


class TxnChecker(Checker):
    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self._checked: tuple | None = None
        self.reads_checked = 0
        self.records_read = 0

    def _check_sequence_unique(self, offset: int, batch: bytes) -> None:
        if parse_header(batch).is_control:
            return  # a retried marker is written again: markers carry no sequence (Kafka's too)
        super()._check_sequence_unique(offset, batch)

    def after_event(self) -> None:
        super().after_event()
        sim = self.sim
        reg = sim.controller.registration
        broker = sim.brokers.get(reg.leader)
        if broker is None or not broker.alive or broker.partition.leader is None:
            return
        core = broker.partition.leader
        log: TxnLog = broker.log  # type: ignore[assignment]
        key = (broker.id, core.leader_epoch, log.log_end_offset, core.high_watermark, len(log.aborted))
        if key == self._checked:
            return
        self._checked = key
        lso, hw = core.last_stable_offset, core.high_watermark
        if lso > hw:
            self.violation(f"leader {broker.id} LSO {lso} above its HW {hw}")
        self._check_lso(broker.id, log, lso, hw)
        self._check_read_committed(broker.id, log, lso)

    def _check_lso(self, leader: int, log: TxnLog, lso: int, hw: int) -> None:
        """7: every transactional batch below the LSO has its producer's marker after it, below the HW."""
        markers: dict[int, list[int]] = {}
        for h in log.headers:
            if h.is_control and h.base_offset < hw:
                markers.setdefault(h.producer_id, []).append(h.base_offset)
        for h in log.headers:
            if h.base_offset >= lso:
                break
            decided = any(m > h.last_offset for m in markers.get(h.producer_id, []))
            if h.is_transactional and not h.is_control and not decided:
                self.violation(
                    f"leader {leader} LSO {lso} passes the open transaction of producer {h.producer_id} "
                    f"at {h.base_offset} (no marker after it below HW {hw})"
                )
                return

    def _check_read_committed(self, leader: int, log: TxnLog, lso: int) -> None:
        """8: Kafka's read_committed consumer over [0, LSO): no aborted, no undecided record."""
        decided = self.sim.client.decided
        aborted = sorted(log.collect_aborted(0, lso), key=lambda a: a.first_offset)
        ongoing: set[int] = set()
        self.reads_checked += 1
        for h, batch in zip(log.headers, log.batches, strict=True):
            if h.last_offset >= lso:
                break
            if h.is_control:
                marker = read_marker(batch, h)
                if marker is not None and not marker.committed:
                    ongoing.discard(h.producer_id)
                continue
            if h.is_transactional:
                while aborted and aborted[0].first_offset <= h.last_offset:
                    ongoing.add(aborted.pop(0).producer_id)
                if h.producer_id in ongoing:
                    continue
                verdict = decided.get(h.producer_id)
                for record in decode_batch(batch).records:
                    self.records_read += 1
                    if verdict is None:
                        self.violation(f"read_committed on leader {leader} returns {record.value!r}: undecided")
                        return
                    if verdict is False:
                        self.violation(f"read_committed on leader {leader} returns {record.value!r}: aborted")
                        return

    def check_converged(self) -> None:
        """9 (liveness, after the heal phase): the leader's LSO is exactly where the log says it must be:
        the first offset of a transaction with no marker after it, else the high watermark."""
        super().check_converged()
        reg = self.sim.controller.registration
        broker = self.sim.brokers.get(reg.leader)
        if broker is None or broker.partition.leader is None:
            return
        core = broker.partition.leader
        open_first: dict[int, int] = {}
        for h in broker.log.headers:
            if h.is_control:
                open_first.pop(h.producer_id, None)
            elif h.is_transactional:
                open_first.setdefault(h.producer_id, h.base_offset)
        expected = min([*open_first.values(), core.high_watermark])
        if core.last_stable_offset != expected:
            self.violation(
                f"after healing leader {broker.id} LSO {core.last_stable_offset} != {expected} "
                f"(open: {open_first}, HW {core.high_watermark})"
            )


class TxnSimulation(Simulation):
    def __init__(self, config: SimConfig, *, broken_abort_index: bool = False) -> None:
        self.broken_abort_index = broken_abort_index
        super().__init__(config)
        self.checker = TxnChecker(self)
        self.brokers = {b: TxnBroker(self, b) for b in config.brokers}
        self.client = TxnClient(self)  # type: ignore[assignment]


@dataclass
class TxnResult:
    result: SimResult
    transactions: int
    aborted: int
    reads_checked: int
    records_read: int


def run(config: SimConfig, **broken: bool) -> TxnResult:
    sim = TxnSimulation(config, **broken)
    result = sim.run()
    client: TxnClient = sim.client  # type: ignore[assignment]
    checker: TxnChecker = sim.checker  # type: ignore[assignment]
    return TxnResult(
        result,
        transactions=len(client.decided),
        aborted=sum(1 for v in client.decided.values() if not v),
        reads_checked=checker.reads_checked,
        records_read=checker.records_read,
    )
