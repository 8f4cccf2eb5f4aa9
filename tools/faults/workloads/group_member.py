"""One consumer-group member of the `groups` workload, as a process of its own so it can be killed.

    python -m kraftpy.tools.faults.workloads.group_member BOOTSTRAP TOPIC GROUP

Subscribes, then polls and commits (synchronously, what it polled) until SIGTERM, when it leaves the
group. On SIGUSR1 it stops itself (SIGSTOP) after its next poll, before the commit, as a long GC pause
would; woken after the group moved on, its first act is a commit in its old generation, which only the
coordinator can fence. Every operation is a JSON line on stdout, which groups.py writes into the history
under this member's process number (assignments with member id and generation, polls, commits with their
generation); a commit that does not succeed is `info` (it may have been applied). Docs: docs/jepsen.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Collection
from typing import Any

from kraftpy.client import Consumer, TopicPartition
from kraftpy.client.group.errors import LOCAL_COMMIT_REFUSALS
from kraftpy.client.rebalance_listener import ConsumerRebalanceListener
from kraftpy.protocol.errors import KafkaError

SESSION_TIMEOUT_MS = 6_000  # the brokers' group_min_session_timeout_ms: a crash is noticed soon
HEARTBEAT_INTERVAL_MS = 1_000
# Also the rebalance timeout. Above the longest stall (groups.STALL_MAX_S): a member past it leaves the group
# on waking, as Kafka's clients do, and would never commit as a zombie.
MAX_POLL_INTERVAL_MS = 30_000
COMMIT_TIMEOUT_MS = 5_000


def emit(type_: str, f: str, **fields: Any) -> None:
    print(json.dumps({"type": type_, "f": f, **fields}), flush=True)


def emit_stalled(offsets: list[tuple[int, int]], generation: int) -> None:
    """Say where this member stops (not an operation), then stop it until the run sends SIGCONT."""
    print(json.dumps({"f": "stalled", "value": offsets, "generation": generation}), flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


class _Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.pending: list[dict[str, Any]] = []  # written after the poll that ran the listener completes

    def flush(self) -> None:
        for fields in self.pending:
            emit("invoke", "assign", **fields)
            emit("ok", "assign", **fields)
        self.pending.clear()

    def on_partitions_assigned(self, partitions: Collection[TopicPartition]) -> None:
        assert self.consumer is not None
        meta = self.consumer.group_metadata()
        owned = sorted(tp.partition for tp in self.consumer.assignment())
        self.pending.append({"value": owned, "member": meta.member_id, "generation": meta.generation_id})


async def member(bootstrap: str, topic: str, group: str) -> None:
    stop, stall = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, stall.set)
    recorder = _Recorder()
    consumer = Consumer(
        bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS, fetch_max_wait_ms=100, request_timeout_ms=3_000,
        default_api_timeout_ms=COMMIT_TIMEOUT_MS, metadata_max_age_ms=2_000,
    )  # fmt: skip
    recorder.consumer = consumer
    try:
        consumer.subscribe([topic], listener=recorder)
        parent = os.getppid()
        while not stop.is_set() and os.getppid() == parent:  # a killed run leaves no member polling
            emit("invoke", "poll")
            try:
                records = await consumer.poll(timeout_ms=200, max_records=50)
            except Exception as exc:  # a fault may fail a poll; the member carries on
                emit("info", "poll", error=repr(exc)[:200])
                recorder.flush()
                await asyncio.sleep(0.1)
                continue
            generation = consumer.group_metadata().generation_id
            emit(
                "ok", "poll", value=[[r.partition, r.offset, r.value.decode()] for r in records], generation=generation
            )
            recorder.flush()
            upto: dict[int, int] = {}
            for r in records:
                upto[r.partition] = max(upto.get(r.partition, 0), r.offset + 1)
            if not upto:
                continue
            offsets = sorted(upto.items())
            if stall.is_set():
                stall.clear()
                emit_stalled(offsets, generation)
            emit("invoke", "commit", value=offsets, generation=generation)
            try:
                await consumer.commit({TopicPartition(topic, p): o for p, o in offsets}, COMMIT_TIMEOUT_MS)
            except Exception as exc:  # rejected (a rebalance) or unknown: either way not proven applied
                # Refused by the client itself, unsent: groups.py owes one more stall for such a zombie
                local = isinstance(exc, KafkaError) and exc.message in LOCAL_COMMIT_REFUSALS
                emit("info", "commit", value=offsets, generation=generation, error=repr(exc)[:200], local=local)
            else:
                emit("ok", "commit", value=offsets, generation=generation)
    finally:
        await consumer.close(timeout_ms=COMMIT_TIMEOUT_MS)


def main(argv: list[str]) -> int:
    bootstrap, topic, group = argv
    # The client's own log (joins, rebalances, coordinator moves) goes to the member's log file: a post-mortem.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"member of {group} on {bootstrap}: started", file=sys.stderr, flush=True)
    asyncio.run(member(bootstrap, topic, group))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
