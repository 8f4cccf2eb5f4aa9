"""Truncation detection (KIP-320) with `/kafka/offsets_for_leader_epoch` (sans-I/O).

The consumer remembers, with its position, the leader epoch of the last
record it consumed. When the partition's leader changes, the new leader may
have truncated records the old one had served (an unclean election, or a
follower that was ahead of the HW). Before fetching again we ask the new
leader where the epoch of our position ends. If it ends below our position,
the log diverged there: SubscriptionState decides (reset to the divergence
point when auto_offset_reset is set, else report a LogTruncation that the
consumer raises as LogTruncationError).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.consumer.subscription import FetchPosition, LogTruncation, SubscriptionState
from kraftpy.client.errors import error_from
from kraftpy.client.metadata import Address, Metadata
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_FOR_LEADER_EPOCH_PATH = "/kafka/offsets_for_leader_epoch"


@dataclass
class ValidationRequest:
    node_id: int
    address: Address
    body: dict[str, Any]
    positions: dict[TopicPartition, FetchPosition] = field(default_factory=dict)


class PositionValidator:
    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata: Metadata,
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
    ) -> None:
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.truncations: list[LogTruncation] = []
        self.error: KafkaError | None = None

    def prepare_requests(self, now: float) -> list[ValidationRequest]:
        """Mark positions whose leader changed, then one request per leader for those awaiting validation."""
        for tp in self.subscriptions.assigned_partitions():
            self.subscriptions.maybe_validate_position_for_current_leader(tp, self.metadata.current_leader(tp))
        by_node: dict[int, ValidationRequest] = {}
        for tp in self.subscriptions.partitions_needing_validation(now):
            position = self.subscriptions.position(tp)
            leader = position.current_leader if position is not None else None
            node = self.metadata.cluster.node(leader.leader) if leader and leader.leader is not None else None
            if position is None or node is None:
                self.metadata.request_update()
                continue
            request = by_node.get(node.node_id)
            if request is None:
                request = by_node[node.node_id] = ValidationRequest(node.node_id, node.address, {})
            request.positions[tp] = position
        for request in by_node.values():
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, position in request.positions.items():
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition": tp.partition,
                        # The broker wants integers (-1: unknown), never null.
                        "current_leader_epoch": _epoch(position.current_leader.epoch),
                        "leader_epoch": _epoch(position.offset_epoch),
                    }
                )
            request.body = {"topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
            self.subscriptions.set_next_allowed_retry(request.positions, now + self.request_timeout_ms)
        return list(by_node.values())

    def handle_response(self, request: ValidationRequest, body: Mapping[str, Any], now: float) -> None:
        answers: dict[TopicPartition, Mapping[str, Any]] = {}
        for topic in body.get("topics") or []:
            for part in topic.get("partitions") or []:
                answers[TopicPartition(topic.get("name"), part.get("partition"))] = part
        retry = []
        for tp, position in request.positions.items():
            part = answers.get(tp)
            if part is None:
                retry.append(tp)
                continue
            code = error_from(part.get("error_code", 0) or 0).code
            if code == ErrorCode.NONE:
                end_offset = part.get("end_offset", -1)
                epoch = part.get("leader_epoch", -1)
                truncation = self.subscriptions.maybe_complete_validation(
                    tp,
                    position,
                    end_offset if isinstance(end_offset, int) else -1,
                    epoch if isinstance(epoch, int) else -1,
                )
                if truncation is not None:
                    self.truncations.append(truncation)
            elif code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                self.error = KafkaError(f"not authorized to validate the position of {tp}", code)
            else:
                # FENCED/UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, ...: our view or the broker's is behind.
                log.debug("validating %s failed with %s; retrying after a metadata refresh", tp, code.name)
                self.metadata.request_update()
                retry.append(tp)
        if retry:
            self.subscriptions.set_next_allowed_retry(retry, now + self.retry_backoff_ms)

    def handle_failure(self, request: ValidationRequest, error: KafkaError, now: float) -> None:
        log.debug("offsets_for_leader_epoch to node %d failed: %s", request.node_id, error)
        self.metadata.request_update()
        self.subscriptions.set_next_allowed_retry(request.positions, now + self.retry_backoff_ms)

    def take_truncations(self) -> list[LogTruncation]:
        found, self.truncations = self.truncations, []
        return found


def _epoch(epoch: int | None) -> int:
    return -1 if epoch is None else epoch
