"""ConsumerRebalanceListener: the application's hooks around a rebalance (Kafka's interface).

    on_partitions_revoked(partitions)   before the consumer gives partitions up: the last moment to
                                        commit what was processed from them. Eager: at the start of
                                        every rebalance, with everything (maybe nothing). Cooperative:
                                        only for partitions that move, and only if there are any.
    on_partitions_assigned(partitions)  after the rebalance, with the partitions newly added (eager:
                                        all of them), before fetching from them: the place to seek.
                                        Called after every rebalance, even with nothing new.
    on_partitions_lost(partitions)      the consumer was dropped from the group (session timeout,
                                        fenced generation): the partitions may already be someone
                                        else's, so do not commit them. Defaults to on_partitions_revoked
                                        (as Kafka's default method does).

Methods may be plain functions or coroutines; the asyncio consumer awaits the latter. They run
inside poll() (or close()/unsubscribe()), on the application's side, and may call the
consumer (commit, seek, position).
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
