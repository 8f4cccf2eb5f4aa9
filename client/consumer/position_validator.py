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
from typing import Any

from kraftpy.client.consumer.requests import (
    BrokerRequestCore,
    PositionsRequest,
    answered_partitions,
    topics_body,
    wire_epoch,
)
from kraftpy.client.consumer.subscription import LogTruncation, SubscriptionState
from kraftpy.client.errors import error_from
from kraftpy.client.metadata import Metadata
from kraftpy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OFFSETS_FOR_LEADER_EPOCH_PATH = "/kafka/offsets_for_leader_epoch"


class ValidationRequest(PositionsRequest):
    """One `/kafka/offsets_for_leader_epoch` to a leader, for the positions awaiting validation."""


class PositionValidator(BrokerRequestCore[ValidationRequest]):
    path = OFFSETS_FOR_LEADER_EPOCH_PATH

    def __init__(self, subscriptions: SubscriptionState, metadata: Metadata, **timing_ms: int) -> None:
        super().__init__(subscriptions, metadata, **timing_ms)
        self.truncations: list[LogTruncation] = []
        self.error: KafkaError | None = None

    def prepare_requests(self, now_ms: int) -> list[ValidationRequest]:
        """Mark positions whose leader changed, then one request per leader for those awaiting validation."""
        for tp in self.subscriptions.assigned_partitions():
            self.subscriptions.maybe_validate_position_for_current_leader(tp, self.metadata.current_leader(tp))
        by_node: dict[int, ValidationRequest] = {}
        for tp in self.subscriptions.partitions_needing_validation(now_ms):
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
            entries = (
                (
                    tp,
                    {
                        "current_leader_epoch": wire_epoch(p.current_leader.epoch),
                        "leader_epoch": wire_epoch(p.offset_epoch),
                    },
                )
                for tp, p in request.positions.items()
            )
            request.body = {"topics": topics_body(entries)}
            self.subscriptions.set_next_allowed_retry(request.positions, now_ms + self.request_timeout_ms)
        return list(by_node.values())

    def handle_response(self, request: ValidationRequest, body: Mapping[str, Any], now_ms: int) -> None:
        answers = dict(answered_partitions(body))
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
            self.subscriptions.set_next_allowed_retry(retry, now_ms + self.retry_backoff_ms)

    def take_truncations(self) -> list[LogTruncation]:
        found, self.truncations = self.truncations, []
        return found
