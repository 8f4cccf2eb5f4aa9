"""What the consumer's three request cores share: fetch, list_offsets, offsets_for_leader_epoch.

Each builds one request per leader broker (`prepare_requests(now_ms)`) and takes back its outcome
(`handle_response` / `handle_failure`), so the consumer shell drives all three with one piece of code.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from kraftpy.client.consumer.subscription import FetchPosition, SubscriptionState
from kraftpy.client.metadata import Address, Metadata
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class BrokerRequest:
    """One request to one broker; a subclass adds what it asks per partition."""

    node_id: int
    address: Address
    body: dict[str, Any]

    def partitions(self) -> Iterable[TopicPartition]:
        raise NotImplementedError


@dataclass
class PositionsRequest(BrokerRequest):
    """A request about the consumer's positions (a fetch, a validation)."""

    positions: dict[TopicPartition, FetchPosition] = field(default_factory=dict)

    def partitions(self) -> Iterable[TopicPartition]:
        return self.positions


R = TypeVar("R", bound=BrokerRequest)


class BrokerRequestCore(Generic[R]):
    """A consumer core that asks leaders about partitions: what the shell calls, and the common failure rule."""

    path: ClassVar[str]

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

    def prepare_requests(self, now_ms: int) -> list[R]:
        raise NotImplementedError

    def handle_response(self, request: R, body: Mapping[str, Any], now_ms: int) -> None:
        raise NotImplementedError

    def handle_failure(self, request: R, error: KafkaError, now_ms: int) -> None:
        """No usable answer: look the leaders up again and ask about these partitions after a backoff."""
        log.debug("%s to node %d failed: %s", self.path, request.node_id, error)
        self.metadata.request_update()
        self.subscriptions.set_next_allowed_retry(request.partitions(), now_ms + self.retry_backoff_ms)


def topics_body(entries: Iterable[tuple[TopicPartition, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Kafka's request layout: each partition's fields under its topic, topics in first-seen order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, fields in entries:
        topics.setdefault(tp.topic, []).append({"partition": tp.partition, **fields})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def answered_partitions(body: Mapping[str, Any]) -> Iterator[tuple[TopicPartition, Mapping[str, Any]]]:
    """Each partition entry of an answer in Kafka's layout, with the partition it names."""
    for topic in body.get("topics") or []:
        for part in topic.get("partitions") or []:
            yield TopicPartition(topic.get("name"), part.get("partition")), part


def wire_epoch(epoch: int | None) -> int:
    """An epoch as the broker takes it: an integer, -1 for unknown, never null."""
    return -1 if epoch is None else epoch
