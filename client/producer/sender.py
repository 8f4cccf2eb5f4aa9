"""The producer's send loop as a sans-I/O state machine, after Kafka's Sender.

`poll(now_ms)` does one round of Kafka's Sender.runOnce without any I/O: settle
idempotence state (resolve sequences, bump the epoch, ask for a producer id),
find the leaders with sendable batches, drain them into one produce request
per leader (respecting max_in_flight_requests_per_connection), expire batches
past delivery_timeout_ms, and return the requests for the shell to send with
the time until the next round is due. The shell reports each outcome back
with `handle_response` or `handle_request_failure` (`handle_sent` once an
acks=0 request, which has no answer, is written), and each batch then
succeeds, is retried (same bytes, same sequence) or fails, following Kafka's
completeBatch/canRetry rules.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.errors import (
    KafkaTimeoutError,
    ProducerFencedError,
    error_from,
    invalidates_metadata,
    is_fatal_for_producer,
    is_retriable,
)
from kraftpy.client.metadata import Address, Metadata
from kraftpy.client.producer.accumulator import RecordAccumulator
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.client.producer.producer_batch import ProducerBatch
from kraftpy.client.producer.transactions import TransactionManager, TxnRequest, TxnState
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from kraftpy.protocol.validate import INT32_MAX

log = logging.getLogger(__name__)

PRODUCE_PATH = "/kafka/produce"

# Outcomes after which the broker may hold the batch even though it was not acknowledged:
# no answer at all, an acks=all wait that timed out after the append, or an append
# the ISR could not confirm.
_UNKNOWN_OUTCOME = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)
INIT_PRODUCER_ID_PATH = "/kafka/init_producer_id"
_TXN_NOT_RETRIED = frozenset({ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER})


@dataclass
class ProduceRequest:
    request_id: int
    node_id: int
    address: Address
    body: dict[str, Any]
    batches: dict[TopicPartition, ProducerBatch]
    expects_response: bool
    created_ms: int


@dataclass
class SenderOutput:
    requests: list[ProduceRequest] = field(default_factory=list)
    init_producer_id: dict[str, Any] | None = None  # body for /kafka/init_producer_id, when one is needed
    txn_request: TxnRequest | None = None  # a transactional producer's next coordinator request
    poll_timeout_ms: float = float("inf")


def _int(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _parse_produce_answer(
    body: Mapping[str, Any], batches: Mapping[TopicPartition, ProducerBatch]
) -> dict[TopicPartition, tuple[ErrorCode, str, int, int, int]]:
    """Per partition: (code, message, base_offset, log_append_time_ms, log_start_offset)."""
    top = body.get("error_code", 0)
    if top:
        err = error_from(top, str(body.get("message", "")))
        return {tp: (err.code, err.message, -1, -1, -1) for tp in batches}
    answers: dict[TopicPartition, Mapping[str, Any]] = {}
    for topic in body.get("topics") or []:
        for part in topic.get("partitions") or []:
            answers[TopicPartition(topic.get("name"), part.get("partition"))] = part
    out = {}
    for tp in batches:
        part = answers.get(tp)
        if part is None:
            out[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, f"the produce answer has no entry for {tp}", -1, -1, -1)
            continue
        out[tp] = (
            error_from(_int(part.get("error_code", 0)) if part.get("error_code") is not None else 0).code,
            str(part.get("message") or ""),
            _int(part.get("base_offset")),
            _int(part.get("log_append_time_ms")),
            _int(part.get("log_start_offset")),
        )
    return out


def _expiry_error(batch: ProducerBatch, now_ms: int, cause: str = "") -> KafkaTimeoutError:
    suffix = f"; last error: {cause}" if cause else ""
    return KafkaTimeoutError(
        f"Expiring {batch.record_count} record(s) for {batch.tp}: {now_ms - batch.created_ms} ms has passed "
        f"since batch creation (delivery_timeout_ms){suffix}"
    )


class Sender:
    def __init__(
        self,
        accumulator: RecordAccumulator,
        metadata: Metadata,
        *,
        idempotence: IdempotenceManager | None = None,
        acks: int = -1,
        retries: int = INT32_MAX,
        request_timeout_ms: int = 30_000,
        max_request_size: int = 1_048_576,
        max_in_flight: int = 5,
        guarantee_message_order: bool = False,
        transactions: TransactionManager | None = None,
    ) -> None:
        self.transactions = transactions
        self.accumulator = accumulator
        self.metadata = metadata
        self.idempotence = idempotence
        self.acks = acks
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight
        self.guarantee_message_order = guarantee_message_order
        self._ids = itertools.count(1)
        self._in_flight: dict[int, ProduceRequest] = {}
        self._pid_request_pending = False
        self._pid_attempts = 0
        self._pid_next_attempt_ms = 0.0
        self._flushing_for_txn = False

    @property
    def fatal_error(self) -> KafkaError | None:
        txn = self.transactions
        if txn is not None and txn.has_fatal_error:
            return txn.last_error
        return None if self.idempotence is None else self.idempotence.fatal_error

    # Introspection ---------------------------------------------------------

    def in_flight_count(self, node_id: int | None = None) -> int:
        if node_id is None:
            return len(self._in_flight)
        return sum(1 for r in self._in_flight.values() if r.node_id == node_id)

    def has_pending_work(self) -> bool:
        """Anything left to send or to hear back about (close() waits for this to clear)."""
        return self.accumulator.has_undrained() or bool(self._in_flight) or bool(self.accumulator.incomplete())

    # One round -------------------------------------------------------------

    def poll(self, now_ms: int) -> SenderOutput:
        out = SenderOutput()
        idem = self.idempotence
        if idem is not None:
            idem.maybe_resolve_sequences()
            if idem.fatal_error is not None:
                self._fail_everything(idem.fatal_error)
                return out
            idem.bump_epoch_if_needed()
            if idem.needs_producer_id and not self._pid_request_pending and now_ms >= self._pid_next_attempt_ms:
                self._pid_request_pending = True
                out.init_producer_id = idem.init_producer_id_request()

        txn = self.transactions
        if txn is not None:
            if txn.has_fatal_error:
                assert txn.last_error is not None
                self._fail_everything(txn.last_error)
                return out
            self._poll_transaction(txn, out, now_ms)

        cluster = self.metadata.cluster
        result = self.accumulator.ready(cluster, now_ms)
        if result.unknown_leader_topics:
            for topic in result.unknown_leader_topics:
                self.metadata.add_topic(topic)
            self.metadata.request_update()
        # Expire first: a batch past its delivery timeout must not go out once more.
        self._expire(now_ms)
        nodes = {n for n in result.ready_nodes if self.in_flight_count(n) < self.max_in_flight}
        drained = self.accumulator.drain(cluster, nodes, self.max_request_size, now_ms)
        if self.guarantee_message_order:
            for batches in drained.values():
                for batch in batches:
                    self.accumulator.mute(batch.tp)

        for node_id, batches in drained.items():
            out.requests.append(self._make_request(node_id, batches, now_ms))

        timeout = result.next_ready_check_delay_ms
        if idem is not None and idem.needs_producer_id and not self._pid_request_pending:
            timeout = min(timeout, self._pid_next_attempt_ms - now_ms)
        timeout = min(timeout, self.accumulator.next_expiry_ms() - now_ms, self._next_in_flight_expiry_ms() - now_ms)
        if txn is not None:
            timeout = min(timeout, txn.next_attempt_ms() - now_ms)
        out.poll_timeout_ms = 0 if out.requests else max(0.0, timeout)
        return out

    def _poll_transaction(self, txn: TransactionManager, out: SenderOutput, now_ms: int) -> None:
        """Kafka's Sender.maybeSendAndPollTransactionalRequest: drop what may not go, then the next request."""
        if txn.state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING_TRANSACTION):
            # Batches not yet sent will never be: the transaction is (to be) aborted. Those already sent
            # keep retrying until answered, so EndTxn(abort) goes out with nothing of ours still in the air.
            error = txn.last_error or KafkaError("the transaction was aborted", ErrorCode.OPERATION_NOT_ATTEMPTED)
            self.accumulator.abort_undrained(lambda _batch: error, only_unsent=True)
        incomplete = bool(self.accumulator.incomplete()) or bool(self._in_flight)
        if incomplete and txn.wants_end_txn and not self.accumulator.flush_in_progress:
            self.accumulator.begin_flush()  # EndTxn waits for the batches: send them now, not after linger_ms
            self._flushing_for_txn = True
        elif not incomplete and self._flushing_for_txn:
            self.accumulator.end_flush()
            self._flushing_for_txn = False
        out.txn_request = txn.next_request(now_ms, incomplete)

    def handle_txn_response(self, request: TxnRequest, body: Mapping[str, Any], now_ms: int) -> None:
        assert self.transactions is not None
        self.transactions.handle_response(request, body, now_ms)

    def handle_txn_failure(self, request: TxnRequest, error: KafkaError, now_ms: int) -> None:
        assert self.transactions is not None
        self.transactions.handle_failure(request, error, now_ms)

    def _make_request(self, node_id: int, batches: list[ProducerBatch], now_ms: int) -> ProduceRequest:
        node = self.metadata.cluster.node(node_id)
        assert node is not None, "drain only returns batches for known leaders"
        topics: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            topics.setdefault(batch.tp.topic, []).append({"partition": batch.tp.partition, "records": batch.records})
        body = {
            "acks": self.acks,
            "timeout_ms": self.request_timeout_ms,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }
        if self.transactions is not None:
            # The leader asks this id's coordinator whether the partition is in the transaction (KIP-890).
            body["transactional_id"] = self.transactions.transactional_id
        request = ProduceRequest(
            request_id=next(self._ids),
            node_id=node_id,
            address=node.address,
            body=body,
            batches={b.tp: b for b in batches},
            expects_response=self.acks != 0,
            created_ms=now_ms,
        )
        # acks=0 too: nothing comes back, but the request counts as in flight until the shell reports it
        # written (handle_sent), so close() waits for it and max_in_flight bounds it (Kafka completes
        # such a request when its send completes).
        self._in_flight[request.request_id] = request
        return request

    def handle_sent(self, request_id: int, now_ms: int) -> None:
        """An acks=0 request was written to the socket: its batches succeed, offset unknown (-1)."""
        request = self._in_flight.get(request_id)
        if request is None or request.expects_response:
            return
        del self._in_flight[request_id]
        for batch in request.batches.values():
            if not batch.is_done:
                self._succeed(batch, -1, -1)

    # Expiry ----------------------------------------------------------------

    def _next_in_flight_expiry_ms(self) -> float:
        created = [b.created_ms for r in self._in_flight.values() for b in r.batches.values() if not b.is_done]
        return min(created) + self.accumulator.delivery_timeout_ms if created else float("inf")

    def _expire(self, now_ms: int) -> None:
        timeout = self.accumulator.delivery_timeout_ms
        for batch in self.accumulator.expired_batches(now_ms):
            # Not on the wire: if it was sent before, nobody knows whether the broker kept it.
            if self.idempotence is not None and batch.has_sequence:
                self.idempotence.remove_in_flight(batch)
                self.idempotence.mark_sequence_unresolved(batch)
            if self.guarantee_message_order:
                self.accumulator.unmute(batch.tp)
            error = _expiry_error(batch, now_ms, batch.last_error)
            if self.transactions is not None:
                self.transactions.on_batch_failed(error)
            batch.fail(error)
            self.accumulator.deallocate(batch)
        for request in self._in_flight.values():
            for batch in request.batches.values():
                if not batch.is_done and batch.has_reached_delivery_timeout(timeout, now_ms):
                    # Still on the wire: tell the application now, settle the sequence when the answer comes.
                    if self.idempotence is not None and batch.has_sequence:
                        self.idempotence.mark_sequence_unresolved(batch)
                    if self.transactions is not None:
                        self.transactions.on_batch_failed(_expiry_error(batch, now_ms))
                    batch.fail(_expiry_error(batch, now_ms))
                    self.accumulator.deallocate(batch)

    # Outcomes --------------------------------------------------------------

    def handle_response(self, request_id: int, body: Mapping[str, Any], now_ms: int) -> None:
        """The produce answer arrived; each partition's batch succeeds, retries or fails."""
        request = self._in_flight.pop(request_id, None)
        if request is None:
            return
        try:
            outcomes = _parse_produce_answer(body, request.batches)
        except (TypeError, ValueError, AttributeError) as exc:
            # A malformed answer tells us nothing about what the broker kept.
            message = f"malformed produce answer from node {request.node_id}: {exc}"
            outcomes = {tp: (ErrorCode.UNKNOWN_SERVER_ERROR, message, -1, -1, -1) for tp in request.batches}
        for tp, batch in request.batches.items():
            code, message, base_offset, append_time, log_start = outcomes[tp]
            self._complete_batch(batch, code, message, base_offset, append_time, log_start, now_ms)

    def handle_request_failure(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        """No answer (connection refused, timeout): every batch of the request sees `error`."""
        request = self._in_flight.pop(request_id, None)
        if request is None:
            return
        # A lost connection means the leader may have moved (Kafka's NetworkClient does the same); keep
        # looking while that broker is unreachable (Metadata.update watches failed leaders).
        if error.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
            self.metadata.node_failed(request.address, now_ms)
        self.metadata.request_update()
        for batch in request.batches.values():
            self._complete_batch(batch, error.code, error.message, -1, -1, -1, now_ms)

    def _complete_batch(
        self,
        batch: ProducerBatch,
        code: ErrorCode,
        message: str,
        base_offset: int,
        log_append_time_ms: int,
        log_start_offset: int,
        now_ms: int,
    ) -> None:
        if self.guarantee_message_order:
            self.accumulator.unmute(batch.tp)
        if invalidates_metadata(code):
            self.metadata.request_update()
        if code in _UNKNOWN_OUTCOME:
            batch.maybe_written = True
        if batch.is_done:
            # It expired while on the wire; only the idempotence bookkeeping still cares.
            if self.idempotence is not None:
                if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                    self.idempotence.handle_completed_batch(batch, base_offset)
                else:
                    self.idempotence.remove_in_flight(batch)
            return
        if code == ErrorCode.NONE:
            self._succeed(batch, base_offset, log_append_time_ms)
            return
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER or (
            code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            and self.idempotence is not None
            and self.idempotence.known_written(batch)
        ):
            # The broker already has it but no longer knows its offset: success, offset unknown (-1).
            self._succeed(batch, -1, -1)
            return
        error = error_from(code, message or code.name)
        if code == ErrorCode.PRODUCER_FENCED:
            error = ProducerFencedError(error.message)
        if self._can_retry(batch, code, log_start_offset, now_ms):
            log.debug("retrying %r after %s", batch, error)
            batch.last_error = str(error)
            self.accumulator.reenqueue(batch, now_ms)
            return
        if batch.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, now_ms) and is_retriable(code):
            error = _expiry_error(batch, now_ms, str(error))
        self._fail(batch, error)

    def _can_retry(self, batch: ProducerBatch, code: ErrorCode, log_start_offset: int, now_ms: int) -> bool:
        if batch.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, now_ms):
            return False
        if batch.attempts >= self.retries:
            return False
        if self.transactions is not None and code in _TXN_NOT_RETRIED:
            # In a transaction a lost producer state or a sequence gap is repaired by aborting (and a new
            # epoch from the coordinator), not by renumbering; retry only an answer that may be reordering.
            return batch.sent_behind_unsettled
        if self.idempotence is not None:
            return self.idempotence.can_retry(batch, code, log_start_offset, is_retriable(code))
        return is_retriable(code)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        if self.idempotence is not None and batch.has_sequence:
            self.idempotence.handle_completed_batch(batch, base_offset)
        batch.complete(base_offset, log_append_time_ms)
        self.accumulator.deallocate(batch)

    def _fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        if self.transactions is not None:
            self.transactions.on_batch_failed(error)
        idem = self.idempotence
        if idem is not None and batch.has_sequence:
            if batch.maybe_written and not is_fatal_for_producer(error.code):
                # Renumbering the batches after it would be safe only if the broker surely does not
                # have it (Kafka approximates this with "retries left"; a timeout can also end the
                # retries). Unknown: hold the partition until the batches in flight settle it.
                idem.remove_in_flight(batch)
                idem.mark_sequence_unresolved(batch)
            else:
                # The broker refused every attempt: nothing after it can be in the log; bump and renumber.
                idem.handle_failed_batch(batch, error, adjust_sequences=True)
        batch.fail(error)
        self.accumulator.deallocate(batch)

    # Producer id -----------------------------------------------------------

    def handle_producer_id(self, body: Mapping[str, Any]) -> None:
        self._pid_request_pending = False
        self._pid_attempts = 0
        if self.idempotence is None:
            return
        pid, epoch = body.get("producer_id"), body.get("producer_epoch")
        if not isinstance(pid, int) or not isinstance(epoch, int) or pid < 0:
            self.idempotence.producer_id_failed(
                KafkaError(f"init_producer_id answered {dict(body)!r}", ErrorCode.UNKNOWN_SERVER_ERROR)
            )
            return
        self.idempotence.set_producer_id_and_epoch(pid, epoch)

    def handle_producer_id_failure(self, error: KafkaError, now_ms: int) -> None:
        """InitProducerId failed; retriable errors are asked again after a backoff."""
        self._pid_request_pending = False
        self._pid_next_attempt_ms = now_ms + self.accumulator.retry_backoff(self._pid_attempts)
        self._pid_attempts += 1
        if self.idempotence is not None:
            self.idempotence.producer_id_failed(error)

    # Shutdown --------------------------------------------------------------

    def _fail_everything(self, error: KafkaError) -> None:
        self.accumulator.abort_undrained(lambda _batch: error)
        for batch in self.accumulator.incomplete():
            batch.abort(error)
            self.accumulator.deallocate(batch)

    def force_close(self, error: KafkaError) -> None:
        """close() ran out of time: every record not yet acknowledged fails with `error`."""
        self._fail_everything(error)
        self._in_flight.clear()
