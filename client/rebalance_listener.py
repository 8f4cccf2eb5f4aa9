"""ConsumerRebalanceListener: the application's hooks around a rebalance (Kafka's interface).

Design notes: docs/client.md, section "client/rebalance_listener.py".
"""

from __future__ import annotations

from collections.abc import Collection

from kraftpy.protocol.types import TopicPartition


class ConsumerRebalanceListener:
    def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> object:
        return None

    def on_partitions_assigned(self, partitions: Collection[TopicPartition]) -> object:
        return None

    def on_partitions_lost(self, partitions: Collection[TopicPartition]) -> object:
        return self.on_partitions_revoked(partitions)
