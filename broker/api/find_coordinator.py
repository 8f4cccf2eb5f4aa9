"""FindCoordinator: which broker coordinates a group (key_type 0) or a transactional id (1).

Any broker answers, from its metadata image: the coordinator of group G is the leader of
`__consumer_offsets` partition `partition_for(G)`; of transactional id T the leader of
`__transaction_state` partition `partition_for(T)` (the same hash). Answers (docs/protocol.md, "Groups"):

- `{node_id, host, port}` of that leader;
- COORDINATOR_NOT_AVAILABLE while the topic does not exist yet (this call starts its creation, see
  offsets_topic.py), or the partition has no leader or its leader no known listener: the client
  retries after its backoff;
- INVALID_REQUEST for a malformed body or a key_type other than 0 and 1.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.groups.records import partition_for
from kraftpy.broker.shell.offsets_topic import InternalTopicCreator, OffsetsTopicCreator
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from kraftpy.protocol.validate import field, invalid

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def not_available(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def find_coordinator(
    image: MetadataImage, group_id: str, num_partitions: int, topic_name: str = OFFSETS_TOPIC
) -> dict[str, Any]:
    """The answer for `group_id` (or a transactional id on `topic_name`) from `image`, or the
    COORDINATOR_NOT_AVAILABLE KafkaError (pure)."""
    topic = image.topic(topic_name)
    if topic is None:
        raise not_available(f"{topic_name} does not exist yet; it is being created")
    partition = partition_for(group_id, num_partitions)
    if partition >= len(topic.partitions):
        raise not_available(
            f"{topic_name} has {len(topic.partitions)} partitions, the num_partitions setting is "
            f"{num_partitions}: the setting must match the topic"
        )
    leader = topic.partitions[partition].leader
    if leader == NO_LEADER:
        raise not_available(f"{topic_name}-{partition} has no leader")
    broker = image.broker(leader)
    if broker is None or not broker.listeners:
        raise not_available(f"the leader {leader} of {topic_name}-{partition} has no known address")
    listener = broker.listeners[0]
    return {"error_code": 0, "node_id": leader, "host": listener.host, "port": listener.port}


class FindCoordinatorHandler:
    def __init__(self, image_provider: Any, creator: OffsetsTopicCreator, num_partitions: int, max_key_length: int):
        self.image = image_provider
        self.creator = creator
        self.num_partitions = num_partitions
        self.max_key_length = max_key_length
        # (the __transaction_state creator, its partition count), set by the broker that has a
        # transaction coordinator; without it key_type 1 is refused.
        self.transactions: tuple[InternalTopicCreator, int] | None = None

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        key = field(body, "key", str, max_len=self.max_key_length)
        key_type = field(body, "key_type", int, default=KEY_TYPE_GROUP)
        image = self.image()
        if key_type == KEY_TYPE_TRANSACTION and self.transactions is not None:
            creator, num_partitions = self.transactions
            if image.topic(TRANSACTION_STATE_TOPIC) is None:
                creator.ensure_created()
            return find_coordinator(image, key, num_partitions, TRANSACTION_STATE_TOPIC)
        if key_type != KEY_TYPE_GROUP:
            raise invalid(f"key_type must be 0 (group) or 1 (transaction), got {key_type}")
        if image.topic(OFFSETS_TOPIC) is None:
            self.creator.ensure_created()
        return find_coordinator(image, key, self.num_partitions)
