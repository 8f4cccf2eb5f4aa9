"""The "controller" component: the asyncio shell that makes a QuorumController the active controller.

Kafka's ControllerServer and the event loop of its QuorumController, on
controller-role nodes. Everything it decides comes from the sans-I/O
QuorumController; this shell only moves data:

- **Commits.** Subscribed to the node's metadata component: each new
  committed image goes to `controller.handle_commit`, then every deferred
  response whose offset is now committed is sent.
- **Activating.** The raft component announces this node's leadership of
  epoch E only once the listeners applied everything before E's first entry
  (as KRaft does), so the controller activates at once on that announcement.
- **Renouncing.** Leadership lost: `deactivate` with the new leader's id and
  address, and every waiting response is answered NOT_CONTROLLER (its
  records may never commit). An append that fails while still leader does
  the same (as KRaft renounces), then claims the epoch back: it appends one
  NoOp and activates once that commits, when everything appended before it
  has committed or is gone. Requests that arrive meanwhile wait, bounded.
- **Requests and timers.** `/controller/<route>` bodies decode through
  `wire`, go to `controller.handle`; records are packed into entries of at
  most 128 KiB and appended to Raft in one atomic append (split only past the
  Raft batch size limit, as KRaft splits non-atomic batches); the response waits in DeferredResponses until its
  offset commits. One timer task runs `controller.tick` at
  `next_deadline_ms` (fencing, rebalance, NoOps).

Every wait is bounded: a request waits at most `request_wait_ms` for
activation, for Raft backpressure and for its commit, then is answered
REQUEST_TIMED_OUT (retriable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.deferred import DeferredResponses
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.quorum_view import describe_quorum
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import NoOpRecord, encode_entries, encode_record
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.settings import settings_from
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import format_address

log = logging.getLogger(__name__)

PREFIX = "/controller/"
# Raft's default max_batch_bytes is 1 MiB per append and each entry costs 16 bytes more; keep a margin.
DEFAULT_MAX_APPEND_BYTES = 1000 * 1024
ENTRY_OVERHEAD_BYTES = 16
# Records are packed into Raft entries of at most this size (records of one entry share its offset):
# few entries per decision, each far below Raft's fetch and batch limits.
MAX_ENTRY_BYTES = 128 * 1024
# Raft refuses appends while 8 MiB of proposals are uncommitted; stop taking new work at half of it.
DEFAULT_MAX_UNCOMMITTED_BYTES = 4 * 1024 * 1024
DEFAULT_REQUEST_WAIT_MS = 15_000
CLAIM_RETRY_MS = 100
# Upper bound of one timer sleep, so a missed wake-up costs at most this long.
MAX_TIMER_SLEEP_MS = 1000
MIN_TICK_GAP_MS = 10


def controller_config_from(node_config: Any, cluster_id: str) -> ControllerConfig:
    """The controller's settings that the node config names; the rest keep ControllerConfig's defaults."""
    return ControllerConfig(cluster_id=cluster_id, **settings_from(node_config, ControllerConfig, skip=("cluster_id",)))


def split_payloads(payloads: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """Consecutive chunks of at most `max_bytes` (entry overhead included); one chunk when it fits."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for p in payloads:
        cost = len(p) + ENTRY_OVERHEAD_BYTES
        if chunks[-1] and size + cost > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(p)
        size += cost
    return chunks


class ControllerComponent:
    name = "controller"

    def __init__(
        self,
        node: Any,
        raft: Any,
        metadata: Any,
        config: ControllerConfig,
        *,
        rng: random.Random | None = None,
        request_wait_ms: int = DEFAULT_REQUEST_WAIT_MS,
        max_append_bytes: int = DEFAULT_MAX_APPEND_BYTES,
        max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.node = node
        self.node_id: int = node.config.node_id
        self.raft = raft
        self.metadata = metadata
        self.controller = QuorumController(config, rng=rng or random.Random(), image=metadata.image)
        self.request_wait_ms = request_wait_ms
        raft_max = getattr(getattr(raft, "config", None), "max_batch_bytes", None)
        # Stay under Raft's own per-append limit, whatever it is configured to.
        self.max_append_bytes = (
            min(max_append_bytes, raft_max - 1024) if isinstance(raft_max, int) else max_append_bytes
        )
        raft_backlog = getattr(getattr(raft, "config", None), "max_uncommitted_bytes", None)
        # Stop taking new work at half of Raft's uncommitted-bytes bound, so appends are not refused.
        self.max_uncommitted_bytes = (
            min(max_uncommitted_bytes, raft_backlog // 2) if isinstance(raft_backlog, int) else max_uncommitted_bytes
        )
        self.clock = clock
        self.deferred = DeferredResponses()
        self._voters: dict[int, tuple[str, int]] = node.config.voter_addresses()
        self._committed_offset = metadata.committed_offset
        self._last_appended = -1  # last offset this controller appended (in any epoch)
        self._claim_epoch: int | None = None  # Raft leader of this epoch, not active yet
        self._barrier: int | None = None  # offset of the claiming NoOp
        self._claim_handle: asyncio.TimerHandle | None = None
        self._active = asyncio.Event()
        self._progress = asyncio.Event()  # set on every commit (backpressure waits on it)
        self._wake = asyncio.Event()
        self._backlog: deque[tuple[int, int]] = deque()  # (last offset, bytes) appended, not committed
        self._backlog_bytes = 0
        self._timer: asyncio.Task[None] | None = None
        self._stopping = False
        self.activations = 0
        self.renounces = 0
        metadata.subscribe(self._on_image, self._on_leader_change)

    # --- addresses -----------------------------------------------------------------------------------
    def _address_of(self, node_id: int | None) -> str | None:
        if node_id is None or node_id not in self._voters:
            return None
        return format_address(*self._voters[node_id])

    # --- Raft events ---------------------------------------------------------------------------------
    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        self.controller.handle_commit(new)
        self._committed_offset = self.metadata.committed_offset
        while self._backlog and self._backlog[0][0] <= self._committed_offset:
            self._backlog_bytes -= self._backlog.popleft()[1]
        if self._claim_epoch is not None and self._barrier is not None and self._committed_offset >= self._barrier:
            self._activate(self._claim_epoch)
        for future, route, response in self.deferred.complete_up_to(self._committed_offset):
            if not future.done():
                future.set_result((route, response))
        self._progress.set()
        self._progress = asyncio.Event()

    def _on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if leader_id == self.node_id:
            if self.controller.is_active and self.controller.epoch == epoch:
                return
            self._renounce(leader_id, why=f"new epoch {epoch}")
            self._activate(epoch)  # Raft announces us only once the log before `epoch` is applied
        else:
            self._renounce(leader_id, why=f"leader is now {leader_id} in epoch {epoch}")

    def _renounce(self, leader_id: int | None, why: str) -> None:
        was_active = self.controller.is_active
        self.controller.deactivate(leader_id, self._address_of(leader_id))
        self._claim_epoch = None
        self._barrier = None
        self._active.clear()
        if self._claim_handle is not None:
            self._claim_handle.cancel()
            self._claim_handle = None
        self._backlog.clear()
        self._backlog_bytes = 0
        error = self.controller.not_controller_error()
        for future, _route, _response in self.deferred.fail_all():
            if not future.done():
                future.set_exception(error)
        if was_active:
            self.renounces += 1
            log.info("no longer the active controller: %s", why)

    def _schedule_claim(self, delay_ms: int) -> None:
        loop = asyncio.get_running_loop()
        if self._claim_handle is not None:
            self._claim_handle.cancel()
        self._claim_handle = loop.call_later(delay_ms / 1000, self._claim)

    def _claim(self) -> None:
        """Claim our epoch back after a failed append: a NoOp, and activation once it commits."""
        self._claim_handle = None
        epoch = self._claim_epoch
        if epoch is None or self._stopping:
            return
        try:
            self._barrier = self.raft.schedule_atomic_append(epoch, [encode_record(NoOpRecord())])
        except KafkaError as e:
            if self.raft.is_leader and self.raft.epoch == epoch:
                log.debug("claiming epoch %d: append failed (%s); retrying", epoch, e)
                self._schedule_claim(CLAIM_RETRY_MS)
            return
        self._last_appended = self._barrier
        if self._committed_offset >= self._barrier:
            self._activate(epoch)

    def _activate(self, epoch: int) -> None:
        self._claim_epoch = None
        self._barrier = None
        # Everything before the epoch (or the claiming NoOp) is committed; whatever we appended in an
        # older epoch and is not in the committed log is gone (truncated). Offsets start from here.
        self._last_appended = self._committed_offset
        self.controller.activate(epoch, self.clock())
        self.activations += 1
        self._active.set()
        self._wake.set()
        log.info("active controller for epoch %d at offset %d", epoch, self._committed_offset)

    # --- appending -----------------------------------------------------------------------------------
    def _append(self, records: tuple[Any, ...]) -> bool:
        """Append a decision's records; False (after renouncing) when Raft refused them."""
        epoch = self.controller.epoch
        assert epoch is not None
        payloads = encode_entries(records, MAX_ENTRY_BYTES)
        try:
            for chunk in split_payloads(payloads, self.max_append_bytes):
                last = self.raft.schedule_atomic_append(epoch, chunk)
                size = sum(len(p) for p in chunk)
                self._last_appended = last
                self._backlog.append((last, size))
                self._backlog_bytes += size
        except KafkaError as e:
            log.warning("append of %d metadata records failed in epoch %d: %s", len(records), epoch, e)
            still_leader = self.raft.is_leader and self.raft.epoch == epoch
            self._renounce(self.node_id if still_leader else self.raft.leader_id, why=f"append failed: {e}")
            if still_leader:  # our earlier records may still commit: claim again behind them
                self._claim_epoch = epoch
                self._schedule_claim(CLAIM_RETRY_MS)
            return False
        return True

    # --- requests ------------------------------------------------------------------------------------
    async def _wait(self, event_getter: Callable[[], asyncio.Event], deadline_ms: int) -> bool:
        remaining = deadline_ms - self.clock()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining / 1000):
                await event_getter().wait()
        except TimeoutError:
            return False
        return True

    async def _admit(self, deadline_ms: int) -> None:
        """Wait (bounded) while this node is claiming leadership or Raft is backed up."""
        while self._claim_epoch is not None and not self.controller.is_active:
            if not await self._wait(lambda: self._active, deadline_ms):
                raise KafkaError("the controller is still loading its epoch; retry", ErrorCode.REQUEST_TIMED_OUT)
        while self.controller.is_active and self._backlog_bytes > self.max_uncommitted_bytes:
            if not await self._wait(lambda: self._progress, deadline_ms):
                raise KafkaError(
                    f"{self._backlog_bytes} bytes of metadata are not committed yet; the quorum is behind, retry",
                    ErrorCode.REQUEST_TIMED_OUT,
                )

    async def submit(self, route: str, request: Any) -> dict[str, Any]:
        """Decide `request`, append its records and answer once they (and all before them) commit."""
        deadline = self.clock() + self.request_wait_ms
        await self._admit(deadline)
        result = self.controller.handle(request, self.clock())
        if not self.controller.is_active:
            return wire.encode_response(route, result.response)
        if result.records:
            if not self._append(result.records):
                raise self.controller.not_controller_error()
            self._wake.set()  # the idle NoOp deadline moved
        elif not self.deferred and self._last_appended <= self._committed_offset:
            return wire.encode_response(route, result.response)
        future: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self.deferred.add(self._last_appended, (future, route, result.response))
        remaining = max(0, deadline - self.clock())
        try:
            async with asyncio.timeout(remaining / 1000):
                _, response = await future
        except TimeoutError:
            raise KafkaError(
                f"{route}: not committed within {self.request_wait_ms} ms; the outcome is unknown, check and retry",
                ErrorCode.REQUEST_TIMED_OUT,
            ) from None
        return wire.encode_response(route, response)

    def _route(self, route: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return await self.submit(route, wire.decode_request(route, body))

        handle.__name__ = route
        return handle

    async def _describe_quorum(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.raft.is_leader:
            leader = self.raft.leader_id
            raise KafkaError(
                "This node is not the quorum leader" + (f"; the leader is {leader}" if leader is not None else ""),
                ErrorCode.NOT_CONTROLLER,
                leader_id=leader,
                leader_address=self._address_of(leader),
            )
        return describe_quorum(self.raft.status(), self.raft)

    # --- timers --------------------------------------------------------------------------------------
    async def _timer_loop(self) -> None:
        while not self._stopping:
            now = self.clock()
            deadline = self.controller.next_deadline_ms(now)
            sleep_ms = MAX_TIMER_SLEEP_MS if deadline is None else min(MAX_TIMER_SLEEP_MS, max(0, deadline - now))
            if sleep_ms > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(sleep_ms / 1000):
                        await self._wake.wait()
                continue
            try:
                self._tick()
            except Exception:  # a bug in a decision must not stop the timers for good
                log.exception("controller tick failed")
                await asyncio.sleep(MAX_TIMER_SLEEP_MS / 1000)
                continue
            after = self.controller.next_deadline_ms(self.clock())
            if after is not None and after <= now:  # nothing moved the deadline (e.g. backpressure): no spinning
                await asyncio.sleep(MIN_TICK_GAP_MS / 1000)

    def _tick(self) -> None:
        if not self.controller.is_active or self._backlog_bytes > self.max_uncommitted_bytes:
            return
        result = self.controller.tick(self.clock())
        if result.records:
            self._append(result.records)

    # --- component -----------------------------------------------------------------------------------
    def routes(self) -> Mapping[str, Any]:
        out: dict[str, Any] = {PREFIX + route: self._route(route) for route in wire.ROUTES}
        out[PREFIX + "describe_quorum"] = self._describe_quorum
        return out

    async def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._timer_loop(), name="controller-timers")

    async def stop(self, graceful: bool) -> None:
        self._stopping = True
        self._renounce(self.raft.leader_id if self.raft.leader_id != self.node_id else None, why="stopping")
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    def status(self) -> dict[str, Any]:
        image = self.controller.committed_image
        return {
            "active": self.controller.is_active,
            "epoch": self.controller.epoch,
            "fenced_brokers": {b.broker_id: b.fenced for b in image.brokers.values()},
            "pending_responses": len(self.deferred),
            "uncommitted_bytes": self._backlog_bytes,
            "activations": self.activations,
        }


def create(node: Any) -> ControllerComponent | None:
    """Factory for node/process.py: controller-role nodes only."""
    if not node.config.is_controller:
        return None
    try:
        metadata = node.component("metadata")
        raft = node.component("raft")
    except LookupError:  # no Raft on this node: nothing to be the active controller of
        log.error("the controller role needs the raft and metadata components; not starting the controller")
        return None
    return ControllerComponent(node, raft, metadata, controller_config_from(node.config, node.cluster_id))
