"""Kafka's internal topics: their names, shared by brokers (metadata answers), clients and tools.

Kafka's `Topic.INTERNAL_TOPICS`: pattern subscriptions skip them (`exclude_internal_topics`), metadata
answers flag them `is_internal`, and the topics tool refuses to delete them or change their partition
count (a group's coordinator is `hash(group) % partitions` of `__consumer_offsets`, so a new count
would move every group away from its committed offsets).
"""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS
