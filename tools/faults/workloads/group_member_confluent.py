"""One consumer-group member of the `groups` workload through librdkafka (confluent-kafka): group_member.py's twin.

    python -m kraftpy.tools.faults.workloads.group_member_confluent BOOTSTRAP TOPIC GROUP

The same protocol as group_member.py (`--client confluent` picks this one): subscribe (eager `range`),
poll, commit synchronously what each poll returned, one JSON line per operation on stdout (each
assignment with the member id and generation, each poll, each commit with its generation; a commit
that does not succeed is `info`); SIGTERM closes the consumer (LeaveGroup), SIGUSR1 stops the member
(SIGSTOP) at its next commit after writing its `stalled` line. Every librdkafka call here blocks for a
bounded time (a poll 0.2 s for its first record, none for what is already fetched; commits and the
close bounded by librdkafka's socket timeout).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from kraftpy.tools.faults.workloads.clients import consume_ready
from kraftpy.tools.faults.workloads.group_member import (
    COMMIT_TIMEOUT_MS,
    HEARTBEAT_INTERVAL_MS,
    MAX_POLL_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    emit,
    emit_stalled,
)

POLL_TIMEOUT_S = 0.2
MAX_RECORDS = 50
LOG_LEVEL = 2  # only critical lines: every fault makes librdkafka log connection errors
# librdkafka's serialized group metadata (rd_kafka_consumer_group_metadata_write): this magic, then the
# generation id as an int32 in the host's byte order, then the group and member ids.
CGMD_MAGIC = b"CGMDv2:"


def generation_of(serialized: bytes) -> int:
    """The generation id in librdkafka's serialized consumer group metadata; -1 if it is not that format."""
    end = len(CGMD_MAGIC) + 4
    if not serialized.startswith(CGMD_MAGIC) or len(serialized) < end:
        return -1
    return int.from_bytes(serialized[len(CGMD_MAGIC) : end], sys.byteorder, signed=True)


def member(bootstrap: str, topic: str, group: str) -> None:
    import confluent_kafka as ck

    flags = {"stop": False, "stall": False}
    signal.signal(signal.SIGTERM, lambda *_: flags.update(stop=True))
    signal.signal(signal.SIGUSR1, lambda *_: flags.update(stall=True))
    assigned: list[dict[str, Any]] = []  # written after the poll that ran the callback completes

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        generation = generation_of(consumer.consumer_group_metadata())
        owned = sorted(tp.partition for tp in partitions)
        assigned.append({"value": owned, "member": consumer.memberid(), "generation": generation})

    def flush() -> None:
        for fields in assigned:
            emit("invoke", "assign", **fields)
            emit("ok", "assign", **fields)
        assigned.clear()

    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS, "fetch.wait.max.ms": 100,
        "socket.timeout.ms": COMMIT_TIMEOUT_MS, "topic.metadata.refresh.interval.ms": 2_000, "log_level": LOG_LEVEL,
    })  # fmt: skip
    try:
        consumer.subscribe([topic], on_assign=on_assign)
        parent = os.getppid()
        while not flags["stop"] and os.getppid() == parent:  # a killed run leaves no member polling
            emit("invoke", "poll")
            try:
                messages = consume_ready(consumer, MAX_RECORDS, POLL_TIMEOUT_S)
            except ck.KafkaException as exc:  # a fault may fail a poll; the member carries on
                emit("info", "poll", error=repr(exc)[:200])
                flush()
                continue
            records = [m for m in messages if m.error() is None]
            generation = generation_of(consumer.consumer_group_metadata())
            emit(
                "ok",
                "poll",
                value=[[m.partition(), m.offset(), m.value().decode()] for m in records],
                generation=generation,
            )
            flush()
            upto: dict[int, int] = {}
            for m in records:
                upto[m.partition()] = max(upto.get(m.partition(), 0), m.offset() + 1)
            if not upto:
                continue
            offsets = sorted(upto.items())
            if flags["stall"]:
                flags["stall"] = False
                emit_stalled(offsets, generation)
            emit("invoke", "commit", value=offsets, generation=generation)
            try:
                consumer.commit(offsets=[ck.TopicPartition(topic, p, o) for p, o in offsets], asynchronous=False)
            except ck.KafkaException as exc:  # rejected (a rebalance) or unknown: either way not proven applied
                # librdkafka's own errors (refused unsent, timed out) have negative codes: not the coordinator's
                local = exc.args[0].code() < 0
                emit("info", "commit", value=offsets, generation=generation, error=repr(exc)[:200], local=local)
            else:
                emit("ok", "commit", value=offsets, generation=generation)
    finally:
        consumer.close()


def main(argv: list[str]) -> int:
    bootstrap, topic, group = argv
    print(f"member of {group} on {bootstrap} (librdkafka): started", file=sys.stderr, flush=True)
    member(bootstrap, topic, group)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
