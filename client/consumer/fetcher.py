"""The consumer's fetch logic (sans-I/O), after Kafka's Fetcher and FetchCollector.

Design notes: docs/client.md, section "client/consumer/fetcher.py".
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from kraftpy.client.consumer.aborted_transactions import AbortedTransactionFilter
from kraftpy.client.consumer.completed_fetch import CompletedFetch, Deserializer
from kraftpy.client.consumer.requests import (
    BrokerRequestCore,
    PositionsRequest,
    answered_partitions,
    topics_body,
    wire_epoch,
)
from kraftpy.client.consumer.subscription import FetchPosition, SubscriptionState
from kraftpy.client.errors import (
    LogTruncationError,
    OffsetOutOfRangeError,
    error_from,
)
from kraftpy.client.metadata import Metadata
from kraftpy.client.types import ConsumerRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

FETCH_PATH = "/kafka/fetch"
CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

# Errors after which the partition's leader must be looked up again.
_REFRESH_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


class FetchRequest(PositionsRequest):
    """One `/kafka/fetch` to a leader, for the positions of the partitions it leads."""


def _int(value: Any, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class Fetcher(BrokerRequestCore[FetchRequest]):
    path = FETCH_PATH

    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: Metadata,
        *,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int = 500,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> None:
        super().__init__(subscriptions, metadata, retry_backoff_ms=retry_backoff_ms)
        self.isolation_level = isolation_level
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.check_crcs = check_crcs
        self._key_de: Deserializer = key_deserializer or (lambda b: b)
        self._value_de: Deserializer = value_deserializer or (lambda b: b)
        self._completed: deque[CompletedFetch] = deque()
        self._next_in_line: CompletedFetch | None = None
        self._pending_nodes: set[int] = set()
        self._node_backoff_until: dict[int, int] = {}

    # Buffer ----------------------------------------------------------------

    def _buffered(self) -> list[CompletedFetch]:
        fetches = list(self._completed)
        if self._next_in_line is not None and not self._next_in_line.consumed:
            fetches.append(self._next_in_line)
        return fetches

    def buffered_partitions(self) -> set[TopicPartition]:
        return {cf.tp for cf in self._buffered()}

    def buffered_record_count(self) -> int:
        return sum(cf.estimated_remaining_records() for cf in self._buffered())

    def has_pending_fetches(self) -> bool:
        return bool(self._pending_nodes)

    def has_buffered(self) -> bool:
        return bool(self._buffered())

    def clear_buffered(self, partitions: set[TopicPartition] | None = None) -> None:
        """Drop buffered data (all, or of `partitions`), e.g. after a seek or a new assignment."""
        keep = deque(cf for cf in self._completed if partitions is not None and cf.tp not in partitions)
        self._completed = keep
        if self._next_in_line is not None and (partitions is None or self._next_in_line.tp in partitions):
            self._next_in_line.drain()
            self._next_in_line = None

    # Requests --------------------------------------------------------------

    def prepare_requests(self, now_ms: int) -> list[FetchRequest]:
        """One fetch per leader for its fetchable partitions without buffered records."""
        if self.buffered_record_count() >= self.max_poll_records:
            return []  # enough for the next poll already; fetching more would only pile up
        buffered = self.buffered_partitions()
        for tp in self.subscriptions.assigned_partitions():
            # Follow leader changes first (a position with an epoch then awaits validation instead).
            self.subscriptions.maybe_validate_position_for_current_leader(tp, self.metadata.current_leader(tp))
        requests: dict[int, FetchRequest] = {}
        for tp in self.subscriptions.fetchable_partitions(lambda tp: tp not in buffered):
            position = self.subscriptions.position(tp)
            assert position is not None
            # Route by the leader the position was checked against, which is also the epoch we send.
            node_id = position.current_leader.leader
            if node_id is None:
                self.metadata.request_update()
                continue
            if node_id in self._pending_nodes or self._node_backoff_until.get(node_id, 0) > now_ms:
                continue
            node = self.metadata.cluster.node(node_id)
            if node is None:
                self.metadata.request_update()
                continue
            request = requests.get(node_id)
            if request is None:
                request = requests[node_id] = FetchRequest(node_id, node.address, {})
            request.positions[tp] = position
        out = []
        for node_id, request in requests.items():
            entries = (
                (
                    tp,
                    {
                        "fetch_offset": position.offset,
                        "current_leader_epoch": wire_epoch(position.current_leader.epoch),
                        "last_fetched_epoch": wire_epoch(position.offset_epoch),
                        "log_start_offset": -1,
                        "partition_max_bytes": self.max_partition_fetch_bytes,
                    },
                )
                for tp, position in request.positions.items()
            )
            request.body = {
                "replica_id": CONSUMER_REPLICA_ID,
                "max_wait_ms": self.fetch_max_wait_ms,
                "min_bytes": self.fetch_min_bytes,
                "max_bytes": self.fetch_max_bytes,
                "isolation_level": self.isolation_level,
                "topics": topics_body(entries),
            }
            self._pending_nodes.add(node_id)
            out.append(request)
        return out

    def handle_response(self, request: FetchRequest, body: Mapping[str, Any], now_ms: int) -> None:
        self._pending_nodes.discard(request.node_id)
        top = _int(body.get("error_code", 0), 0)
        if top:
            self.handle_failure(request, error_from(top, str(body.get("message", ""))), now_ms)
            return
        self._node_backoff_until.pop(request.node_id, None)
        for tp, part in answered_partitions(body):
            position = request.positions.get(tp)
            if position is None:
                continue  # not something we asked for
            diverging = part.get("diverging_epoch")
            aborted = None
            if self.isolation_level == READ_COMMITTED:
                aborted = AbortedTransactionFilter(
                    (_int(a.get("producer_id")), _int(a.get("first_offset")))
                    for a in part.get("aborted_transactions") or ()
                )
            self._completed.append(
                CompletedFetch(
                    tp,
                    position.offset,
                    bytes(part.get("records") or b""),
                    error_code=error_from(_int(part.get("error_code", 0), 0)).code,
                    error_message=str(part.get("message") or ""),
                    high_watermark=_int(part.get("high_watermark")),
                    log_start_offset=_int(part.get("log_start_offset")),
                    diverging_epoch=(
                        (_int(diverging.get("epoch")), _int(diverging.get("end_offset")))
                        if isinstance(diverging, Mapping) and _int(diverging.get("epoch")) >= 0
                        else None
                    ),
                    key_deserializer=self._key_de,
                    value_deserializer=self._value_de,
                    max_partition_fetch_bytes=self.max_partition_fetch_bytes,
                    check_crcs=self.check_crcs,
                    aborted_transactions=aborted,
                )
            )

    def handle_failure(self, request: FetchRequest, error: KafkaError, now_ms: int) -> None:
        """No usable answer: look up leaders again and leave this broker alone for a backoff."""
        self._pending_nodes.discard(request.node_id)
        log.debug("fetch from node %d failed: %s", request.node_id, error)
        self.metadata.request_update()
        self._node_backoff_until[request.node_id] = now_ms + self.retry_backoff_ms

    # Collecting ------------------------------------------------------------

    def collect_fetch(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records for the application, at most `max_records` (max_poll_records by default).

        An error is raised only when no records precede it in this call; otherwise
        the records are returned and the error comes with the next call.
        """
        remaining = self.max_poll_records if max_records is None else max_records
        out: list[ConsumerRecord] = []
        paused: list[CompletedFetch] = []
        try:
            while remaining > 0:
                current = self._next_in_line
                if current is None or current.consumed:
                    if not self._completed:
                        break
                    head = self._completed[0]
                    try:
                        ready = self._initialize(head)
                    except KafkaError:
                        if not out and not head.size_in_bytes:
                            self._completed.popleft()  # nothing to retry it for; do not get stuck on it
                        raise
                    self._completed.popleft()
                    self._next_in_line = ready
                elif self.subscriptions.is_assigned(current.tp) and self.subscriptions.is_paused(current.tp):
                    # Keep a paused partition's records for after resume().
                    paused.append(current)
                    self._next_in_line = None
                else:
                    records = self._fetch_records(current, remaining)
                    out.extend(records)
                    remaining -= len(records)
                    if not records and not current.consumed:
                        break  # an error is stored for the next call
        except KafkaError:
            if not out:
                raise
        finally:
            self._completed.extend(paused)
        return out

    def _fetch_records(self, cf: CompletedFetch, max_records: int) -> list[ConsumerRecord]:
        tp = cf.tp
        if not self.subscriptions.is_assigned(tp) or not self.subscriptions.has_valid_position(tp):
            cf.drain()  # unassigned, or awaiting a reset or validation: the data is stale
            return []
        if self.subscriptions.state(tp).pending_revocation:
            cf.drain()  # being revoked: its commit covers only what was returned before (Kafka's isFetchable)
            return []
        position = self.subscriptions.position(tp)
        assert position is not None
        if cf.next_fetch_offset != position.offset:
            log.debug("ignoring fetched records for %s at %d; the position is %s", tp, cf.next_fetch_offset, position)
            cf.drain()
            return []
        try:
            records = cf.fetch_records(max_records)
        finally:
            if cf.next_fetch_offset > position.offset:
                self.subscriptions.update_position(
                    tp, FetchPosition(cf.next_fetch_offset, cf.last_epoch, position.current_leader)
                )
            if cf.last_epoch is not None:
                self.metadata.update_last_seen_epoch_if_newer(tp, cf.last_epoch)
        return records

    def _initialize(self, cf: CompletedFetch) -> CompletedFetch | None:
        """Kafka's FetchCollector.initialize: apply the partition's answer; None when it has no records for us."""
        tp = cf.tp
        if not self.subscriptions.is_assigned(tp):
            return None
        position = self.subscriptions.position(tp)
        if position is None or position.offset != cf.fetch_offset:
            log.debug("discarding a stale fetch answer for %s at %d (position %s)", tp, cf.fetch_offset, position)
            return None
        cf.initialized = True
        code = cf.error_code
        if code == ErrorCode.NONE:
            if cf.diverging_epoch is not None:
                epoch, end_offset = cf.diverging_epoch
                truncation = self.subscriptions.handle_diverging_epoch(tp, position, end_offset, epoch)
                if truncation is not None:
                    raise LogTruncationError({tp: (truncation.position.offset, truncation.divergent_offset)})
                return None
            if cf.high_watermark >= 0:
                self.subscriptions.update_high_watermark(tp, cf.high_watermark)
            if cf.log_start_offset >= 0:
                self.subscriptions.update_log_start_offset(tp, cf.log_start_offset)
            return cf
        if code in _REFRESH_ERRORS:
            log.debug("fetch of %s failed with %s; refreshing metadata", tp, code.name)
            self.metadata.request_update()
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            message = f"fetch position {position.offset} is out of range for partition {tp}"
            if self.subscriptions.has_default_reset_policy():
                log.info("%s; resetting with auto_offset_reset=%s", message, self.subscriptions.default_reset.value)
                self.subscriptions.request_offset_reset(tp)
            else:
                raise OffsetOutOfRangeError(
                    message + " and auto_offset_reset is none; seek to choose where to continue",
                    {tp: position.offset},
                )
        elif code in (ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.REQUEST_TIMED_OUT):
            log.debug("fetch of %s failed with %s; retrying", tp, code.name)  # the broker is behind; try again
        elif code == ErrorCode.CORRUPT_MESSAGE:
            raise KafkaError(f"corrupt message fetching {tp} at offset {cf.fetch_offset}", code)
        else:
            raise KafkaError(f"fetching {tp} at offset {cf.fetch_offset} failed: {cf.error_message or code.name}", code)
        return None
