"""The asyncio consumer: Kafka's KafkaConsumer (manual assignment or a consumer group), over the sans-I/O cores.

Design notes: docs/client.md, section "client/shell/consumer.py".
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kraftpy.client.config import consumer_config, parse_bootstrap_servers
from kraftpy.client.consumer.fetch_positions import FetchPositions
from kraftpy.client.consumer.fetcher import ISOLATION_LEVELS, Fetcher
from kraftpy.client.consumer.offset_fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LIST_OFFSETS_PATH,
    ListOffsetsResult,
    OffsetFetcher,
    build_list_offsets_requests,
    parse_list_offsets_response,
    to_offset_and_timestamp,
)
from kraftpy.client.consumer.position_validator import PositionValidator
from kraftpy.client.consumer.requests import BrokerRequestCore, R
from kraftpy.client.consumer.subscription import (
    OffsetResetStrategy,
    SubscriptionState,
)
from kraftpy.client.errors import (
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    invalidates_metadata,
    is_retriable,
)
from kraftpy.client.group.commits import CommitCallback, OffsetAndMetadata
from kraftpy.client.group.errors import InvalidGroupIdError
from kraftpy.client.interceptors import run_on_consume
from kraftpy.client.metadata import Metadata
from kraftpy.client.serde import Deserializer, deserializer_for
from kraftpy.client.shell.cluster_client import ClusterClient, wait_event
from kraftpy.client.shell.group_member import ConsumerGroupMetadata, GroupShell
from kraftpy.client.types import ConsumerRecord, OffsetAndTimestamp
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import TopicPartition, as_topic_partition

log = logging.getLogger(__name__)

TPLike = TopicPartition | tuple[str, int]
DEFAULT_CLOSE_TIMEOUT_MS = 30_000  # Kafka's KafkaConsumer.close() bound
# A poll() waiting for records wakes for the group's own work (a join retry, an auto-commit), but never
# sooner than this after its last look, so a deadline already due cannot make it spin.
GROUP_WAKE_FLOOR_MS = 5


def _offsets(
    offsets: Mapping[TPLike, OffsetAndMetadata | int] | None,
) -> dict[TopicPartition, OffsetAndMetadata] | None:
    if offsets is None:
        return None
    out = {}
    for tp, value in offsets.items():
        out[as_topic_partition(tp)] = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
    return out


def _deserializer(key: str, spec: Any) -> Deserializer:
    try:
        return deserializer_for(spec)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


class Consumer:
    """`Consumer("host:port,...", auto_offset_reset="earliest")`, then assign() and poll()."""

    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self.config = consumer_config(config)
        cfg = self.config
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self._interceptors = list(cfg["interceptors"])
        self._subscriptions = SubscriptionState(OffsetResetStrategy(cfg["auto_offset_reset"]))
        self._metadata = Metadata(
            self._bootstrap,
            metadata_max_age_ms=cfg["metadata_max_age_ms"],
            refresh_backoff_ms=cfg["retry_backoff_ms"],
            refresh_backoff_max_ms=cfg["retry_backoff_max_ms"],
        )
        self._fetcher = Fetcher(
            self._subscriptions,
            self._metadata,
            fetch_min_bytes=cfg["fetch_min_bytes"],
            fetch_max_wait_ms=cfg["fetch_max_wait_ms"],
            fetch_max_bytes=cfg["fetch_max_bytes"],
            max_partition_fetch_bytes=cfg["max_partition_fetch_bytes"],
            max_poll_records=cfg["max_poll_records"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
            check_crcs=cfg["check_crcs"],
            isolation_level=ISOLATION_LEVELS[cfg["isolation_level"]],
            key_deserializer=_deserializer("key_deserializer", cfg["key_deserializer"]),
            value_deserializer=_deserializer("value_deserializer", cfg["value_deserializer"]),
        )
        self._offsets = OffsetFetcher(
            self._subscriptions,
            self._metadata,
            isolation_level=ISOLATION_LEVELS[cfg["isolation_level"]],
            request_timeout_ms=cfg["request_timeout_ms"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
        )
        self._validator = PositionValidator(
            self._subscriptions,
            self._metadata,
            request_timeout_ms=cfg["request_timeout_ms"],
            retry_backoff_ms=cfg["retry_backoff_ms"],
        )
        self._positions = FetchPositions(
            self._subscriptions,
            self._metadata,
            self._offsets,
            self._validator,
            use_committed=cfg["group_id"] is not None,
        )
        self._group: GroupShell | None = None
        if cfg["group_id"] is not None:
            self._group = GroupShell(
                cfg, self._subscriptions, self._metadata, on_removed=self._partitions_removed, on_activity=self._poke
            )
        self._cluster: ClusterClient | None = None
        self._activity: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # Lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        if self._cluster is not None:
            return
        self._activity = asyncio.Event()
        self._cluster = ClusterClient(
            self._metadata,
            request_timeout_ms=self.config["request_timeout_ms"],
            client_id=self.config["client_id"],
        )
        self._cluster.add_listener(self._activity.set)
        self._cluster.start()
        if self._group is not None:
            self._group.start(self._cluster)

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_ms: int | None = None) -> None:
        """Stop; with a group: commit (auto-commit), revoke through the listener, leave (dynamic members).

        The group part is bounded by `timeout_ms` (30000, as Kafka's close()).
        """
        if self._closed:
            return
        try:
            if self._group is not None and self._cluster is not None:
                try:
                    await self._group.leave("close", DEFAULT_CLOSE_TIMEOUT_MS if timeout_ms is None else timeout_ms)
                except Exception:
                    log.exception("leaving the group on close failed")
                finally:
                    await self._group.stop()
        finally:
            # Also when cancelled: whatever ran stops and the connections close.
            self._closed = True
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._cluster is not None:
                await self._cluster.close()

    # Assignment and positions ---------------------------------------------

    def assign(self, partitions: Iterable[TPLike]) -> None:
        """Manually assign partitions (replacing the previous assignment)."""
        wanted = [as_topic_partition(tp) for tp in partitions]
        removed = self._subscriptions.assigned_partitions() - set(wanted)
        self._subscriptions.assign_from_user(wanted)
        self._fetcher.clear_buffered(removed)
        self._positions.forget(removed)
        self._metadata.set_topics(self._subscriptions.topics())
        self._wake_metadata()

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: Any = None, listener: Any = None) -> None:
        """Join the group for these topics, or every topic matching `pattern` (re.fullmatch; internal topics
        excluded). `listener`: a ConsumerRebalanceListener. The assignment arrives with a later poll()."""
        group = self._require_group()
        chosen = self._subscriptions.subscribe(topics, pattern=pattern, listener=listener)
        if pattern is not None:
            group.subscribe(None, chosen, listener is not None)
        else:
            group.subscribe(frozenset(chosen), None, listener is not None)  # type: ignore[arg-type]

    def subscription(self) -> set[str]:
        """The subscribed topics (for a pattern: the ones it matches now)."""
        if self._group is None or not self._subscriptions.is_subscribed:
            return set()
        return self._group.subscription()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member id this consumer has now (Kafka's groupMetadata())."""
        return self._require_group().group_metadata()

    async def unsubscribe(self) -> None:
        """Give up the partitions (subscription: the listener's on_partitions_revoked, then LeaveGroup)."""
        if self._group is not None and self._subscriptions.is_subscribed:
            # Also before start(): the membership core must forget the subscription too.
            await self._group.leave("unsubscribe", self.config["default_api_timeout_ms"])
        self._partitions_removed(self._subscriptions.assigned_partitions())
        self._subscriptions.unsubscribe()
        self._metadata.set_topics(())

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assigned_partitions()

    def _require_group(self) -> GroupShell:
        if self._group is None:
            raise InvalidGroupIdError()
        return self._group

    def _partitions_removed(self, removed: set[TopicPartition]) -> None:
        self._fetcher.clear_buffered(removed)
        self._positions.forget(removed)

    def _poke(self) -> None:
        if self._activity is not None:
            self._activity.set()

    # Committed offsets (with a group_id) ------------------------------------

    async def commit(
        self, offsets: Mapping[TPLike, OffsetAndMetadata | int] | None = None, timeout_ms: int | None = None
    ) -> None:
        """Commit `offsets` (None: the position of every assigned partition); retries until it succeeds or
        `timeout_ms` (default_api_timeout_ms) passes. CommitFailedError: the group rebalanced without us."""
        group = self._require_group()
        await self.start()
        await group.commit(_offsets(offsets), timeout_ms)

    def commit_async(
        self, offsets: Mapping[TPLike, OffsetAndMetadata | int] | None = None, callback: CommitCallback | None = None
    ) -> None:
        """Commit once, without waiting; `callback(offsets, error)` runs from a later poll()."""
        self._require_group().commit_async(_offsets(offsets), callback)

    async def committed(
        self, partitions: Iterable[TPLike], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None: nothing committed for that partition)."""
        group = self._require_group()
        await self.start()
        return await group.committed([as_topic_partition(tp) for tp in partitions], timeout_ms)

    def seek(self, tp: TPLike, offset: int) -> None:
        """Fetch `tp` from `offset` on the next poll."""
        tp = as_topic_partition(tp)
        self._subscriptions.seek(tp, offset)
        self._after_seek(tp)

    def seek_to_beginning(self, *partitions: TPLike) -> None:
        """Start from the earliest offset (of all assigned partitions when none are named); lazy, as in Kafka."""
        for tp in self._named_or_all(partitions):
            self._subscriptions.request_offset_reset(tp, OffsetResetStrategy.EARLIEST)
            self._after_seek(tp)

    def seek_to_end(self, *partitions: TPLike) -> None:
        for tp in self._named_or_all(partitions):
            self._subscriptions.request_offset_reset(tp, OffsetResetStrategy.LATEST)
            self._after_seek(tp)

    def _named_or_all(self, partitions: tuple[TPLike, ...]) -> list[TopicPartition]:
        return [as_topic_partition(tp) for tp in partitions] or sorted(self.assignment())

    def _after_seek(self, tp: TopicPartition) -> None:
        self._fetcher.clear_buffered({tp})
        self._positions.forget({tp})
        if self._activity is not None:
            self._activity.set()

    async def position(self, tp: TPLike, timeout_ms: float | None = None) -> int:
        """The offset of the next record to be returned, looking it up first if needed."""
        tp = as_topic_partition(tp)
        if not self._subscriptions.is_assigned(tp):
            raise IllegalStateError(f"can only check the position of assigned partitions, not {tp}")
        await self.start()
        timeout = self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = monotonic_ms() + timeout
        while True:
            assert self._activity is not None
            self._activity.clear()
            self._update_fetch_positions()
            if self._subscriptions.has_valid_position(tp):
                position = self._subscriptions.position(tp)
                assert position is not None
                return position.offset
            if not await self._wait(deadline):
                raise KafkaTimeoutError(f"the position of {tp} could not be determined within {timeout} ms")

    def pause(self, *partitions: TPLike) -> None:
        for tp in partitions:
            self._subscriptions.pause(as_topic_partition(tp))

    def resume(self, *partitions: TPLike) -> None:
        for tp in partitions:
            self._subscriptions.resume(as_topic_partition(tp))
        if self._activity is not None:
            self._activity.set()

    def paused(self) -> set[TopicPartition]:
        return self._subscriptions.paused_partitions()

    def high_watermark(self, tp: TPLike) -> int | None:
        """The last high watermark a fetch of `tp` reported (None before the first)."""
        return self._subscriptions.state(as_topic_partition(tp)).high_watermark

    # Polling ---------------------------------------------------------------

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to `timeout_ms` when none are buffered."""
        if not self._subscriptions.assigned_partitions() and not self._subscriptions.is_subscribed:
            raise IllegalStateError("the consumer is not subscribed to any topics or assigned any partitions")
        await self.start()
        assert self._activity is not None
        deadline = monotonic_ms() + timeout_ms
        while True:
            self._activity.clear()
            if self._group is not None:
                await self._group.app_poll()  # rebalance, listener calls, auto-commit, commit callbacks
            self._update_fetch_positions()
            records = self._fetcher.collect_fetch(max_records)
            self._send_fetches()  # with records in hand, the next answer is fetched while the app works
            if records:
                return run_on_consume(self._interceptors, records)
            if not await self._wait(deadline, self._group.poll_deadline_ms() if self._group is not None else None):
                return []

    async def _wait(self, deadline: float, wake_at: float | None = None) -> bool:
        """Wait for an answer to arrive (or `wake_at`, when the group has poll() work); False once `deadline`
        passed."""
        assert self._activity is not None
        now_ms = monotonic_ms()
        if deadline - now_ms <= 0:
            return False
        until = deadline if wake_at is None else min(deadline, max(wake_at, now_ms + GROUP_WAKE_FLOOR_MS))
        await wait_event(self._activity, until - now_ms)
        return True

    def _update_fetch_positions(self) -> None:
        """Kafka's updateFetchPositions: FetchPositions decides; this sends what it asks for, raises what it found."""
        work = self._positions.update(monotonic_ms())
        for request in work.validations:
            self._spawn(self._exchange(self._validator, request))
        if work.lookup:
            assert self._group is not None
            self._positions.lookup_started(self._group.start_committed_lookup(work.lookup))
        if work.error is not None:
            raise work.error
        for request in work.resets:
            self._spawn(self._exchange(self._offsets, request))
        self._wake_metadata()

    def _send_fetches(self) -> None:
        for fetch in self._fetcher.prepare_requests(monotonic_ms()):
            self._spawn(self._exchange(self._fetcher, fetch))
        self._wake_metadata()

    def _wake_metadata(self) -> None:
        if self._cluster is not None and self._metadata.update_requested:
            self._cluster.wake()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _answered(self) -> None:
        if self._activity is not None:
            self._activity.set()
        self._wake_metadata()

    async def _exchange(self, core: BrokerRequestCore[R], request: R) -> None:
        assert self._cluster is not None
        await self._cluster.exchange(
            request.address,
            core.path,
            request.body,
            functools.partial(core.handle_response, request),
            functools.partial(core.handle_failure, request),
        )
        self._answered()

    # Offset lookups --------------------------------------------------------

    async def beginning_offsets(
        self, partitions: Iterable[TPLike], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        found = await self._list_offsets({as_topic_partition(tp): EARLIEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    async def end_offsets(
        self, partitions: Iterable[TPLike], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        found = await self._list_offsets({as_topic_partition(tp): LATEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TPLike, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is at or after the given one, per partition (None: no such record)."""
        wanted = {as_topic_partition(tp): ts for tp, ts in timestamps.items()}
        for tp, ts in wanted.items():
            if ts < 0:
                raise ValueError(f"the timestamp for {tp} must not be negative, got {ts}")
        found = await self._list_offsets(wanted, timeout_ms)
        return {tp: to_offset_and_timestamp(r) for tp, r in found.items()}

    async def partitions_for(self, topic: str, timeout_ms: float | None = None) -> list[int]:
        await self.start()
        assert self._cluster is not None
        timeout = self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = monotonic_ms() + timeout
        self._metadata.add_topic(topic)
        while self._metadata.cluster.num_partitions(topic) is None:
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata after {timeout} ms")
            await self._cluster.wait_for_version(self._cluster.request_update(), remaining)
        return [p.partition for p in self._metadata.cluster.partitions_for_topic(topic)]

    async def _list_offsets(
        self, timestamps: dict[TopicPartition, int], timeout_ms: float | None
    ) -> dict[TopicPartition, ListOffsetsResult]:
        await self.start()
        assert self._cluster is not None
        timeout = self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = monotonic_ms() + timeout
        for tp in timestamps:
            self._metadata.add_topic(tp.topic)
        results: dict[TopicPartition, ListOffsetsResult] = {}
        todo = dict(timestamps)
        last_error: KafkaError | None = None
        while todo:
            requests, leaderless = build_list_offsets_requests(self._metadata, todo, self._fetcher.isolation_level)
            answers = await asyncio.gather(
                *(self._cluster.call(r.address, LIST_OFFSETS_PATH, r.body, raise_errors=False) for r in requests),
                return_exceptions=True,
            )
            for request, answer in zip(requests, answers, strict=True):
                if isinstance(answer, KafkaError):
                    last_error = answer
                    continue
                if isinstance(answer, BaseException):
                    raise answer
                for tp, result in parse_list_offsets_response(answer).items():
                    if tp not in request.timestamps:
                        continue
                    if result.code == ErrorCode.NONE:
                        results[tp] = result
                        del todo[tp]
                    elif invalidates_metadata(result.code) or is_retriable(result.code):
                        last_error = KafkaError(result.message or result.code.name, result.code)
                    else:
                        raise KafkaError(f"list_offsets for {tp}: {result.message or result.code.name}", result.code)
            if not todo:
                break
            if leaderless:
                last_error = KafkaError(f"no leader known for {sorted(leaderless)}", ErrorCode.LEADER_NOT_AVAILABLE)
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"offsets of {sorted(str(tp) for tp in todo)} not found within {timeout} ms "
                    f"(last error: {last_error})"
                )
            await self._cluster.wait_for_version(self._cluster.request_update(), min(remaining, 1_000))
        return results
