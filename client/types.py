"""The values clients hand to applications: partitions, records, acknowledgements.

Names and fields follow Kafka's Java client (TopicPartition, ProducerRecord,
RecordMetadata, ConsumerRecord, OffsetAndTimestamp) in snake_case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kraftpy.protocol.types import TopicPartition, as_topic_partition  # noqa: F401 (client API)

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """What the application sends, before interceptors, serializers and the partitioner see it."""

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | None]] | None = None
    timestamp_ms: int | None = None


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed.

    offset is -1 when it is unknown: with acks=0, for a duplicate the broker
    could not map back to its offset, or when the record failed. timestamp is
    the broker's log-append time when the topic uses it, else the create time.
    (A NamedTuple: one is built per record acknowledged, and a frozen dataclass
    costs several times as much to build.)
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def has_offset(self) -> bool:
        return self.offset >= 0


# Kafka's Callback.onCompletion(metadata, exception): exactly one of them is meaningful.
DeliveryCallback = Callable[[RecordMetadata, BaseException | None], None]


class ConsumerRecord(NamedTuple):
    """A record as the consumer returns it, keys and values already deserialized.

    (A NamedTuple: one is built per record consumed.)
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Headers = ()
    leader_epoch: int | None = None
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An answer of list_offsets: the offset, its record's timestamp and the leader epoch it was written in."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None
