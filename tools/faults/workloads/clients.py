"""The workloads' clients: one process's producer and consumer, through kraftpy's client or librdkafka.

Both adapters offer the same async calls (send, poll, the transaction calls, positions, end offsets,
close), each bounded in time. confluent-kafka's calls block, so they run in a thread (asyncio.to_thread)
with librdkafka's own timeout below our bound. Errors are left to the caller, which asks `definite()`
whether an error proves the operation did not happen.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from kraftpy.client.rebalance_listener import ConsumerRebalanceListener
from kraftpy.tools.faults.workload import indeterminate

CALL_TIMEOUT_S = 10.0  # one client call; librdkafka and kraftpy get a little less, so ours is the outer bound
INNER_TIMEOUT_S = 8.0
POLL_TIMEOUT_S = 0.3
TXN_TIMEOUT_MS = 10_000  # an abandoned transaction holds back read_committed readers at most this long
SESSION_TIMEOUT_MS = 6_000
LOG_LEVEL = 2  # librdkafka's syslog level: only critical lines; every fault makes it log connection errors


class RebalanceCount:
    """How many times a rebalance moved this consumer's partitions (revoked, lost or newly assigned).

    A consumer resumes a partition it gets back from the group's committed offset, so a transaction
    whose polls span a rebalance may read records twice: the runner aborts it, as a
    consume-transform-produce application does when its partitions move (Kafka's EOS pattern)."""

    def __init__(self) -> None:
        self.count = 0

    def moved(self, partitions: Any) -> None:
        if partitions:  # cooperative rebalances also report an empty change: nothing moved
            self.count += 1


@dataclass(frozen=True)
class ClientSpec:
    bootstrap: str
    topic: str
    keys: int
    sub_via: str  # assign | subscribe
    transactional: bool
    group_id: str


class KraftpyClient:
    """kraftpy.client's Producer and Consumer (asyncio)."""

    def __init__(self, spec: ClientSpec, worker: int, process: int) -> None:
        from kraftpy.client import Consumer, Producer

        self.spec = spec
        producer: dict[str, Any] = {
            "acks": "all", "enable_idempotence": True, "linger_ms": 1, "request_timeout_ms": 2_000,
            "delivery_timeout_ms": int(INNER_TIMEOUT_S * 1000), "max_block_ms": int(INNER_TIMEOUT_S * 1000),
            "metadata_max_age_ms": 2_000,
        }  # fmt: skip
        if spec.transactional:  # per worker: a fresh process fences its predecessor and aborts its open txn
            producer.update(transactional_id=f"{spec.group_id}-{worker}", transaction_timeout_ms=TXN_TIMEOUT_MS)
        self.producer = Producer(spec.bootstrap, **producer)
        consumer: dict[str, Any] = {
            "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100, "enable_auto_commit": False,
            "request_timeout_ms": 5_000,
            "isolation_level": "read_committed" if spec.transactional else "read_uncommitted",
        }  # fmt: skip
        if spec.sub_via == "subscribe":
            consumer.update(group_id=spec.group_id, session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1_000)
        self.consumer = Consumer(spec.bootstrap, **consumer)
        self.rebalances = RebalanceCount()

    def _tp(self, key: int) -> Any:
        from kraftpy.client import TopicPartition

        return TopicPartition(self.spec.topic, key)

    async def open(self) -> list[int]:
        if self.spec.transactional:
            await asyncio.wait_for(self.producer.init_transactions(), CALL_TIMEOUT_S)
        else:
            await asyncio.wait_for(self.producer.start(), CALL_TIMEOUT_S)
        if self.spec.sub_via == "subscribe":
            self.consumer.subscribe([self.spec.topic], listener=_CountingListener(self.rebalances))
        else:
            self.consumer.assign([self._tp(k) for k in range(self.spec.keys)])
        return list(range(self.spec.keys))

    async def send(self, key: int, value: str) -> int:
        future = await asyncio.wait_for(
            self.producer.send(self.spec.topic, value.encode(), partition=key), CALL_TIMEOUT_S
        )
        return (await asyncio.wait_for(future, CALL_TIMEOUT_S)).offset

    async def poll(self) -> list[tuple[int, int, str]]:
        records = await asyncio.wait_for(self.consumer.poll(timeout_ms=POLL_TIMEOUT_S * 1000), CALL_TIMEOUT_S)
        return [(r.partition, r.offset, r.value.decode()) for r in records]

    async def commit_positions(self) -> None:
        await asyncio.wait_for(self.consumer.commit(timeout_ms=int(INNER_TIMEOUT_S * 1000)), CALL_TIMEOUT_S)

    def begin(self) -> None:
        self.producer.begin_transaction()

    async def send_offsets(self, offsets: dict[int, int]) -> None:
        tps = {self._tp(k): o for k, o in offsets.items()}
        await asyncio.wait_for(
            self.producer.send_offsets_to_transaction(tps, self.consumer.group_metadata()), CALL_TIMEOUT_S
        )

    async def commit(self) -> None:
        await asyncio.wait_for(self.producer.commit_transaction(), CALL_TIMEOUT_S)

    async def abort(self) -> None:
        await asyncio.wait_for(self.producer.abort_transaction(), CALL_TIMEOUT_S)

    def seek(self, offsets: dict[int, int]) -> None:
        for key, offset in offsets.items():
            self.consumer.seek(self._tp(key), offset)

    def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    async def position(self, key: int) -> int:
        return await asyncio.wait_for(self.consumer.position(self._tp(key)), CALL_TIMEOUT_S)

    async def end_offsets(self) -> dict[int, int]:
        tps = [self._tp(k) for k in range(self.spec.keys)]
        ends = await asyncio.wait_for(self.consumer.end_offsets(tps), CALL_TIMEOUT_S)
        return {tp.partition: o for tp, o in ends.items()}

    def fatal(self, exc: BaseException) -> bool:
        """A send error no fault explains (a client bug, a definite error): it fails the run (exit 2)."""
        return not indeterminate(exc)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.consumer.close(timeout_ms=2_000), CALL_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.producer.close(timeout_ms=2_000), CALL_TIMEOUT_S)


class _CountingListener(ConsumerRebalanceListener):
    def __init__(self, count: RebalanceCount) -> None:
        self.count = count

    def on_partitions_revoked(self, partitions: Any) -> None:
        self.count.moved(partitions)

    def on_partitions_assigned(self, partitions: Any) -> None:
        self.count.moved(partitions)

    def on_partitions_lost(self, partitions: Any) -> None:
        self.count.moved(partitions)


def consume_ready(consumer: Any, max_records: int, timeout_s: float) -> list[Any]:
    """Up to `max_records` messages: waits at most `timeout_s` for the first, then takes what is already fetched.

    Java's `poll` (and kraftpy's) returns as soon as a record is there. confluent-kafka's `consume(n, t)`
    returns only with n messages or after t: five waiting records came back after the whole timeout
    (2026-11-28), so a workload polling through it did a poll per timeout and a few ops per second."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]


class ConfluentClient:
    """confluent-kafka (librdkafka): every blocking call in a thread, bounded by librdkafka's timeout."""

    def __init__(self, spec: ClientSpec, worker: int, process: int) -> None:
        import confluent_kafka as ck

        self.ck = ck
        self.spec = spec
        producer: dict[str, Any] = {
            "bootstrap.servers": spec.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1,
            "request.timeout.ms": 2_000, "message.timeout.ms": int(INNER_TIMEOUT_S * 1000),
            "topic.metadata.refresh.interval.ms": 2_000, "log_level": LOG_LEVEL,
        }  # fmt: skip
        if spec.transactional:
            producer.update({"transactional.id": f"{spec.group_id}-{worker}", "transaction.timeout.ms": TXN_TIMEOUT_MS})
        self.producer = ck.Producer(producer)
        group = spec.group_id if spec.sub_via == "subscribe" else f"{spec.group_id}-assign-{process}"
        self.consumer = ck.Consumer({
            "bootstrap.servers": spec.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1_000, "log_level": LOG_LEVEL,
            "isolation.level": "read_committed" if spec.transactional else "read_uncommitted",
        })  # fmt: skip
        self.rebalances = RebalanceCount()

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), CALL_TIMEOUT_S + 2)

    def _tp(self, key: int, offset: int | None = None) -> Any:
        if offset is None:
            return self.ck.TopicPartition(self.spec.topic, key)
        return self.ck.TopicPartition(self.spec.topic, key, offset)

    async def open(self) -> list[int]:
        if self.spec.transactional:
            await self._call(self.producer.init_transactions, INNER_TIMEOUT_S)
        if self.spec.sub_via == "subscribe":
            moved = self.rebalances.moved
            self.consumer.subscribe(
                [self.spec.topic],
                on_assign=lambda _c, ps: moved(ps),
                on_revoke=lambda _c, ps: moved(ps),
                on_lost=lambda _c, ps: moved(ps),
            )
        else:
            self.consumer.assign([self._tp(k, self.ck.OFFSET_BEGINNING) for k in range(self.spec.keys)])
        return list(range(self.spec.keys))

    async def send(self, key: int, value: str) -> int:
        delivered: list[Any] = []

        def send() -> int:
            self.producer.produce(
                self.spec.topic, value.encode(), partition=key, on_delivery=lambda e, m: delivered.append((e, m))
            )
            if self.producer.flush(INNER_TIMEOUT_S + 1) or not delivered:
                raise TimeoutError(f"send of {value} not delivered within {INNER_TIMEOUT_S + 1} s")
            error, message = delivered[0]
            if error is not None:
                raise self.ck.KafkaException(error)
            return message.offset()

        return await self._call(send)

    async def poll(self) -> list[tuple[int, int, str]]:
        messages = await self._call(consume_ready, self.consumer, 100, POLL_TIMEOUT_S)
        out = []
        for m in messages:
            if m.error() is not None:
                if m.error().code() == self.ck.KafkaError._PARTITION_EOF:
                    continue
                raise self.ck.KafkaException(m.error())
            out.append((m.partition(), m.offset(), m.value().decode()))
        return out

    async def commit_positions(self) -> None:
        await self._call(lambda: self.consumer.commit(asynchronous=False))

    def begin(self) -> None:
        self.producer.begin_transaction()

    async def send_offsets(self, offsets: dict[int, int]) -> None:
        tps = [self._tp(k, o) for k, o in offsets.items()]
        await self._call(
            self.producer.send_offsets_to_transaction, tps, self.consumer.consumer_group_metadata(), INNER_TIMEOUT_S
        )

    async def commit(self) -> None:
        await self._call(self.producer.commit_transaction, INNER_TIMEOUT_S)

    async def abort(self) -> None:
        await self._call(self.producer.abort_transaction, INNER_TIMEOUT_S)

    def seek(self, offsets: dict[int, int]) -> None:
        for key, offset in offsets.items():
            self.consumer.seek(self._tp(key, offset))

    def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    async def position(self, key: int) -> int:
        found = await self._call(self.consumer.position, [self._tp(key)])
        return max(found[0].offset, 0)

    async def end_offsets(self) -> dict[int, int]:
        def ends() -> dict[int, int]:
            return {
                k: self.consumer.get_watermark_offsets(self._tp(k), INNER_TIMEOUT_S)[1] for k in range(self.spec.keys)
            }

        return await self._call(ends)

    def fatal(self, exc: BaseException) -> bool:
        """Not a Kafka error nor a timeout (a bug in the adapter), or one librdkafka calls fatal."""
        if isinstance(exc, self.ck.KafkaException) and exc.args and isinstance(exc.args[0], self.ck.KafkaError):
            return bool(exc.args[0].fatal()) and not self.spec.transactional  # fenced: the txn run's fresh process
        return not isinstance(exc, TimeoutError | BufferError)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._call(self.consumer.close)
        with contextlib.suppress(Exception):
            self.producer.purge()
            await self._call(self.producer.flush, 1.0)


CLIENTS = {"kraftpy": KraftpyClient, "confluent": ConfluentClient}
