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
# KRaft's metadata log: a Raft log, never a topic; Kafka refuses to create a topic of that name.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def refuses_client_writes(topic: str) -> bool:
    """Whether a client's produce to `topic` is refused: only the brokers' own coordinators write there."""
    return topic in INTERNAL_TOPICS or topic == CLUSTER_METADATA_TOPIC
