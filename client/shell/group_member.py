"""The asyncio shell of a consumer's group membership: carries out what GroupMembership asks, on real time.

Design notes: docs/client.md, section "client/shell/group_member.py".
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.client.consumer.subscription import SubscriptionState
from kraftpy.client.errors import KafkaTimeoutError
from kraftpy.client.group.assignors import make_assignors
from kraftpy.client.group.commits import CommitCallback, GroupOperation, OffsetAndMetadata
from kraftpy.client.group.membership import GroupMembership
from kraftpy.client.group.membership_types import (
    GroupAction,
    GroupMembershipConfig,
    InvokeListener,
    RunCommitCallback,
    SendRequest,
)
from kraftpy.client.metadata import Metadata
from kraftpy.client.shell.cluster_client import ClusterClient, wait_event
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)

# Extra time a caller waits beyond an operation's own deadline, for the tick that expires it to run.
WAIT_SLACK_MS = 1_000
# How long a cancelled close() still waits for its LeaveGroup to be answered.
ABANDON_TIMEOUT_MS = 2_000


def membership_config(cfg: Mapping[str, Any]) -> GroupMembershipConfig:
    """The core's settings from a checked consumer config (config.consumer_config)."""
    return GroupMembershipConfig(
        group_id=cfg["group_id"],
        group_instance_id=cfg["group_instance_id"],
        client_id=cfg["client_id"] or "",
        session_timeout_ms=cfg["session_timeout_ms"],
        heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
        max_poll_interval_ms=cfg["max_poll_interval_ms"],
        retry_backoff_ms=cfg["retry_backoff_ms"],
        request_timeout_ms=cfg["request_timeout_ms"],
        enable_auto_commit=cfg["enable_auto_commit"],
        auto_commit_interval_ms=cfg["auto_commit_interval_ms"],
        exclude_internal_topics=cfg["exclude_internal_topics"],
        require_stable=cfg["isolation_level"] == "read_committed",
    )


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Kafka's ConsumerGroupMetadata: who this consumer is in its group right now (generation -1: none)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class _Store:
    """The AssignmentStore the core sees: SubscriptionState, plus dropping buffered records of removed partitions."""

    def __init__(self, subscriptions: SubscriptionState, on_removed: Callable[[set[TopicPartition]], None]) -> None:
        self.subscriptions = subscriptions
        self.on_removed = on_removed

    def assigned_partitions(self) -> set[TopicPartition]:
        return self.subscriptions.assigned_partitions()

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        if not self.subscriptions.is_subscribed:
            return  # closing with a manual assignment: the partitions are not the group's to take away
        wanted = set(partitions)
        removed = self.subscriptions.assigned_partitions() - wanted
        self.subscriptions.assign_from_subscribed(wanted)
        if removed:
            self.on_removed(removed)

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.subscriptions.all_consumed()

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        self.subscriptions.mark_pending_revocation(partitions)


class GroupShell:
    def __init__(
        self,
        cfg: Mapping[str, Any],
        subscriptions: SubscriptionState,
        metadata: Metadata,
        *,
        on_removed: Callable[[set[TopicPartition]], None],
        on_activity: Callable[[], None],
    ) -> None:
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.default_api_timeout_ms: int = cfg["default_api_timeout_ms"]
        self.core = GroupMembership(
            membership_config(cfg),
            make_assignors(cfg["partition_assignment_strategy"]),
            _Store(subscriptions, on_removed),
        )
        self._on_activity = on_activity
        self._cluster: ClusterClient | None = None
        self._app_actions: collections.deque[GroupAction] = collections.deque()
        self._changed = asyncio.Event()  # set (and replaced) whenever the core may have moved on
        self._wake = asyncio.Event()  # the background task recomputes its deadline
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = False

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, cluster: ClusterClient) -> None:
        if self._cluster is not None:
            return
        self._cluster = cluster
        cluster.add_listener(self._on_metadata)
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop(), name="kraftpy-group-heartbeat")
        self._dispatch()

    async def stop(self) -> None:
        """Stop the background task and abandon requests in flight (after leave(), or on a failed close)."""
        self._stopping = True
        tasks = [t for t in (self._ticker, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- the application's side ---------------------------------------------------------------

    async def app_poll(self) -> None:
        """poll(): drive the rebalance, run listener calls and commit callbacks, raise the core's error."""
        self.core.poll(monotonic_ms())
        await self._run_app_actions()

    def poll_deadline_ms(self) -> int | None:
        return self.core.poll_deadline_ms()

    def subscribe(self, topics: frozenset[str] | None, pattern: Any, listener: bool) -> None:
        if pattern is not None:
            self.core.subscribe_pattern(pattern, listener=listener)
        else:
            assert topics is not None
            self.core.subscribe(topics, listener=listener)
        self._sync_metadata_topics()
        if self._cluster is not None:
            self._cluster.request_update()  # a pattern is matched against fresh metadata
        self._dispatch(poke=False)

    def subscription(self) -> set[str]:
        return set(self.core.subscription.topics)

    def group_metadata(self) -> ConsumerGroupMetadata:
        generation = self.core.generation
        config = self.core.config
        return ConsumerGroupMetadata(
            config.group_id, generation.generation_id, generation.member_id, config.group_instance_id
        )

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, timeout_ms: int | None) -> None:
        timeout = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        op = self.core.commit_sync(offsets, monotonic_ms(), timeout)
        await self._finish(op, timeout)

    def commit_async(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, callback: CommitCallback | None
    ) -> None:
        self.core.commit_async(offsets, monotonic_ms(), callback)
        self._dispatch(poke=False)

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        timeout = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        op = self.core.committed(partitions, monotonic_ms(), timeout)
        await self._finish(op, timeout)
        return dict(op.result)

    def start_committed_lookup(self, partitions: Iterable[TopicPartition]) -> GroupOperation:
        """A lookup the consumer checks from later polls (before resetting positions), not awaited."""
        op = self.core.committed(partitions, monotonic_ms(), self.default_api_timeout_ms)
        self._dispatch(poke=False)
        return op

    async def leave(self, kind: str, timeout_ms: int) -> None:
        """close() or unsubscribe(): commit (close with auto-commit), revoke through the listener, leave.

        Cancelled on the way (asyncio.run tearing the application down, which cancels a close() in progress):
        LeaveGroup at once, bounded, and the cancellation goes on."""
        try:
            await self._leave(kind, timeout_ms)
        except asyncio.CancelledError:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        self.core.abandon("the consumer was cancelled while leaving")
        sends = [a for a in self.core.drain() if isinstance(a, SendRequest)]
        try:
            async with asyncio.timeout(ABANDON_TIMEOUT_MS / 1000):
                await asyncio.gather(*(self._send(r) for r in sends), return_exceptions=True)
        except TimeoutError:
            log.warning("group %s: LeaveGroup not answered while abandoning", self.core.config.group_id)

    async def _leave(self, kind: str, timeout_ms: int) -> None:
        now_ms = monotonic_ms()
        op = self.core.close(now_ms, timeout_ms) if kind == "close" else self.core.unsubscribe(now_ms)
        deadline = now_ms + timeout_ms + WAIT_SLACK_MS
        while True:
            await self._run_app_actions(raise_errors=False)
            if op.done:
                break
            changed = self._changed
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                log.warning("group %s: %s did not finish within %d ms", self.core.config.group_id, kind, timeout_ms)
                break
            await wait_event(changed, min(remaining, self.core.config.retry_backoff_ms or 100))
            self.core.poll(monotonic_ms())
        self._sync_metadata_topics()

    # --- running the core's actions -----------------------------------------------------------

    def _dispatch(self, *, poke: bool = True) -> None:
        """Carry out what the core asked: requests now; listener calls and callbacks wait for the app's side.

        `poke`: wake a poll() waiting for records, since the core moved on by itself (an answer, a tick,
        metadata); calls made from poll() itself do not, or poll() would never wait."""
        if self._cluster is None:
            return  # not started: the core keeps its actions until start()
        for action in self.core.drain():
            if isinstance(action, SendRequest):
                self._spawn(self._send(action))
            else:
                self._app_actions.append(action)
        self._sync_metadata_topics()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        self._wake.set()
        if poke:
            self._on_activity()

    async def _run_app_actions(self, *, raise_errors: bool = True) -> None:
        self._dispatch(poke=False)
        while self._app_actions:
            action = self._app_actions.popleft()
            if isinstance(action, InvokeListener):
                error = await self._call_listener(action)
                self.core.listener_done(monotonic_ms(), error)
            elif isinstance(action, RunCommitCallback):
                try:
                    outcome = action.callback(action.offsets, action.error)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    log.exception("a commit callback raised")
            self._dispatch(poke=False)
        if raise_errors:
            error = self.core.take_error()
            if error is not None:
                raise error

    async def _call_listener(self, action: InvokeListener) -> BaseException | None:
        listener = self.subscriptions.rebalance_listener
        method = getattr(listener, action.method, None)
        if method is None and action.method == "on_partitions_lost":
            method = getattr(listener, "on_partitions_revoked", None)  # Kafka's default onPartitionsLost
        if method is None:
            return None
        try:
            outcome = method(list(action.partitions))
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            log.error("group %s: %s raised %r", self.core.config.group_id, action.method, exc)
            return exc
        return None

    async def _send(self, request: SendRequest) -> None:
        cluster = self._cluster
        assert cluster is not None
        sent_ms = monotonic_ms()
        group_id = self.core.config.group_id

        def on_response(answer: dict[str, Any], now_ms: int) -> None:
            error_code = answer.get("error_code", 0)
            log.debug("group %s: %s answered in %d ms: error %s", group_id, request.api, now_ms - sent_ms, error_code)
            self.core.on_response(request.request_id, answer, now_ms)

        def on_failure(error: KafkaError, now_ms: int) -> None:
            log.debug("group %s: %s failed after %d ms: %s", group_id, request.api, now_ms - sent_ms, error)
            self.core.on_failure(request.request_id, error, now_ms)

        address = None if request.node is None else request.node.address  # None: FindCoordinator, any broker
        await cluster.exchange(
            address, request.path, request.body, on_response, on_failure, timeout_ms=request.timeout_ms
        )
        self._dispatch()

    async def _tick_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            deadline = self.core.next_deadline_ms()
            now_ms = monotonic_ms()
            if deadline is not None and deadline <= now_ms:
                self.core.tick(now_ms)
                self._dispatch()
                self._wake.clear()
                deadline = self.core.next_deadline_ms()
                if deadline is not None and deadline <= monotonic_ms():
                    await asyncio.sleep(0)  # never spin without yielding
                    continue
            # A poll() blocked on records bounds its own wait by poll_deadline_ms(); only tick() work is ours.
            await wait_event(self._wake, None if deadline is None else deadline - monotonic_ms())

    def _spawn(self, coro: Any) -> None:
        if self._stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, op: GroupOperation, timeout_ms: int) -> None:
        """Wait for a commit or lookup; raise its error. The core expires it at its deadline; the slack covers
        a core that stopped (fatal error, closed) without finishing it."""
        self._dispatch(poke=False)
        deadline = monotonic_ms() + timeout_ms + WAIT_SLACK_MS
        while not op.done:
            changed = self._changed
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"the group operation did not finish within {timeout_ms} ms")
            if self.core.fatal_error is not None:
                raise self.core.fatal_error
            await wait_event(changed, remaining)
        if op.error is not None:
            raise op.error

    # --- metadata -----------------------------------------------------------------------------

    def _on_metadata(self) -> None:
        cluster = self.metadata.cluster
        counts = {topic: n for topic in cluster.topics if (n := cluster.num_partitions(topic))}
        self.core.on_metadata(counts, monotonic_ms())
        self._dispatch()

    def _sync_metadata_topics(self) -> None:
        wanted = self.core.metadata_topics()
        assigned = self.subscriptions.topics()
        if wanted is None:
            if not self.metadata.all_topics:
                self.metadata.all_topics = True
                self.metadata.request_update()
            return
        self.metadata.all_topics = False
        topics = set(wanted) | assigned
        if topics != set(self.metadata.topics):
            self.metadata.set_topics(topics)
        if self.metadata.update_requested and self._cluster is not None:
            self._cluster.wake()
