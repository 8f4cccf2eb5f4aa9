"""The transaction workload on the simulation kernel: the coordinator core failing over, markers, a zombie.

Pieces (the kernel's loop, seeded generator and network; the rest is this workload's):

- StateLog: `__transaction_state` (one partition), replicated: an append lands after a network
  delay; if its coordinator crashed meanwhile it may have landed or not (a coin flip), unacknowledged.
- CoordinatorNode: two nodes; the leader of the log runs kraftpy.broker.txn.TransactionCoordinator
  (the real core) at coordinator epoch = the log's leader term, performs its actions (appends,
  answers, markers over the network) and its timers. A crash kills the leader; the other node
  takes over at term + 1, loads the log and resumes; the crashed one comes back as the standby.
- DataPartition: a partition's transaction state as the partition side keeps it: data of open
  transactions per producer, closed by a marker (COMMIT/ABORT) of an epoch at least theirs;
  markers of an older coordinator epoch are refused (TRANSACTION_COORDINATOR_FENCED).
- Producers: two incarnations of one transactional id (the second starts later: the first becomes
  a zombie and must be fenced), each running transactions over random partitions, committing or
  aborting at random, retrying retriable errors.

Invariants (checked once the run settles): no transaction is committed on one partition and
aborted on another; data commits only if its producer asked to commit and a PrepareCommit at its
epoch is in the state log (a fenced zombie's data never commits); every commit
acknowledged to a producer is committed on all its partitions; no transaction stays open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kraftpy.broker.groups.actions import Append, Respond
from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.broker.txn.coordinator import SendMarkers, TransactionCoordinator
from kraftpy.broker.txn.records import TxnState, decode_record
from kraftpy.protocol.errors import ErrorCode as E
from tests.simulation.kernel import Loop, Network, NetworkConfig, Violations

TXN_ID = "sim-app"
PARTITIONS = [("t", i) for i in range(4)]
RETRIABLE = {
    E.NOT_COORDINATOR,
    E.COORDINATOR_LOAD_IN_PROGRESS,
    E.CONCURRENT_TRANSACTIONS,
    E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT,
}
# A client gives up on an answer after this long (a coordinator that crashed never answers).
REQUEST_TIMEOUT_MS = 2_000
LOG = "state-log"


@dataclass
class DataPartition:
    name: tuple[str, int]
    coordinator_epochs: dict[int, int] = field(default_factory=dict)
    # producer id -> [(epoch, txn key)] written and not yet closed
    open: dict[int, list[tuple[int, tuple]]] = field(default_factory=dict)
    outcome: dict[tuple, bool] = field(default_factory=dict)  # txn key -> committed?

    def write(self, pid: int, epoch: int, key: tuple) -> None:
        self.open.setdefault(pid, []).append((epoch, key))

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> E:
        if coordinator_epoch < self.coordinator_epochs.get(pid, -1):
            return E.TRANSACTION_COORDINATOR_FENCED
        self.coordinator_epochs[pid] = coordinator_epoch
        still = []
        for data_epoch, key in self.open.pop(pid, []):
            if data_epoch <= epoch:
                self.outcome.setdefault(key, commit)
            else:
                still.append((data_epoch, key))
        if still:
            self.open[pid] = still
        return E.NONE


class TxnSim:
    def __init__(self, seed: int, *, crashes: int = 3) -> None:
        self.loop = Loop(seed)
        self.net = Network(self.loop, NetworkConfig(min_delay_ms=1, max_delay_ms=15))
        self.violations = Violations(lambda: self.loop.now)
        self.config = TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=1,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=500,
        )
        self.records: list = []  # the state log
        self.term = 0
        self.leader: str | None = None
        self.core: TransactionCoordinator | None = None
        self.nodes = ("A", "B")
        self.partitions = {tp: DataPartition(tp) for tp in PARTITIONS}
        self.commit_asked: set[tuple] = set()  # txn keys whose producer sent EndTxn(commit)
        self.commit_acked: list[tuple] = []
        self.next_pid = 100
        self.crashes_left = crashes
        self.producers_done = 0
        self.fenced = 0  # producers that stopped on PRODUCER_FENCED (the zombie)
        self._become_leader("A")

    # --- the coordinator's node -------------------------------------------------------------------

    def _become_leader(self, node: str) -> None:
        self.term += 1
        self.leader = node
        self.core = TransactionCoordinator(self.config)
        self.core.begin_loading(0, self.term)
        term = self.term
        self.loop.after(20, lambda: self._load(term))

    def _load(self, term: int) -> None:
        if term == self.term:
            self._perform(self.core.complete_loading(0, list(self.records), self.loop.now), term)
            self._tick(term)

    def _tick(self, term: int) -> None:
        if term == self.term and self.leader is not None:
            self._perform(self.core.tick(self.loop.now), term)
            self.loop.after(100, lambda: self._tick(term))

    def crash(self) -> None:
        old = self.leader
        self.term += 1  # the old leader's appends in flight now land or not, unacknowledged
        self.leader, self.core = None, None
        other = next(n for n in self.nodes if n != old)
        self.loop.after(self.loop.rng.randint(50, 400), lambda: self._become_leader(other))

    def _perform(self, actions: list, term: int) -> None:
        for action in actions:
            if isinstance(action, Respond):
                callback = self.waiting.pop(action.request_id, None)
                if callback is not None:
                    self.net.send(self.leader, "client", lambda cb=callback, b=action.body: cb(b))
            elif isinstance(action, Append):
                self.loop.after(self.loop.rng.randint(1, 20), lambda a=action: self._appended(a, term))
            elif isinstance(action, SendMarkers):
                self._send_markers(action, set(action.partitions), term)

    def _appended(self, action: Append, term: int) -> None:
        if term != self.term:
            if self.loop.rng.random() < 0.5:
                self.records.extend(action.records)  # replicated before the crash, never acknowledged
            return
        self.records.extend(action.records)
        self._perform(self.core.append_completed(action.append_id, E.NONE, self.loop.now), term)

    def _send_markers(self, action: SendMarkers, remaining: set, term: int) -> None:
        if term != self.term or not remaining:
            if term == self.term:
                self._perform(
                    self.core.markers_written(
                        action.transactional_id, action.producer_id, action.producer_epoch,
                        action.coordinator_epoch, self.loop.now, action.load_epoch,
                    ),
                    term,
                )  # fmt: skip
            return
        acked = set()
        for tp in remaining:
            code = self.partitions[tp].marker(
                action.producer_id, action.producer_epoch, action.commit, action.coordinator_epoch
            )
            if code is E.NONE and self.loop.rng.random() < 0.8:  # some acknowledgements are lost: resent
                acked.add(tp)
        self.loop.after(self.loop.rng.randint(5, 50), lambda: self._send_markers(action, remaining - acked, term))

    # --- requests from producers ------------------------------------------------------------------

    waiting: dict[int, Callable[[dict], None]] = {}
    _rid = 0

    def request(self, call: Callable[[TransactionCoordinator, int, int], list], answer: Callable[[dict], None]) -> None:
        answered = False

        def once(body: dict) -> None:
            nonlocal answered
            if not answered:
                answered = True
                answer(body)

        self.loop.after(REQUEST_TIMEOUT_MS, lambda: once({"error_code": int(E.REQUEST_TIMED_OUT)}))
        self._request(call, once)

    def _request(
        self, call: Callable[[TransactionCoordinator, int, int], list], answer: Callable[[dict], None]
    ) -> None:
        def arrive() -> None:
            if self.core is None:
                answer({"error_code": int(E.NOT_COORDINATOR)})
                return
            TxnSim._rid += 1
            rid = TxnSim._rid
            self.waiting[rid] = answer
            self._perform(call(self.core, rid, self.loop.now), self.term)

        self.net.send("client", "coordinator", arrive)

    # --- running ----------------------------------------------------------------------------------

    def run(self, duration_ms: int = 20_000) -> Violations:
        self.waiting = {}
        Producer(self, "first", start_ms=0, transactions=40)
        Producer(self, "second", start_ms=self.loop.rng.randint(1_000, duration_ms // 4), transactions=10)
        for i in range(self.crashes_left):
            self.loop.at(self.loop.rng.randint(500, duration_ms // 2) + i, self.crash_if_up)
        self.loop.run_until(lambda: self.producers_done == 2, duration_ms * 3)
        self.loop.run_until(lambda: False, self.loop.now + 5_000)  # let markers and timeouts settle
        self.check()
        return self.violations

    def crash_if_up(self) -> None:
        if self.leader is not None:
            self.crash()

    def check(self) -> None:
        prepared_commits = set()  # (producer id, epoch) of every PrepareCommit in the state log
        for key, value in self.records:
            decoded = decode_record(key, value)[1]
            if decoded is not None and decoded.state is TxnState.PREPARE_COMMIT:
                prepared_commits.add((decoded.producer_id, decoded.producer_epoch))
        outcomes: dict[tuple, set[bool]] = {}
        for p in self.partitions.values():
            for key, committed in p.outcome.items():
                outcomes.setdefault(key, set()).add(committed)
            for pid, open_data in p.open.items():
                if open_data:
                    self.violations.report(f"{p.name}: transaction of producer {pid} still open: {open_data}")
        for key, seen in outcomes.items():
            if len(seen) > 1:
                self.violations.report(f"transaction {key} committed on some partitions and aborted on others")
            if True in seen and key not in self.commit_asked:
                self.violations.report(f"transaction {key} committed though its producer never asked to")
            if True in seen and key[:2] not in prepared_commits:
                self.violations.report(f"transaction {key} committed with no PrepareCommit at its epoch (a zombie's)")
        for key in self.commit_acked:
            if outcomes.get(key) != {True}:
                self.violations.report(f"transaction {key} was acknowledged committed but is {outcomes.get(key)}")
        if self.producers_done != 2:
            self.violations.report(f"only {self.producers_done} of 2 producers finished")


class Producer:
    """One incarnation of TXN_ID: init, then transactions; fenced means done (as a real zombie stops)."""

    def __init__(self, sim: TxnSim, name: str, *, start_ms: int, transactions: int) -> None:
        self.sim, self.name, self.left = sim, name, transactions
        self.pid = self.epoch = -1
        self.txn = 0
        sim.loop.at(start_ms, self.init)

    def retry(self, fn: Callable[[], None]) -> None:
        self.sim.loop.after(self.sim.loop.rng.randint(20, 100), fn)

    def finish(self, code: int = 0) -> None:
        self.sim.producers_done += 1
        if code == E.PRODUCER_FENCED:
            self.sim.fenced += 1

    def init(self) -> None:
        sim = self.sim

        def call(core: TransactionCoordinator, rid: int, now: int) -> list:
            new = None
            if core.needs_producer_id(TXN_ID):
                new, sim.next_pid = sim.next_pid, sim.next_pid + 1
            return core.init_producer_id(rid, TXN_ID, 2_000, -1, -1, new, now)

        def answer(body: dict) -> None:
            if body["error_code"] in RETRIABLE:
                return self.retry(self.init)
            assert body["error_code"] == 0, body
            self.pid, self.epoch = body["producer_id"], body["producer_epoch"]
            self.begin()

        sim.request(call, answer)

    def begin(self) -> None:
        if self.left == 0:
            return self.finish()
        self.left -= 1
        self.txn += 1
        rng = self.sim.loop.rng
        self.key = (self.pid, self.epoch, self.name, self.txn)
        self.parts = rng.sample(PARTITIONS, rng.randint(1, len(PARTITIONS)))
        self.add()

    def add(self) -> None:
        pid, epoch, parts = self.pid, self.epoch, self.parts

        def answer(body: dict) -> None:
            code = body["error_code"]
            if code in RETRIABLE:
                return self.retry(self.add)
            if code != 0:  # fenced: a zombie stops
                return self.finish(code)
            for tp in parts:  # no KIP-890 check on the partition: a write always lands
                self.sim.partitions[tp].write(pid, epoch, self.key)
            self.sim.loop.after(self.sim.loop.rng.randint(0, 300), self.end)

        self.sim.request(lambda core, rid, now: core.add_partitions(rid, TXN_ID, pid, epoch, parts, now), answer)

    def end(self) -> None:
        commit = self.sim.loop.rng.random() < 0.7
        if commit:
            self.sim.commit_asked.add(self.key)
        pid, epoch, key = self.pid, self.epoch, self.key

        def answer(body: dict) -> None:
            code = body["error_code"]
            if code in RETRIABLE:
                return self.retry(self.end_again(commit))
            if code != 0:
                return self.finish(code)  # fenced (or the transaction was aborted under it): a zombie stops
            if commit:
                self.sim.commit_acked.append(key)
            self.begin()

        self.sim.request(lambda core, rid, now: core.end_txn(rid, TXN_ID, pid, epoch, commit, now), answer)

    def end_again(self, commit: bool) -> Callable[[], None]:
        def again() -> None:
            pid, epoch, key = self.pid, self.epoch, self.key

            def answer(body: dict) -> None:
                code = body["error_code"]
                if code in RETRIABLE:
                    return self.retry(again)
                if code != 0:
                    return self.finish(code)
                if commit:
                    self.sim.commit_acked.append(key)
                self.begin()

            self.sim.request(lambda core, rid, now: core.end_txn(rid, TXN_ID, pid, epoch, commit, now), answer)

        return again
