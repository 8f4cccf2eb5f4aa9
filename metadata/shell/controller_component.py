"""The "controller" component: the asyncio shell that makes a QuorumController the active controller.

Kafka's ControllerServer and the event loop of its QuorumController, on
controller-role nodes. Every decision (activating, renouncing, claiming the
epoch back, packing records into Raft appends, backpressure, when an answer
may go out) is the sans-I/O ControllerDriver's (metadata/controller/driver.py);
this shell hands it Raft's events, the `/controller/<route>` requests and the
timer, and carries out what it returns. Every wait is bounded by
`request_wait_ms`, then answered REQUEST_TIMED_OUT (retriable).
Design notes: docs/metadata.md, "The node shell".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.driver import (
    DEFAULT_MAX_APPEND_BYTES,
    DEFAULT_MAX_UNCOMMITTED_BYTES,
    Append,
    ControllerDriver,
    Effects,
    RaftView,
    append_limits,
    split_payloads,
)
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.quorum_view import describe_quorum
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.settings import settings_from
from kraftpy.protocol.shell.clock import monotonic_ms

__all__ = ["PREFIX", "ControllerComponent", "controller_config_from", "create", "split_payloads"]

log = logging.getLogger(__name__)

PREFIX = "/controller/"
DEFAULT_REQUEST_WAIT_MS = 15_000
# Upper bound of one timer sleep, so a missed wake-up costs at most this long.
MAX_TIMER_SLEEP_MS = 1000
MIN_TICK_GAP_MS = 10
STALE_READ_BREAK = "stale-read"  # fault_injection.STALE_READ, which this layer may not import


def controller_config_from(node_config: Any, cluster_id: str) -> ControllerConfig:
    """The controller's settings that the node config names; the rest keep ControllerConfig's defaults."""
    return ControllerConfig(cluster_id=cluster_id, **settings_from(node_config, ControllerConfig, skip=("cluster_id",)))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


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
        stale_reads: bool = False,
    ) -> None:
        self.node = node
        self.node_id: int = node.config.node_id
        self.raft = raft
        self.metadata = metadata
        raft_config = getattr(raft, "config", None)
        append_bytes, uncommitted_bytes = append_limits(
            max_append_bytes,
            max_uncommitted_bytes,
            raft_max_batch_bytes=_int_or_none(getattr(raft_config, "max_batch_bytes", None)),
            raft_max_uncommitted_bytes=_int_or_none(getattr(raft_config, "max_uncommitted_bytes", None)),
        )
        self.driver = ControllerDriver(
            QuorumController(config, rng=rng or random.Random(), image=metadata.image),
            self.node_id,
            voters=node.config.voter_addresses(),
            committed_offset=metadata.committed_offset,
            max_append_bytes=append_bytes,
            max_uncommitted_bytes=uncommitted_bytes,
        )
        self.request_wait_ms = request_wait_ms
        self.clock = clock
        self._claim_handle: asyncio.TimerHandle | None = None
        self._active = asyncio.Event()
        self._progress = asyncio.Event()  # set on every commit (backpressure waits on it)
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._stopping = False
        self.stale_reads = stale_reads
        metadata.subscribe(self._on_image, self._on_leader_change)

    @property
    def controller(self) -> QuorumController:
        return self.driver.controller

    # --- carrying out the driver's effects -----------------------------------------------------------
    def _apply(self, effects: Effects) -> None:
        if effects.renounced:
            self._active.clear()
            if self._claim_handle is not None:
                self._claim_handle.cancel()
                self._claim_handle = None
            for future, _route, _response in effects.failed:
                if not future.done():
                    future.set_exception(effects.error)
        if effects.activated:
            self._active.set()
            self._wake.set()
        for future, route, response in effects.released:
            if not future.done():
                future.set_result((route, response))
        if effects.claim_after_ms is not None:
            self._schedule_claim(effects.claim_after_ms)

    def _perform(self, appends: Iterable[Append]) -> bool:
        """Hand the driver's appends to Raft in order; False once one is refused (the rest are dropped)."""
        for append in appends:
            try:
                last_offset = self.raft.schedule_atomic_append(append.epoch, list(append.entries))
            except KafkaError as e:
                view = RaftView(self.raft.is_leader, self.raft.epoch, self.raft.leader_id)
                self._apply(self.driver.append_failed(append, e, view))
                return False
            self._apply(self.driver.appended(append, last_offset, self.clock()))
        return True

    # --- Raft events ---------------------------------------------------------------------------------
    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        self._apply(self.driver.on_commit(new, self.metadata.committed_offset, self.clock()))
        self._progress.set()
        self._progress = asyncio.Event()

    def _on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self._apply(self.driver.on_leader_change(leader_id, epoch, self.clock()))

    def _schedule_claim(self, delay_ms: int) -> None:
        loop = asyncio.get_running_loop()
        if self._claim_handle is not None:
            self._claim_handle.cancel()
        self._claim_handle = loop.call_later(delay_ms / 1000, self._claim)

    def _claim(self) -> None:
        self._claim_handle = None
        append = self.driver.claim()
        if append is not None:
            self._perform([append])

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
        while self.driver.claiming:
            if not await self._wait(lambda: self._active, deadline_ms):
                raise KafkaError("the controller is still loading its epoch; retry", ErrorCode.REQUEST_TIMED_OUT)
        while self.driver.backlogged:
            if not await self._wait(lambda: self._progress, deadline_ms):
                raise KafkaError(
                    f"{self.driver.backlog_bytes} bytes of metadata are not committed yet; the quorum is behind, retry",
                    ErrorCode.REQUEST_TIMED_OUT,
                )

    async def submit(self, route: str, request: Any) -> dict[str, Any]:
        """Decide `request`, append its records and answer once they (and all before them) commit."""
        deadline = self.clock() + self.request_wait_ms
        await self._admit(deadline)
        decision = self.driver.decide(request, self.clock())
        response = decision.result.response
        if decision.appends:
            if not self._perform(decision.appends):
                raise self.driver.not_controller_error()
            self._wake.set()  # the idle NoOp deadline moved
        if not self.driver.must_wait(decision):
            return wire.encode_response(route, response)
        future: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self.driver.defer((future, route, response))
        remaining = max(0, deadline - self.clock())
        try:
            async with asyncio.timeout(remaining / 1000):
                _, answer = await future
        except TimeoutError:
            raise KafkaError(
                f"{route}: not committed within {self.request_wait_ms} ms; the outcome is unknown, check and retry",
                ErrorCode.REQUEST_TIMED_OUT,
            ) from None
        return wire.encode_response(route, answer)

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
                leader_address=self.driver.address_of(leader),
            )
        return describe_quorum(self.raft.status(), self.raft)

    async def _register_read(self, body: dict[str, Any]) -> dict[str, Any]:
        """A linearizable read of a register: the active controller confirms its Raft leadership with a
        quorum round after the request arrived (the read index) and waits until its state machine has
        applied up to that index, then answers from the committed image. A deposed leader's round never
        completes: it answers NOT_CONTROLLER or REQUEST_TIMED_OUT, never an old value."""
        key = wire.register_read_key(body)
        if not self.stale_reads:
            if not self.controller.is_active:
                raise self.driver.not_controller_error()
            try:
                await self.raft.read_barrier(self.request_wait_ms)
            except KafkaError as e:
                if e.code is ErrorCode.REQUEST_TIMED_OUT:
                    raise
                raise self.driver.not_controller_error() from None  # the raft leadership is gone
        return {"value": self.metadata.image.registers.get(key)}

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
        self._perform(self.driver.tick(self.clock()).appends)

    # --- component -----------------------------------------------------------------------------------
    def routes(self) -> Mapping[str, Any]:
        out: dict[str, Any] = {PREFIX + route: self._route(route) for route in wire.ROUTES}
        out[PREFIX + "describe_quorum"] = self._describe_quorum
        out[PREFIX + "register_read"] = self._register_read
        return out

    async def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._timer_loop(), name="controller-timers")

    async def stop(self, graceful: bool) -> None:
        self._stopping = True
        self._apply(self.driver.stop(self.raft.leader_id))
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
            "pending_responses": len(self.driver.deferred),
            "uncommitted_bytes": self.driver.backlog_bytes,
            "activations": self.driver.activations,
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
    # KRAFTPY_TEST_BREAK=stale-read (broker/shell/fault_injection.py, which validates and logs it; fault-run
    # tests only): a register read skips the read index and any controller answers from its own image
    stale_reads = os.environ.get("KRAFTPY_TEST_BREAK") == STALE_READ_BREAK
    config = controller_config_from(node.config, node.cluster_id)
    return ControllerComponent(node, raft, metadata, config, stale_reads=stale_reads)
