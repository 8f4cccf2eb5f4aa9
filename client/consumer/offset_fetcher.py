"""Offset lookups with `/kafka/list_offsets` (sans-I/O), after Kafka's OffsetFetcher.

Two uses: completing resets (auto_offset_reset, seek_to_beginning/end) for
partitions awaiting one, and the application's beginning_offsets /
end_offsets / offsets_for_times. Requests go to each partition's leader with
the leader epoch we know, so a stale leader answers FENCED_LEADER_EPOCH
instead of a wrong offset. As in Kafka, a reset position carries no offset
epoch (it came from the current leader, so there is nothing to validate);
the epoch is learnt from the first batch consumed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.consumer.requests import (
    BrokerRequest,
    BrokerRequestCore,
    answered_partitions,
    topics_body,
    wire_epoch,
)
from kraftpy.client.consumer.subscription import FetchPosition, OffsetResetStrategy, SubscriptionState
from kraftpy.client.errors import error_from, invalidates_metadata, is_retriable
from kraftpy.client.metadata import Metadata
from kraftpy.client.types import OffsetAndTimestamp
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

LIST_OFFSETS_PATH = "/kafka/list_offsets"
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass
class ListOffsetsRequest(BrokerRequest):
    timestamps: dict[TopicPartition, int] = field(default_factory=dict)
    strategies: dict[TopicPartition, OffsetResetStrategy] = field(default_factory=dict)

    def partitions(self) -> Iterable[TopicPartition]:
        return self.timestamps


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    code: ErrorCode
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int | None = None
    message: str = ""


def build_list_offsets_requests(
    metadata: Metadata, timestamps: Mapping[TopicPartition, int], isolation_level: int = 0
) -> tuple[list[ListOffsetsRequest], set[TopicPartition]]:
    """Group lookups by leader; also returns the partitions whose leader is unknown.

    `isolation_level` 1 (read_committed): LATEST is the last stable offset, as the consumer can read."""
    by_node: dict[int, ListOffsetsRequest] = {}
    leaderless: set[TopicPartition] = set()
    for tp, timestamp in timestamps.items():
        leader = metadata.current_leader(tp)
        node = metadata.cluster.node(leader.leader) if leader.leader is not None else None
        if node is None:
            leaderless.add(tp)
            continue
        request = by_node.get(node.node_id)
        if request is None:
            request = by_node[node.node_id] = ListOffsetsRequest(node.node_id, node.address, {})
        request.timestamps[tp] = timestamp
    for request in by_node.values():
        entries = (
            (tp, {"current_leader_epoch": wire_epoch(metadata.current_leader(tp).epoch), "timestamp": timestamp})
            for tp, timestamp in request.timestamps.items()
        )
        request.body = {"replica_id": -1, "topics": topics_body(entries)}
        if isolation_level:
            request.body["isolation_level"] = isolation_level
    return list(by_node.values()), leaderless


def parse_list_offsets_response(body: Mapping[str, Any]) -> dict[TopicPartition, ListOffsetsResult]:
    out: dict[TopicPartition, ListOffsetsResult] = {}
    top = body.get("error_code", 0)
    for tp, part in answered_partitions(body):
        epoch = part.get("leader_epoch")
        out[tp] = ListOffsetsResult(
            code=error_from(part.get("error_code", top) or 0).code,
            offset=part.get("offset", -1) if isinstance(part.get("offset"), int) else -1,
            timestamp=part.get("timestamp", -1) if isinstance(part.get("timestamp"), int) else -1,
            leader_epoch=epoch if isinstance(epoch, int) and epoch >= 0 else None,
            message=str(part.get("message") or ""),
        )
    return out


def to_offset_and_timestamp(result: ListOffsetsResult) -> OffsetAndTimestamp | None:
    """None when the broker has no record at or after the timestamp (offset -1)."""
    if result.offset < 0:
        return None
    return OffsetAndTimestamp(result.offset, result.timestamp, result.leader_epoch)


class OffsetFetcher(BrokerRequestCore[ListOffsetsRequest]):
    """Completes pending offset resets for a SubscriptionState."""

    path = LIST_OFFSETS_PATH

    def __init__(
        self, subscriptions: SubscriptionState, metadata: Metadata, *, isolation_level: int = 0, **timing_ms: int
    ) -> None:
        super().__init__(subscriptions, metadata, **timing_ms)
        self.isolation_level = isolation_level
        self.error: KafkaError | None = None  # raised to the application at its next poll

    def prepare_requests(self, now_ms: int) -> list[ListOffsetsRequest]:
        wanted: dict[TopicPartition, int] = {}
        strategies: dict[TopicPartition, OffsetResetStrategy] = {}
        for tp in self.subscriptions.partitions_needing_reset(now_ms):
            strategy = self.subscriptions.reset_strategy(tp)
            if strategy is None or strategy is OffsetResetStrategy.NONE:
                continue
            wanted[tp] = strategy.timestamp
            strategies[tp] = strategy
        if not wanted:
            return []
        requests, leaderless = build_list_offsets_requests(self.metadata, wanted, self.isolation_level)
        if leaderless:
            self.metadata.request_update()
        for request in requests:
            request.strategies = {tp: strategies[tp] for tp in request.timestamps}
            # While the lookup runs, do not start another for the same partitions.
            self.subscriptions.set_next_allowed_retry(request.timestamps, now_ms + self.request_timeout_ms)
        return requests

    def handle_response(self, request: ListOffsetsRequest, body: Mapping[str, Any], now_ms: int) -> None:
        results = parse_list_offsets_response(body)
        retry: list[TopicPartition] = []
        for tp, strategy in request.strategies.items():
            result = results.get(tp)
            if result is None:
                retry.append(tp)
                continue
            if result.code == ErrorCode.NONE:
                leader = self.metadata.current_leader(tp)
                if result.leader_epoch is not None:
                    self.metadata.update_last_seen_epoch_if_newer(tp, result.leader_epoch)
                # No offset epoch (as Kafka): the offset came from this leader just now, nothing to validate.
                position = FetchPosition(result.offset, None, leader)
                if self.subscriptions.maybe_seek_unvalidated(tp, position, strategy):
                    log.info("reset the position of %s to %d (%s)", tp, result.offset, strategy.value)
            elif invalidates_metadata(result.code) or is_retriable(result.code):
                self.metadata.request_update()
                retry.append(tp)
            else:
                self.error = KafkaError(
                    f"cannot look up the {strategy.value} offset of {tp}: {result.message or result.code.name}",
                    result.code,
                )
        if retry:
            self.subscriptions.set_next_allowed_retry(retry, now_ms + self.retry_backoff_ms)

    def take_error(self) -> KafkaError | None:
        error, self.error = self.error, None
        return error
