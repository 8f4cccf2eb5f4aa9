"""Synchronous wrappers: SyncProducer, SyncConsumer and SyncAdminClient.

Each runs its asyncio client on a private loop thread (LoopThread) and
blocks the caller for the result, so scripts and threads without an event
loop get Kafka's familiar blocking API. SyncProducer.send returns a
concurrent.futures.Future, like KafkaProducer.send returns a Java Future.

A SyncConsumer's rebalance listener runs on a worker thread while the loop
waits for it (the caller stays blocked in poll()/close()/unsubscribe()), so
the listener may call the SyncConsumer itself, as Kafka's listeners call
their consumer. Commit callbacks run on the loop thread: they must not call
the SyncConsumer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from kraftpy.client.group.commits import CommitCallback, OffsetAndMetadata
from kraftpy.client.shell.admin import AdminClient
from kraftpy.client.shell.consumer import Consumer
from kraftpy.client.shell.group_member import ConsumerGroupMetadata
from kraftpy.client.shell.loop_thread import LoopThread
from kraftpy.client.shell.producer import Producer
from kraftpy.client.types import ConsumerRecord, DeliveryCallback, OffsetAndTimestamp, RecordMetadata
from kraftpy.protocol.types import TopicPartition


class _Wrapped:
    _thread: LoopThread

    def _call(self, coro: Any) -> Any:
        return self._thread.run(coro)

    def _on_loop(self, fn: Any, *args: Any) -> Any:
        """Run a plain method on the loop thread: the client's state belongs to that thread."""

        async def go() -> Any:
            return fn(*args)

        return self._thread.run(go())

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # overridden
        self._thread.stop()


class SyncProducer(_Wrapped):
    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self._thread = LoopThread("kraftpy-producer")
        try:
            self._producer = self._call(_construct(Producer, bootstrap_servers, config))
        except BaseException:
            self._thread.stop()
            raise

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp_ms: int | None = None,
        callback: DeliveryCallback | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Blocks until the record is buffered (up to max_block_ms); the future resolves on acknowledgement."""

        async def go() -> concurrent.futures.Future[RecordMetadata]:
            future = await self._producer.send(topic, value, key, partition, headers, timestamp_ms, callback)
            return self._thread.bridge(future)

        return self._call(go())

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> RecordMetadata:
        return self._call(self._producer.send_and_wait(topic, value, key, **kwargs))

    def flush(self) -> None:
        self._call(self._producer.flush())

    def partitions_for(self, topic: str) -> list[int]:
        return self._call(self._producer.partitions_for(topic))

    # Transactions: the blocking forms of Producer's (docs/transactions.md, "The client").

    def init_transactions(self, timeout_ms: float | None = None) -> None:
        self._call(self._producer.init_transactions(timeout_ms))

    def begin_transaction(self) -> None:
        self._on_loop(self._producer.begin_transaction)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout_ms: float | None = None,
    ) -> None:
        self._call(self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout_ms))

    def commit_transaction(self, timeout_ms: float | None = None) -> None:
        self._call(self._producer.commit_transaction(timeout_ms))

    def abort_transaction(self, timeout_ms: float | None = None) -> None:
        self._call(self._producer.abort_transaction(timeout_ms))

    def close(self, timeout_ms: float | None = None) -> None:
        if self._thread.running:
            try:
                self._call(self._producer.close(timeout_ms))
            finally:
                self._thread.stop()


class SyncConsumer(_Wrapped):
    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self._thread = LoopThread("kraftpy-consumer")
        try:
            self._consumer = self._call(_construct(Consumer, bootstrap_servers, config))
        except BaseException:
            self._thread.stop()
            raise

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._on_loop(self._consumer.assign, partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._on_loop(self._consumer.assignment)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        self._on_loop(self._consumer.seek, tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._on_loop(self._consumer.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._on_loop(self._consumer.seek_to_end, *partitions)

    def position(self, tp: TopicPartition | tuple[str, int], timeout_ms: float | None = None) -> int:
        return self._call(self._consumer.position(tp, timeout_ms))

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._call(self._consumer.poll(timeout_ms, max_records))

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._on_loop(self._consumer.pause, *partitions)

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        self._on_loop(self._consumer.resume, *partitions)

    def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._call(self._consumer.beginning_offsets(partitions))

    def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._call(self._consumer.end_offsets(partitions))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._call(self._consumer.offsets_for_times(timestamps))

    def partitions_for(self, topic: str) -> list[int]:
        return self._call(self._consumer.partitions_for(topic))

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: Any = None, listener: Any = None) -> None:
        wrapped = None if listener is None else _ThreadedListener(listener)
        self._on_loop(lambda: self._consumer.subscribe(topics, pattern=pattern, listener=wrapped))

    def subscription(self) -> set[str]:
        return self._on_loop(self._consumer.subscription)

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._on_loop(self._consumer.group_metadata)

    def unsubscribe(self) -> None:
        self._call(self._consumer.unsubscribe())

    def commit(self, offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int] | None = None) -> None:
        self._call(self._consumer.commit(offsets))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        self._on_loop(self._consumer.commit_async, offsets, callback)

    def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._call(self._consumer.committed(partitions, timeout_ms))

    def close(self, timeout_ms: int | None = None) -> None:
        if self._thread.running:
            try:
                self._call(self._consumer.close(timeout_ms))
            finally:
                self._thread.stop()


class _ThreadedListener:
    """Runs a SyncConsumer's listener off the loop thread, so that it may call the SyncConsumer."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener

    async def _run(self, method: str, partitions: Collection[TopicPartition]) -> None:
        fn = getattr(self.listener, method, None)
        if fn is None and method == "on_partitions_lost":
            fn = getattr(self.listener, "on_partitions_revoked", None)  # Kafka's default onPartitionsLost
        if fn is not None:
            await asyncio.to_thread(fn, partitions)

    async def on_partitions_revoked(self, partitions: Collection[TopicPartition]) -> None:
        await self._run("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: Collection[TopicPartition]) -> None:
        await self._run("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: Collection[TopicPartition]) -> None:
        await self._run("on_partitions_lost", partitions)


class SyncAdminClient(_Wrapped):
    """Every AdminClient coroutine method, blocking."""

    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self._thread = LoopThread("kraftpy-admin")
        try:
            self._admin = self._call(_construct(AdminClient, bootstrap_servers, config))
        except BaseException:
            self._thread.stop()
            raise

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._admin, name)
        if not callable(method) or name.startswith("_"):
            raise AttributeError(name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._call(method(*args, **kwargs))

        blocking.__name__ = name
        blocking.__doc__ = method.__doc__
        return blocking

    def close(self) -> None:
        if self._thread.running:
            try:
                self._call(self._admin.close())
            finally:
                self._thread.stop()


async def _construct(cls: Any, bootstrap_servers: Any, config: dict[str, Any]) -> Any:
    # Built on the loop thread so that asyncio objects bind to that loop.
    return cls(bootstrap_servers, **config)
