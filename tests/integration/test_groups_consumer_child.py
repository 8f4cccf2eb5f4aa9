"""A group member in its own process, for tests that SIGKILL a consumer (no tests here).

    python -m tests.integration.test_groups_consumer_child BOOTSTRAP GROUP TOPIC COMMIT_EVERY

A SyncConsumer (auto-commit off) subscribes to TOPIC and prints one JSON line per event, flushed at once, so
the parent knows exactly what happened before the kill:

    {"assigned": [[topic, partition], ...]}     after each rebalance (eager: the whole assignment)
    {"processed": [partition, offset]}          a record was handled
    {"committed": {partition: next_offset}}     a commit of what was handled returned (COMMIT_EVERY > 0)

It runs until killed; the parent stops it by its pid.
"""

from __future__ import annotations

import json
import sys

from kraftpy.client import ConsumerRebalanceListener, OffsetAndMetadata, SyncConsumer

SESSION_TIMEOUT_MS = 6_000  # the broker's minimum: the shortest wait for a dead member to be removed
HEARTBEAT_INTERVAL_MS = 500


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class PrintAssignment(ConsumerRebalanceListener):
    def __init__(self, consumer: SyncConsumer) -> None:
        self.consumer = consumer

    def on_partitions_assigned(self, partitions):
        emit({"assigned": sorted([tp.topic, tp.partition] for tp in self.consumer.assignment())})


def main(bootstrap: str, group: str, topic: str, commit_every: int) -> None:
    consumer = SyncConsumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        max_poll_records=5,
    )
    consumer.subscribe([topic], listener=PrintAssignment(consumer))
    handled = {}
    since_commit = 0
    while True:
        for record in consumer.poll(100):
            emit({"processed": [record.partition, record.offset]})
            handled[record.topic_partition] = record.offset + 1
            since_commit += 1
            if commit_every and since_commit >= commit_every:
                consumer.commit({tp: OffsetAndMetadata(offset) for tp, offset in handled.items()})
                emit({"committed": {tp.partition: offset for tp, offset in handled.items()}})
                since_commit = 0


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
