"""The asyncio producer: Kafka's KafkaProducer over the sans-I/O accumulator and sender.

Design notes: docs/client.md, section "client/shell/producer.py".
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kraftpy.client.config import ProducerConfig, parse_bootstrap_servers, producer_config
from kraftpy.client.errors import (
    BufferExhaustedError,
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    malformed,
)
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.client.interceptors import run_on_acknowledgement, run_on_send
from kraftpy.client.metadata import Cluster, Metadata
from kraftpy.client.producer.accumulator import RecordAccumulator, estimate_size_upper_bound
from kraftpy.client.producer.buffer_pool import BufferPool
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.client.producer.partitioner import Partitioner
from kraftpy.client.producer.sender import INIT_PRODUCER_ID_PATH, PRODUCE_PATH, ProduceRequest, Sender
from kraftpy.client.producer.transactions import GroupMetadata, TransactionManager, TxnRequest, TxnResult
from kraftpy.client.serde import SerializationError, Serializer, _bytes_ser, serializer_for
from kraftpy.client.shell.cluster_client import ClusterClient, wait_event
from kraftpy.client.types import DeliveryCallback, ProducerRecord, RecordMetadata
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.record import normalize_headers
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import TopicPartition, as_topic_partition

log = logging.getLogger(__name__)


class _Delivery(asyncio.Future[RecordMetadata]):
    """A sent record's future, and the callback its batch calls with the outcome (metadata, error).

    send() is the client's hottest path: a closure per record beside the future was a third of its
    time, and a Python __init__ calling Future's another fifth (profiles in docs/perf-kafka-clients.md),
    so send() builds it with Future's own constructor and sets the two slots.
    Interceptors, then the user's callback, then the future.
    """

    __slots__ = ("_callback", "_interceptors")

    def __call__(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        if self._interceptors:
            run_on_acknowledgement(self._interceptors, metadata, error)
        callback = self._callback
        if callback is not None:
            try:
                callback(metadata, error)
            except Exception:
                log.exception("a delivery callback raised")
        if not self.done():
            if error is None:
                self.set_result(metadata)
            else:
                self.set_exception(error)


# What send() needs of a topic, per metadata snapshot: (the snapshot, partition count, available
# partitions, one TopicPartition per partition). Looking these up one by one per record showed in profiles;
# the producer never forgets a topic it sent to, so a view is rebuilt only when the metadata changes.
_TopicView = tuple[Cluster, int, list[int], list[TopicPartition]]

HeadersArg = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None


def _serializer(key: str, spec: Any) -> Serializer:
    try:
        return serializer_for(spec)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def _txn_offsets(offsets: Mapping[Any, Any]) -> dict[TopicPartition, tuple[int, int, str]]:
    """{tp: offset | OffsetAndMetadata} as the core takes it: (offset, leader epoch or -1, metadata)."""
    out = {}
    for tp, value in offsets.items():
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
        epoch = om.leader_epoch if om.leader_epoch is not None else -1
        out[as_topic_partition(tp)] = (om.offset, epoch, om.metadata)
    return out


def _group(group_metadata: Any) -> GroupMetadata:
    """The consumer's group_metadata() (any object with its fields), or a bare group id (no generation check)."""
    if isinstance(group_metadata, str):
        return GroupMetadata(group_metadata)
    return GroupMetadata(
        group_metadata.group_id,
        group_metadata.generation_id,
        group_metadata.member_id,
        group_metadata.group_instance_id,
    )


def _headers(headers: HeadersArg) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    return normalize_headers(items)


class Producer:
    """`Producer("host:port,...", linger_ms=10, ...)`; use `async with` or call `close()`."""

    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self.config: ProducerConfig = producer_config(config)
        cfg = self.config
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self._key_serializer = _serializer("key_serializer", cfg.key_serializer)
        self._value_serializer = _serializer("value_serializer", cfg.value_serializer)
        self._custom_partitioner = cfg.partitioner
        self._partitioner = Partitioner(cfg.partitioner, rng=random.Random())  # KIP-480: random start
        self._interceptors = list(cfg.interceptors)
        # Read on every send(): plain attributes, not config lookups.
        self._max_request_size = cfg.max_request_size
        self._bytes_values = self._value_serializer is _bytes_ser
        self._bytes_keys = self._key_serializer is _bytes_ser
        self._metadata = Metadata(
            self._bootstrap,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            refresh_backoff_ms=cfg.retry_backoff_ms,
            refresh_backoff_max_ms=cfg.retry_backoff_max_ms,
        )
        self._pool = BufferPool(cfg.buffer_memory)
        transactional = cfg.transactional_id is not None
        self._idempotence = IdempotenceManager(transactional=transactional) if cfg.enable_idempotence else None
        self._txn: TransactionManager | None = None
        if transactional:
            assert self._idempotence is not None  # producer_config makes a transactional id imply idempotence
            self._txn = TransactionManager(
                cfg.transactional_id,
                self._idempotence,
                transaction_timeout_ms=cfg.transaction_timeout_ms,
                retry_backoff_ms=cfg.retry_backoff_ms,
                retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            )
        self._accumulator = RecordAccumulator(
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            compression=cfg.compression_type,
            delivery_timeout_ms=cfg.delivery_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            pool=self._pool,
            idempotence=self._idempotence,
            rng=random.Random(),
        )
        self._sender = Sender(
            self._accumulator,
            self._metadata,
            idempotence=self._idempotence,
            acks=cfg.acks,
            retries=cfg.retries,
            request_timeout_ms=cfg.request_timeout_ms,
            max_request_size=cfg.max_request_size,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            guarantee_message_order=cfg.guarantee_message_order,
            transactions=self._txn,
        )
        if self._txn is not None:
            self._accumulator.send_allowed = self._txn.is_send_to_partition_allowed
        self._cluster: ClusterClient | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._topic_views: dict[str, _TopicView] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self._closed = False
        self._crashed: KafkaError | None = None

    # Lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start the background tasks (send() does this on first use)."""
        if self._cluster is not None:
            return
        if self._closing:
            raise ProducerClosedError("the producer is closed")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._cluster = ClusterClient(
            self._metadata,
            request_timeout_ms=self.config.request_timeout_ms,
            client_id=self.config.client_id,
            max_in_flight=self.config.max_in_flight_requests_per_connection,
        )
        self._cluster.add_listener(self._wake.set)
        self._cluster.start()
        self._sender_task = asyncio.get_running_loop().create_task(self._run_sender(), name="kraftpy-sender")

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_ms: float | None = None) -> None:
        """Send what is buffered and wait for the answers, at most `timeout_ms` (None: no bound).

        Records still unacknowledged when the time is up fail with ProducerClosedError.
        """
        if self._closed:
            return
        self._closing = True
        if self._cluster is None:
            self._closed = True
            return
        self._accumulator.close()
        self._wake_sender()
        assert self._sender_task is not None
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await asyncio.shield(self._sender_task)
        except TimeoutError:
            self._sender.force_close(ProducerClosedError("the producer was closed before the record was acknowledged"))
            self._sender_task.cancel()
        for task in [self._sender_task, *self._tasks]:
            task.cancel()
        await asyncio.gather(self._sender_task, *self._tasks, return_exceptions=True)
        await self._cluster.close()
        self._closed = True

    # Sending ---------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp_ms: int | None = None,
        callback: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Buffer one record; the returned future resolves once the broker acknowledged it.

        Waits up to max_block_ms for the topic's metadata and for buffer memory.
        `callback(metadata, error)` runs on the event loop when the outcome is known.
        """
        if self._closing:
            raise ProducerClosedError("cannot send after the producer was closed")
        if self._cluster is None:
            await self.start()
        fatal = self._sender.fatal_error or self._crashed
        if fatal is not None:
            raise fatal
        if self._txn is not None:
            self._txn.check_may_send()
        if self._interceptors:
            record = run_on_send(
                self._interceptors, ProducerRecord(topic, value, key, partition, headers, timestamp_ms)
            )
            topic, value, key, partition = record.topic, record.value, record.key, record.partition
            headers, timestamp_ms = record.headers, record.timestamp_ms
        chosen = -1 if partition is None else partition
        sizes = (-1, -1)
        try:
            # The common case costs one dict lookup and no await: the topic's view of the current metadata.
            view = self._topic_views.get(topic)
            stale = view is None or view[0] is not self._metadata.cluster
            if stale or (partition is not None and partition >= view[1]):  # type: ignore[index]
                view = await self._topic_view(topic, partition)
            _, count, available, tps = view
            # bytes with the default serializer pass as they are (the common case: no call at all).
            if key is None or (self._bytes_keys and type(key) is bytes):
                key_bytes = key
            else:
                key_bytes = self._serialize(self._key_serializer, key, "key", topic)
            if self._bytes_values and type(value) is bytes:
                value_bytes = value
            else:
                value_bytes = self._serialize(self._value_serializer, value, "value", topic)
            sizes = (-1 if key_bytes is None else len(key_bytes), -1 if value_bytes is None else len(value_bytes))
            norm_headers = _headers(headers) if headers else ()
            size = estimate_size_upper_bound(key_bytes, value_bytes, norm_headers)
            if size > self._max_request_size or size > self._pool.total_memory:
                self._check_size(size)
            timestamp = timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000
            chosen = self._partitioner.partition(topic, key_bytes, count, available, partition)
            # The record's future is also its delivery callback: one object per record, not a future and a closure.
            future = on_done = _Delivery(loop=self._loop)
            on_done._callback = callback
            on_done._interceptors = self._interceptors
            sticky = partition is None and key_bytes is None and self._custom_partitioner is None
            now_ms = monotonic_ms()
            tp = tps[chosen]
            # The per-record calls pass positional arguments only: *args or a keyword is several times slower.
            append = self._accumulator.append
            result = append(tp, timestamp, key_bytes, value_bytes, norm_headers, on_done, now_ms, sticky)
            if result.aborted_for_new_batch:
                # KIP-480: a new batch is about to start, so the sticky partition moves on first.
                self._partitioner.on_new_batch(topic, chosen, count, available)
                chosen = self._partitioner.partition(topic, key_bytes, count, available, None)
                tp = tps[chosen]
                result = append(tp, timestamp, key_bytes, value_bytes, norm_headers, on_done, now_ms)
            if result.needs_memory:
                deadline = monotonic_ms() + self.config.max_block_ms
                while result.needs_memory:
                    granted = await self._reserve(result.needs_memory, deadline)
                    result = append(
                        tp, timestamp, key_bytes, value_bytes, norm_headers, on_done, monotonic_ms(), memory=granted
                    )
        except KafkaError as exc:
            md = RecordMetadata(topic, chosen, -1, -1, *sizes)
            run_on_acknowledgement(self._interceptors, md, exc)
            raise
        # A transaction's partition is added after the append: the sticky partitioner may have moved on.
        added = self._txn is not None and self._txn.maybe_add_partition(tp)
        if added or result.batch_is_full or result.new_batch_created:
            self._wake_sender()
        return future

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> RecordMetadata:
        """send() and wait for the acknowledgement."""
        return await (await self.send(topic, value, key, **kwargs))

    async def flush(self) -> None:
        """Make every buffered record sendable now and wait until each has its outcome."""
        # A batch's records end together, its last record's future last: waiting for those is waiting for all
        # (Kafka's awaitFlushCompletion waits on each incomplete batch the same way).
        pending = [
            last
            for batch in self._accumulator.incomplete()
            if isinstance(last := batch.last_callback, asyncio.Future) and not last.done()
        ]
        if not pending:
            return
        self._accumulator.begin_flush()
        self._wake_sender()
        try:
            await asyncio.wait(pending)
        finally:
            self._accumulator.end_flush()

    # Transactions (Kafka's KafkaProducer API) ---------------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("transactions need a transactional_id in the producer's config")
        return self._txn

    async def _await(self, result: TxnResult, timeout_ms: float | None) -> None:
        """Wait for a transactional call's result, at most max_block_ms (None) or `timeout_ms`."""
        self._wake_sender()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(r: TxnResult) -> None:
            if not future.done():
                future.set_result(None)

        result.add_callback(done)
        bound_ms = self.config.max_block_ms if timeout_ms is None else timeout_ms
        try:
            async with asyncio.timeout(bound_ms / 1000):
                await asyncio.shield(future)
        except TimeoutError:
            # As Kafka: the operation goes on; calling the same method again waits for the same result.
            raise KafkaTimeoutError(
                f"{result.operation} did not finish within {bound_ms} ms; call it again to keep waiting"
            ) from None
        if result.error is not None:
            raise result.error

    async def init_transactions(self, timeout_ms: float | None = None) -> None:
        """Register the transactional id with its coordinator: fences older producers with the same id and
        completes or aborts their unfinished transaction. Call once, before the first begin_transaction()."""
        txn = self._transactions()
        await self.start()
        await self._await(txn.init_transactions(), timeout_ms)

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent until commit or abort is committed or aborted as one."""
        self._transactions().begin_transaction()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[Any, Any], group_metadata: Any, timeout_ms: float | None = None
    ) -> None:
        """Commit the consumer's `offsets` ({tp: next offset or OffsetAndMetadata}) with the transaction.

        `group_metadata` is the consumer's group_metadata() (KIP-447: the coordinator checks its generation
        and member id, so a consumer that lost its partitions cannot commit), or a group id."""
        txn = self._transactions()
        await self.start()
        await self._await(txn.send_offsets_to_transaction(_txn_offsets(offsets), _group(group_metadata)), timeout_ms)

    async def commit_transaction(self, timeout_ms: float | None = None) -> None:
        """Send every buffered record, then commit. An error from a record or the commit leaves the
        transaction to abort (or, fenced, the producer to close)."""
        txn = self._transactions()
        await self._await(txn.begin_commit(), timeout_ms)

    async def abort_transaction(self, timeout_ms: float | None = None) -> None:
        """Abort: records not yet sent fail (their futures raise), those sent are aborted with the transaction."""
        txn = self._transactions()
        result = txn.begin_abort()
        # An abort with nothing at the coordinator yet completes at once, so the sender never sees the
        # aborting state; the records still queued must fail now, not go out in the next transaction.
        aborted = KafkaError("the transaction was aborted", ErrorCode.OPERATION_NOT_ATTEMPTED)
        self._accumulator.abort_undrained(lambda _batch: aborted, only_unsent=True)
        self._wake_sender()
        await self._await(result, timeout_ms)

    async def partitions_for(self, topic: str) -> list[int]:
        await self.start()
        cluster = await self._wait_on_metadata(topic, None, monotonic_ms() + self.config.max_block_ms)
        return [p.partition for p in cluster.partitions_for_topic(topic)]

    # Helpers ---------------------------------------------------------------

    def _serialize(self, serializer: Serializer, obj: Any, what: str, topic: str) -> bytes | None:
        try:
            data = serializer(obj)
        except SerializationError:
            raise
        except Exception as exc:  # a user serializer may raise anything; report it uniformly
            raise SerializationError(f"cannot serialize the {what} of a record for {topic!r}: {exc}") from exc
        if data is not None and not isinstance(data, bytes):
            if isinstance(data, bytearray | memoryview):
                return bytes(data)
            raise SerializationError(f"the {what} serializer returned {type(data).__name__}, not bytes")
        return data

    def _check_size(self, size: int) -> None:
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"the record is {size} bytes when serialized, which is larger than max_request_size "
                f"({self.config.max_request_size})"
            )
        self._pool.check_size(size)

    async def _wait_on_metadata(self, topic: str, partition: int | None, deadline: float) -> Cluster:
        """Kafka's waitOnMetadata: until the topic (and partition) is known, at most until `deadline`."""
        assert self._cluster is not None
        self._metadata.add_topic(topic)
        while True:
            cluster = self._metadata.cluster
            count = cluster.num_partitions(topic)
            if count is not None and (partition is None or partition < count):
                return cluster
            error = cluster.topic_errors.get(topic)
            if error in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION):
                raise KafkaError(f"cannot send to topic {topic!r}", error)
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                if count is not None and partition is not None:
                    message = (
                        f"partition {partition} of topic {topic!r} with partition count {count} is not present "
                        f"in metadata after {self.config.max_block_ms} ms"
                    )
                else:
                    message = f"topic {topic!r} not present in metadata after {self.config.max_block_ms} ms"
                raise self._metadata_wait_error(topic, message, count)
            version = self._cluster.request_update()
            await self._cluster.wait_for_version(version, remaining)

    def _metadata_wait_error(self, topic: str, message: str, count: int | None) -> KafkaError:
        """Kafka's TimeoutException after max_block_ms, with the code of what the brokers last said."""
        assert self._cluster is not None
        if self._cluster.last_error is not None and self._metadata.cluster.num_partitions(topic) is None:
            servers = ",".join(f"{host}:{port}" for host, port in self._bootstrap)
            return KafkaTimeoutError(
                f"{message}: no server answered at {servers} (last error: {self._cluster.last_error.message})",
                ErrorCode.NETWORK_EXCEPTION,
            )
        if count is not None or self._metadata.topic_error(topic) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            # The brokers answered: the topic (or that partition) does not exist.
            return KafkaTimeoutError(message, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return KafkaTimeoutError(message)

    async def _reserve(self, size: int, deadline: float) -> int:
        """Wait (FIFO) for `size` bytes of buffer_memory, at most until `deadline`."""
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = self._pool.enqueue(size, lambda: granted.done() or granted.set_result(None))
        if waiter.granted:
            return size
        self._wake_sender()  # callers waiting for memory make every batch sendable
        try:
            async with asyncio.timeout(max(0.0, deadline - monotonic_ms()) / 1000):
                await granted
        except TimeoutError:
            self._pool.cancel(waiter)
            raise BufferExhaustedError(
                f"failed to allocate {size} bytes within max_block_ms ({self.config.max_block_ms} ms); "
                f"buffer_memory {self._pool.total_memory}, available {self._pool.available}"
            ) from None
        except BaseException:
            self._pool.cancel(waiter)
            raise
        return size

    async def _topic_view(self, topic: str, partition: int | None) -> _TopicView:
        """The topic's view of the current metadata, once it has the topic (and partition): see _TopicView."""
        cluster = self._metadata.cluster
        count = cluster.num_partitions(topic)
        if count is None or (partition is not None and partition >= count):
            cluster = await self._wait_on_metadata(topic, partition, monotonic_ms() + self.config.max_block_ms)
            count = cluster.num_partitions(topic) or 0
        else:
            self._metadata.add_topic(topic)
        tps = [TopicPartition(topic, p) for p in range(count)]
        view = self._topic_views[topic] = (cluster, count, cluster.available_partitions(topic), tps)
        return view

    def _wake_sender(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # The send loop ---------------------------------------------------------

    async def _run_sender(self) -> None:
        try:
            await self._sender_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug in a core must not leave futures hanging forever: fail them and refuse new sends.
            log.exception("the producer's send loop crashed")
            self._crashed = KafkaError(f"the producer's send loop crashed: {exc!r}", ErrorCode.UNKNOWN_SERVER_ERROR)
            self._sender.force_close(self._crashed)

    async def _sender_loop(self) -> None:
        assert self._wake is not None and self._cluster is not None
        while True:
            self._wake.clear()
            out = self._sender.poll(monotonic_ms())
            if out.init_producer_id is not None:
                self._spawn(self._init_producer_id(out.init_producer_id))
            if out.txn_request is not None:
                self._spawn(self._send_txn_request(out.txn_request))
            for request in out.requests:
                self._spawn(self._send_request(request))
            if self._metadata.update_requested:
                self._cluster.wake()
            if self._closing and not self._sender.has_pending_work():
                return
            timeout = out.poll_timeout_ms
            if timeout > 0:
                await wait_event(self._wake, None if timeout == float("inf") else timeout)
            else:
                await asyncio.sleep(0)  # let the requests just spawned start

    async def _send_request(self, request: ProduceRequest) -> None:
        assert self._cluster is not None
        if not request.expects_response:
            await self._send_without_answer(request)
            return
        try:
            answer = await self._cluster.call(
                request.address,
                PRODUCE_PATH,
                request.body,
                timeout_ms=self.config.request_timeout_ms,
                raise_errors=False,
            )
        except KafkaError as exc:
            self._sender.handle_request_failure(request.request_id, exc, monotonic_ms())
        else:
            self._sender.handle_response(request.request_id, answer, monotonic_ms())
        self._wake_sender()

    async def _send_without_answer(self, request: ProduceRequest) -> None:
        """acks=0: the batches are done once the request is written to the broker's stream (as Kafka's)."""
        assert self._cluster is not None
        try:
            await self._cluster.send(
                request.address, PRODUCE_PATH, request.body, timeout_ms=self.config.request_timeout_ms
            )
        except KafkaError as exc:
            self._sender.handle_request_failure(request.request_id, exc, monotonic_ms())
        else:
            self._sender.handle_sent(request.request_id, monotonic_ms())
        self._wake_sender()

    async def _send_txn_request(self, request: TxnRequest) -> None:
        """One coordinator request of the transaction core: to its coordinator, or any broker when None."""
        assert self._cluster is not None
        timeout_ms = self.config.request_timeout_ms
        try:
            if request.address is None:
                answer = await self._cluster.call_any(request.path, request.body, timeout_ms=timeout_ms)
            else:
                answer = await self._cluster.call(
                    request.address, request.path, request.body, timeout_ms=timeout_ms, raise_errors=False
                )
        except KafkaError as exc:
            log.debug("%s failed: %s", request.path, exc)
            self._sender.handle_txn_failure(request, exc, monotonic_ms())
        else:
            try:
                self._sender.handle_txn_response(request, answer, monotonic_ms())
            except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a malformed answer: as none
                self._sender.handle_txn_failure(request, malformed(request.path, repr(exc)), monotonic_ms())
        self._wake_sender()

    async def _init_producer_id(self, body: dict[str, Any]) -> None:
        assert self._cluster is not None
        try:
            timeout_ms = self.config.request_timeout_ms
            answer = await self._cluster.call_any(INIT_PRODUCER_ID_PATH, body, timeout_ms=timeout_ms)
        except KafkaError as exc:
            log.warning("init_producer_id failed: %s", exc)
            self._sender.handle_producer_id_failure(exc, monotonic_ms())
        else:
            self._sender.handle_producer_id(answer)
        self._wake_sender()
