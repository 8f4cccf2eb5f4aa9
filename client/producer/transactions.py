"""The transactional producer's state machine and requests (sans-I/O), as Kafka's TransactionManager.

The application's calls change the state and queue coordinator requests; the
sender asks `next_request(now_ms, ...)` for the one to send next (one in flight
at a time) and hands back its answer or the lack of one. Each call gets a
TxnResult that completes when its requests are done. Fenced and the other
fatal errors end the producer (FATAL_ERROR); any other failure in a
transaction leaves it to abort (ABORTABLE_ERROR).
Design notes: docs/transactions.md, section "The client".
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.errors import IllegalStateError, ProducerFencedError, error_from
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

Address = tuple[str, int]
E = ErrorCode

FIND_COORDINATOR_PATH = "/kafka/find_coordinator"
INIT_PRODUCER_ID_PATH = "/kafka/init_producer_id"
ADD_PARTITIONS_PATH = "/kafka/add_partitions_to_txn"
ADD_OFFSETS_PATH = "/kafka/add_offsets_to_txn"
TXN_OFFSET_COMMIT_PATH = "/kafka/txn_offset_commit"
END_TXN_PATH = "/kafka/end_txn"
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key_type

# Kafka: a CONCURRENT_TRANSACTIONS answer to the first AddPartitionsToTxn of a transaction (the previous
# one is still completing) is retried after 20 ms rather than the full retry backoff.
ADD_PARTITIONS_RETRY_BACKOFF_MS = 20


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# Kafka's TransactionManager.State.isTransitionValid: target -> the states it may be entered from.
_VALID_SOURCES: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.UNINITIALIZED}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TxnState),
}

_FENCED = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
# Fatal besides fencing (Kafka's fatalError calls in the request handlers): the id is not ours to use,
# or the broker cannot do transactions at all.
_FATAL = frozenset(
    {
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        E.CLUSTER_AUTHORIZATION_FAILED,
        E.INVALID_TXN_STATE,
        E.UNSUPPORTED_VERSION,
        E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        E.INVALID_TRANSACTION_TIMEOUT,
    }
)
_COORDINATOR_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})
_RETRY = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT})


def is_fatal_txn_error(code: ErrorCode) -> bool:
    """True for the errors after which a transactional producer can only be closed."""
    return code in _FENCED or code in _FATAL


class TxnResult:
    """The outcome of one application call (init, send offsets, commit, abort): done once, maybe with an error."""

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.done = False
        self.error: KafkaError | None = None
        self._callbacks: list[Callable[[TxnResult], None]] = []

    def add_callback(self, callback: Callable[[TxnResult], None]) -> None:
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def complete(self, error: KafkaError | None = None) -> None:
        if self.done:
            return
        self.done, self.error = True, error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __repr__(self) -> str:
        return f"TxnResult({self.operation}, done={self.done}, error={self.error!r})"


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What TxnOffsetCommit needs of the consumer (KIP-447); the consumer's group_metadata() has these fields."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass
class _Step:
    """One queued request: its kind, the result it completes, and what it carries."""

    kind: str
    result: TxnResult | None = None
    group: GroupMetadata | None = None
    offsets: dict[TopicPartition, tuple[int, int, str]] = field(default_factory=dict)  # offset, epoch, metadata
    committed: bool = False
    key_type: int = TRANSACTION_KEY
    key: str = ""
    partitions: frozenset[TopicPartition] = frozenset()
    bump_epoch: bool = False


@dataclass
class TxnRequest:
    """A request for the shell to send: to `address`, or to any broker when None."""

    path: str
    body: dict[str, Any]
    address: Address | None
    step: _Step


def _topics(partitions: set[TopicPartition] | frozenset[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _rows(body: Mapping[str, Any]) -> list[tuple[TopicPartition, ErrorCode]]:
    rows = []
    for topic in body.get("topics") or []:
        for part in topic.get("partitions") or []:
            rows.append(
                (TopicPartition(topic["name"], int(part["partition"])), error_from(part.get("error_code", 0)).code)
            )
    return rows


class TransactionManager:
    def __init__(
        self,
        transactional_id: str,
        idempotence: IdempotenceManager,
        *,
        transaction_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self.transactional_id = transactional_id
        self.idempotence = idempotence
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self.coordinator: Address | None = None
        self.group_coordinators: dict[str, Address] = {}
        self.new_partitions: set[TopicPartition] = set()  # sent to, not yet asked for
        self.pending_partitions: set[TopicPartition] = set()  # in an AddPartitionsToTxn in flight
        self.partitions_in_transaction: set[TopicPartition] = set()
        self.transaction_started = False  # something was added: EndTxn is needed to end it
        self._queue: deque[_Step] = deque()
        self._in_flight: _Step | None = None
        self._attempts = 0
        self._next_attempt_ms = 0.0
        self._pending_result: TxnResult | None = None  # of the init/commit/abort under way
        self._waiting_for_batches = False  # EndTxn is due but batches are still out

    # State -----------------------------------------------------------------

    def _transition(self, target: TxnState, error: KafkaError | None = None) -> None:
        if self.state not in _VALID_SOURCES[target]:
            raise IllegalStateError(
                f"transactional id {self.transactional_id!r}: invalid transition from {self.state.value} "
                f"to {target.value}"
            )
        if error is not None:
            self.last_error = error
        elif target not in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            self.last_error = None
        log.debug("transactional id %r: %s -> %s", self.transactional_id, self.state.value, target.value)
        self.state = target

    @property
    def has_error(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    @property
    def has_fatal_error(self) -> bool:
        return self.state == S.FATAL_ERROR

    @property
    def is_completing(self) -> bool:
        return self.state in (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION)

    def _fail_if_error(self, doing: str) -> None:
        if self.state == S.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state == S.ABORTABLE_ERROR:
            raise KafkaError(
                f"cannot {doing}: the transaction failed ({self.last_error}); call abort_transaction()",
                self.last_error.code if self.last_error is not None else E.UNKNOWN_SERVER_ERROR,
            )

    def _require(self, doing: str, *states: TxnState) -> None:
        self._fail_if_error(doing)
        if self.state not in states:
            raise IllegalStateError(f"cannot {doing} in state {self.state.value}")

    def fatal(self, error: KafkaError) -> None:
        """The producer can no longer be used (fenced, or an error Kafka treats as fatal)."""
        if error.code in _FENCED and not isinstance(error, ProducerFencedError):
            error = ProducerFencedError(
                f"transactional id {self.transactional_id!r} was fenced: another producer with the same "
                f"transactional id started, or the transaction timed out ({error.message})"
            )
        if self.state != S.FATAL_ERROR:
            self._transition(S.FATAL_ERROR, error)
        self._fail_queued(error)

    def abortable(self, error: KafkaError) -> None:
        """The current transaction cannot commit; the application must abort it."""
        if self.state in (S.FATAL_ERROR, S.ABORTING_TRANSACTION):
            return  # fatal wins; while aborting, batch failures are what an abort produces
        if self.state == S.READY:
            return  # a late answer from a transaction that already ended
        self._transition(S.ABORTABLE_ERROR, error)

    def _fail_queued(self, error: KafkaError) -> None:
        steps = list(self._queue)
        self._queue.clear()
        for step in steps:
            if step.result is not None:
                step.result.complete(error)
        if self._pending_result is not None:
            self._pending_result.complete(error)
            self._pending_result = None

    # Application calls -------------------------------------------------------

    def init_transactions(self) -> TxnResult:
        """Kafka's initializeTransactions: InitProducerId with the transactional id (again: the same result)."""
        if self._pending_result is not None and self._pending_result.operation == "init":
            return self._pending_result
        self._require("init_transactions", S.UNINITIALIZED)
        self._transition(S.INITIALIZING)
        result = self._pending_result = TxnResult("init")
        self._queue.append(_Step("init_producer_id", result))
        return result

    def begin_transaction(self) -> None:
        self._require("begin_transaction", S.READY)
        self._transition(S.IN_TRANSACTION)

    def check_may_send(self) -> None:
        """send() outside a transaction, or after it failed, is an error (Kafka's maybeAddPartition checks)."""
        self._fail_if_error("send")
        if self.state != S.IN_TRANSACTION:
            raise IllegalStateError(f"cannot send in state {self.state.value}: call begin_transaction() first")

    def maybe_add_partition(self, tp: TopicPartition) -> bool:
        """A record was appended for `tp`: AddPartitionsToTxn goes out before its first batch may.

        True when `tp` is new to the transaction (the sender has a request to make)."""
        self.check_may_send()
        if tp in self.partitions_in_transaction or tp in self.pending_partitions or tp in self.new_partitions:
            return False
        self.new_partitions.add(tp)
        return True

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        """A batch for `tp` may be drained: the coordinator has the partition in the transaction."""
        return not self.has_error and tp in self.partitions_in_transaction

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, tuple[int, int, str]], group: GroupMetadata
    ) -> TxnResult:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator (KIP-447: with the member's identity)."""
        self._require("send_offsets_to_transaction", S.IN_TRANSACTION)
        if not group.group_id:
            raise IllegalStateError("send_offsets_to_transaction needs a consumer group id")
        result = TxnResult("send_offsets")
        self._queue.append(_Step("add_offsets", result, group=group, offsets=dict(offsets)))
        return result

    def begin_commit(self) -> TxnResult:
        """Kafka's beginCommit: EndTxn(commit) goes out once every batch of the transaction has its answer."""
        if self._pending_result is not None and self._pending_result.operation == "commit":
            return self._pending_result
        self._require("commit_transaction", S.IN_TRANSACTION)
        self._transition(S.COMMITTING_TRANSACTION)
        return self._begin_completing(committed=True)

    def begin_abort(self) -> TxnResult:
        """Kafka's beginAbort: queued requests are dropped; EndTxn(abort) once the batches in flight are answered."""
        if self._pending_result is not None and self._pending_result.operation == "abort":
            return self._pending_result
        if self.state == S.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            raise IllegalStateError(f"cannot abort_transaction in state {self.state.value}")
        self._transition(S.ABORTING_TRANSACTION)
        self.new_partitions.clear()
        aborted = KafkaError("the transaction is being aborted", E.OPERATION_NOT_ATTEMPTED)
        for step in [s for s in self._queue if s.kind != "find_coordinator"]:
            self._queue.remove(step)
            if step.result is not None:
                step.result.complete(aborted)
        return self._begin_completing(committed=False)

    def _begin_completing(self, committed: bool) -> TxnResult:
        result = self._pending_result = TxnResult("commit" if committed else "abort")
        if self._touched_coordinator():
            # Whether EndTxn is needed is decided again when it is due (a request in flight may add to it).
            self._queue.append(_Step("end_txn", result, committed=committed))
        else:
            self._complete_transaction()  # nothing reached the coordinator: nothing to end
        return result

    def _touched_coordinator(self) -> bool:
        """Something of this transaction is, or may be, at the coordinator (or is about to be sent there)."""
        return bool(
            self.transaction_started
            or self.pending_partitions
            or self.new_partitions
            or any(s.kind in ("add_partitions", "add_offsets", "txn_offset_commit") for s in self._queue)
            or (self._in_flight is not None and self._in_flight.kind != "find_coordinator")
        )

    def _complete_transaction(self) -> None:
        """The transaction ended; a producer whose sequences broke gets a new epoch first (KIP-360)."""
        aborting = self.state == S.ABORTING_TRANSACTION
        self.partitions_in_transaction.clear()
        self.pending_partitions.clear()
        self.new_partitions.clear()
        self.transaction_started = False
        if aborting and self.idempotence.epoch_bump_required:
            self._transition(S.INITIALIZING)
            self._queue.appendleft(_Step("init_producer_id", self._pending_result, bump_epoch=True))
            return
        self._transition(S.READY)
        if self._pending_result is not None:
            self._pending_result.complete()
            self._pending_result = None

    # Batches -----------------------------------------------------------------

    def on_batch_failed(self, error: KafkaError) -> None:
        """A batch of the transaction failed for good: fatal when fenced, else the transaction must abort."""
        if is_fatal_txn_error(error.code):
            self.fatal(error)
        else:
            self.abortable(error)

    # Requests ----------------------------------------------------------------

    @property
    def wants_end_txn(self) -> bool:
        """An EndTxn is queued, waiting for the transaction's batches."""
        return any(s.kind == "end_txn" for s in self._queue)

    @property
    def has_in_flight_request(self) -> bool:
        return self._in_flight is not None

    def next_attempt_ms(self) -> float:
        """When next_request may have something (inf: nothing queued, or only what an answer will unblock)."""
        if self._in_flight is not None or self._waiting_for_batches or not (self._queue or self.new_partitions):
            return float("inf")  # the answer (a request's, or the batches' the EndTxn waits for) wakes the sender
        return self._next_attempt_ms

    def next_request(self, now_ms: int, has_incomplete_batches: bool) -> TxnRequest | None:
        """The one request to send now (None: nothing, or not yet): Kafka's TransactionManager.nextRequest."""
        self._waiting_for_batches = False
        if self._in_flight is not None or now_ms < self._next_attempt_ms:
            return None
        adding = self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION)
        if self.new_partitions and adding and not any(s.kind == "add_partitions" for s in self._queue):
            # Ahead of an EndTxn waiting for the batches of these very partitions.
            ends = [i for i, s in enumerate(self._queue) if s.kind == "end_txn"]
            self._queue.insert(ends[0] if ends else len(self._queue), _Step("add_partitions"))
        while self._queue:
            step = self._queue[0]
            if step.kind == "end_txn" and has_incomplete_batches:
                self._waiting_for_batches = True
                return None  # EndTxn waits until every batch of the transaction has its answer
            if self.has_error and step.kind != "find_coordinator":
                # Kafka's maybeTerminateRequestWithError: nothing but an abort goes out after an error.
                self._queue.popleft()
                if step.result is not None:
                    assert self.last_error is not None
                    step.result.complete(self.last_error)
                if step.result is self._pending_result:
                    self._pending_result = None
                continue
            request = self._build(step)
            if request is None:
                continue  # the step was replaced (a coordinator lookup first) or dropped
            self._queue.popleft()
            self._in_flight = step
            return request
        return None

    def _coordinator_for(self, step: _Step) -> tuple[int, str] | None:
        if step.kind == "txn_offset_commit":
            assert step.group is not None
            return GROUP_KEY, step.group.group_id
        if step.kind in ("find_coordinator",):
            return None
        return TRANSACTION_KEY, self.transactional_id

    def _address(self, key_type: int, key: str) -> Address | None:
        return self.coordinator if key_type == TRANSACTION_KEY else self.group_coordinators.get(key)

    def lookup_coordinator(self, key_type: int, key: str) -> None:
        """Forget where `key`'s coordinator is; a FindCoordinator goes first (Kafka's lookupCoordinator)."""
        if key_type == TRANSACTION_KEY:
            self.coordinator = None
        else:
            self.group_coordinators.pop(key, None)
        if not any(s.kind == "find_coordinator" and (s.key_type, s.key) == (key_type, key) for s in self._queue):
            self._queue.appendleft(_Step("find_coordinator", key_type=key_type, key=key))

    def _producer_fields(self) -> dict[str, Any]:
        pid = self.idempotence.producer_id_and_epoch
        return {
            "transactional_id": self.transactional_id,
            "producer_id": pid.producer_id,
            "producer_epoch": pid.epoch,
        }

    def _build(self, step: _Step) -> TxnRequest | None:
        target = self._coordinator_for(step)
        address: Address | None = None
        if target is not None:
            address = self._address(*target)
            if address is None:
                self.lookup_coordinator(*target)
                return None
        if step.kind == "find_coordinator":
            body: dict[str, Any] = {"key": step.key, "key_type": step.key_type}
            return TxnRequest(FIND_COORDINATOR_PATH, body, None, step)
        if step.kind == "init_producer_id":
            pid = self.idempotence.producer_id_and_epoch
            body = {
                "transactional_id": self.transactional_id,
                "transaction_timeout_ms": self.transaction_timeout_ms,
                # KIP-360: naming our current id and epoch asks for a bump, not a fence.
                "producer_id": pid.producer_id if step.bump_epoch else -1,
                "producer_epoch": pid.epoch if step.bump_epoch else -1,
            }
            return TxnRequest(INIT_PRODUCER_ID_PATH, body, address, step)
        if step.kind == "add_partitions":
            if not self.new_partitions or self.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                self._queue.popleft()
                return None
            step.partitions = frozenset(self.new_partitions)
            self.pending_partitions |= step.partitions
            self.new_partitions.clear()
            body = {**self._producer_fields(), "topics": _topics(step.partitions)}
            return TxnRequest(ADD_PARTITIONS_PATH, body, address, step)
        if step.kind == "add_offsets":
            assert step.group is not None
            body = {**self._producer_fields(), "group_id": step.group.group_id}
            return TxnRequest(ADD_OFFSETS_PATH, body, address, step)
        if step.kind == "txn_offset_commit":
            assert step.group is not None
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, (offset, epoch, metadata) in sorted(step.offsets.items()):
                by_topic.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": epoch,
                        "committed_metadata": metadata,
                    }
                )
            body = {
                **self._producer_fields(),
                "group_id": step.group.group_id,
                "generation_id": step.group.generation_id,
                "member_id": step.group.member_id,
                "group_instance_id": step.group.group_instance_id,
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            }
            return TxnRequest(TXN_OFFSET_COMMIT_PATH, body, address, step)
        if step.kind == "end_txn":
            if not self.transaction_started:
                self._queue.popleft()
                self._complete_transaction()  # the coordinator never heard of it: nothing to end
                return None
            body = {**self._producer_fields(), "committed": step.committed}
            return TxnRequest(END_TXN_PATH, body, address, step)
        raise AssertionError(f"unknown step {step.kind}")

    # Outcomes ----------------------------------------------------------------

    def _retry(self, step: _Step, now_ms: int, backoff_ms: float | None = None) -> None:
        """Send `step` again after a backoff (first in line, behind any coordinator lookup)."""
        if backoff_ms is None:
            backoff_ms = min(self.retry_backoff_max_ms, self.retry_backoff_ms * (2 ** min(self._attempts, 16)))
        self._attempts += 1
        self._next_attempt_ms = now_ms + backoff_ms
        lookups = 0
        while lookups < len(self._queue) and self._queue[lookups].kind == "find_coordinator":
            lookups += 1
        self._queue.insert(lookups, step)

    def _done(self, step: _Step) -> None:
        self._attempts = 0
        self._next_attempt_ms = 0.0

    def handle_failure(self, request: TxnRequest, error: KafkaError, now_ms: int) -> None:
        """No answer: the coordinator may have moved (Kafka looks it up again and retries)."""
        step = request.step
        self._in_flight = None
        if step.kind == "add_partitions":
            self.pending_partitions -= step.partitions
            self.new_partitions |= step.partitions
            step = _Step("add_partitions")
        target = self._coordinator_for(step)
        if step.kind != "find_coordinator" and target is not None:
            self._retry(step, now_ms)
            self.lookup_coordinator(*target)
        else:
            self._retry(step, now_ms)

    def handle_response(self, request: TxnRequest, body: Mapping[str, Any], now_ms: int) -> None:
        step = request.step
        self._in_flight = None
        handler = getattr(self, f"_on_{step.kind}")
        handler(step, body, now_ms)

    def _top_error(self, body: Mapping[str, Any]) -> KafkaError:
        code = error_from(body.get("error_code", 0) or 0)
        return error_from(code.code, str(body.get("message") or code.code.name))

    def _common(self, step: _Step, error: KafkaError, now_ms: int) -> bool:
        """The answers every coordinator request shares; True when handled."""
        code = error.code
        target = self._coordinator_for(step)
        if code in _COORDINATOR_MOVED and target is not None:
            self._retry(step, now_ms)
            self.lookup_coordinator(*target)
            return True
        if code in _RETRY:
            self._retry(step, now_ms)
            return True
        if is_fatal_txn_error(code):
            self.fatal(error)
            if step.result is not None:
                step.result.complete(self.last_error)
            return True
        return False

    def _on_find_coordinator(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        error = self._top_error(body)
        if error.code == E.NONE:
            address = (str(body["host"]), int(body["port"]))
            if step.key_type == TRANSACTION_KEY:
                self.coordinator = address
            else:
                self.group_coordinators[step.key] = address
            self._done(step)
        elif error.code.retriable or error.code in _COORDINATOR_MOVED:
            self._retry(step, now_ms)
        elif error.code == E.GROUP_AUTHORIZATION_FAILED:
            self.abortable(error)
        else:
            self.fatal(error)

    def _on_init_producer_id(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        error = self._top_error(body)
        if error.code == E.NONE:
            self._done(step)
            pid, epoch = int(body["producer_id"]), int(body["producer_epoch"])
            self.idempotence.set_producer_id_and_epoch(pid, epoch)
            self.idempotence.reset_after_new_epoch()
            self._transition(S.READY)
            result = step.result
            if result is not None:
                result.complete()
            if result is self._pending_result:
                self._pending_result = None
            return
        if not self._common(step, error, now_ms):
            self.fatal(error)

    def _on_add_partitions(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        error = self._top_error(body)
        self.pending_partitions -= step.partitions
        rows = _rows(body) if error.code == E.NONE else [(tp, error.code) for tp in step.partitions]
        failed: dict[TopicPartition, ErrorCode] = {}
        for tp, code in rows:
            if tp not in step.partitions:
                continue
            if code == E.NONE:
                self.partitions_in_transaction.add(tp)
                self.transaction_started = True
            else:
                failed[tp] = code
        missing = step.partitions - self.partitions_in_transaction - set(failed)
        for tp in missing:
            failed[tp] = E.UNKNOWN_SERVER_ERROR
        if not failed:
            self._done(step)
            return
        retry = set()
        for tp, code in failed.items():
            if code in _COORDINATOR_MOVED:
                self.lookup_coordinator(TRANSACTION_KEY, self.transactional_id)
                retry.add(tp)
            elif code in _RETRY or code == E.UNKNOWN_TOPIC_OR_PARTITION or code == E.OPERATION_NOT_ATTEMPTED:
                retry.add(tp)
            elif is_fatal_txn_error(code):
                self.fatal(error_from(code, f"AddPartitionsToTxn for {tp}: {code.name}"))
                return
            else:
                self.abortable(error_from(code, f"AddPartitionsToTxn for {tp}: {code.name}"))
                return
        self.new_partitions |= retry
        concurrent = all(code == E.CONCURRENT_TRANSACTIONS for code in failed.values())
        # The first add of a transaction meets the previous one still completing: Kafka retries it soon.
        backoff = ADD_PARTITIONS_RETRY_BACKOFF_MS if concurrent and not self.partitions_in_transaction else None
        self._retry(_Step("add_partitions"), now_ms, backoff)

    def _on_add_offsets(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        error = self._top_error(body)
        if error.code == E.NONE:
            self._done(step)
            self.transaction_started = True
            assert step.group is not None
            # The offsets go to the group coordinator next, ahead of anything queued later.
            self._queue.appendleft(_Step("txn_offset_commit", step.result, group=step.group, offsets=step.offsets))
            return
        if self._common(step, error, now_ms):
            return
        self.abortable(error)
        if step.result is not None:
            step.result.complete(error)

    def _on_txn_offset_commit(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        assert step.group is not None
        error = self._top_error(body)
        rows = _rows(body) if error.code == E.NONE else [(tp, error.code) for tp in step.offsets]
        pending = dict(step.offsets)
        retry_lookup = False
        for tp, code in rows:
            if tp not in pending:
                continue
            if code == E.NONE:
                del pending[tp]
            elif code in _COORDINATOR_MOVED:
                retry_lookup = True
            elif code in _RETRY or code == E.UNKNOWN_TOPIC_OR_PARTITION:
                pass
            elif is_fatal_txn_error(code) or code == E.INVALID_PRODUCER_ID_MAPPING:
                self.fatal(error_from(code, f"TxnOffsetCommit for {tp}: {code.name}"))
                if step.result is not None:
                    step.result.complete(self.last_error)
                return
            else:
                # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID (a rebalance took the partitions
                # away), GROUP_AUTHORIZATION_FAILED, ...: these offsets must not commit; abort.
                failure = error_from(code, f"TxnOffsetCommit for {tp} in group {step.group.group_id!r}: {code.name}")
                self.abortable(failure)
                if step.result is not None:
                    step.result.complete(failure)
                return
        if not pending:
            self._done(step)
            if step.result is not None:
                step.result.complete()
            return
        step.offsets = pending
        self._retry(step, now_ms)
        if retry_lookup:
            self.lookup_coordinator(GROUP_KEY, step.group.group_id)

    def _on_end_txn(self, step: _Step, body: Mapping[str, Any], now_ms: int) -> None:
        error = self._top_error(body)
        if error.code == E.NONE:
            self._done(step)
            self._complete_transaction()
            return
        if self._common(step, error, now_ms):
            return
        self.fatal(error)
