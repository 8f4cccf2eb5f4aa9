"""What the group and transaction coordinator shells share: a core over an internal topic, run.

Both cores (broker/groups/coordinator.py, broker/txn/coordinator.py) keep their state in the partitions of
an internal topic this broker leads: the loader follows those leaderships, the appender writes what the
core asks, pending answers wait for the core's `Respond`, and one timer task calls the core's `tick` at
its next deadline. This is that lifecycle, once; each shell adds its handlers, its extra actions (the
transaction coordinator's markers) and its status. Docs: docs/groups.md, "internal_topic_coordinator.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kraftpy.broker.groups.actions import Append, Respond
from kraftpy.broker.groups.shell.appender import OffsetsAppender
from kraftpy.broker.groups.shell.partition_loader import OffsetsLoader
from kraftpy.broker.groups.shell.pending import PendingAnswers
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import wall_ms

log = logging.getLogger(__name__)

# Longest sleep of the timer task, so a missed re-arm costs at most this long; also how often the
# loader re-checks this broker's leaderships of the internal topic (leadership changes also call
# on_metadata directly: this is a safety net).
MAX_TIMER_SLEEP_MS = 1_000


class Stoppable(Protocol):
    async def stop(self) -> None: ...


class CoordinatorCore(Protocol):
    """The calls the shared shell makes on a coordinator core."""

    def next_deadline_ms(self) -> int | None: ...

    def tick(self, now_ms: int) -> list[Any]: ...

    def append_completed(self, append_id: int, error: ErrorCode, now_ms: int) -> list[Any]: ...


class InternalTopicCoordinatorShell:
    """Start, stop, actions, appends and timers of one coordinator core; subclasses set the parts."""

    core_name = "coordinator"  # in log lines: "group coordinator", "transaction coordinator"

    def __init__(self, coordinator: CoordinatorCore) -> None:
        self.coordinator = coordinator
        self._pending = PendingAnswers()
        self._rearm = asyncio.Event()
        self._timer_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        # Set by the subclass's constructor (they take this object's callbacks).
        self.loader: OffsetsLoader
        self.appender: OffsetsAppender

    def _parts_in_stop_order(self) -> Sequence[Stoppable]:
        raise NotImplementedError

    def _perform_other(self, action: Any) -> None:
        """An action of this core's own beyond Respond and Append. One no part performs is a bug: logged,
        and the actions after it still performed (raising would leave their requests unanswered)."""
        log.error("%s: no shell part performs %r", self.core_name, action)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        name = f"kraftpy-{self.core_name.replace(' ', '-')}-timers"
        self._timer_task = asyncio.get_running_loop().create_task(self._timer_loop(), name=name)
        self.on_metadata()

    async def stop(self) -> None:
        """Stop every part (loaded partitions unloaded), then the timers; waiting requests get
        COORDINATOR_NOT_AVAILABLE, which clients retry at the coordinator they find next."""
        if self._stopped:
            return
        self._stopped = True
        for part in self._parts_in_stop_order():
            await part.stop()
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
        self._pending.fail_all(KafkaError("the broker is shutting down", ErrorCode.COORDINATOR_NOT_AVAILABLE))

    def on_metadata(self) -> None:
        """The replica manager applied an image: follow this broker's leaderships of the internal topic."""
        if self._started and not self._stopped:
            self.loader.reconcile()

    # -- requests ----------------------------------------------------------------------------------------------

    async def _ask(self, start: Callable[[int, int], list[Any]], backstop_ms: int, message: str) -> dict[str, Any]:
        """Run one core call (request id, now_ms) and wait at most `backstop_ms` for its answer: the core
        answers every request it accepted, so the bound is a backstop against a bug."""
        if self._stopped:
            raise KafkaError("the broker is shutting down", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return await self._pending.ask(
            lambda request_id: self.perform(start(request_id, wall_ms())), backstop_ms, message
        )

    # -- actions -----------------------------------------------------------------------------------------------

    def perform(self, actions: list[Any]) -> None:
        """Carry out the core's actions in order, then re-arm the timer."""
        for action in actions:
            if isinstance(action, Respond):
                self._pending.respond(action.request_id, action.body)
            elif isinstance(action, Append):
                epoch = self.loader.epoch(action.partition)
                self.appender.submit(action, -1 if epoch is None else epoch)
            else:
                self._perform_other(action)
        self._rearm.set()

    def _append_completed(self, append_id: int, error: ErrorCode) -> None:
        if not self._stopped:
            self.perform(self.coordinator.append_completed(append_id, error, wall_ms()))

    def _reload(self, partition: int) -> None:
        if not self._stopped:
            self.loader.reload(partition)

    # -- timers ------------------------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        next_reconcile_ms = wall_ms() + MAX_TIMER_SLEEP_MS
        while True:
            deadline_ms = self.coordinator.next_deadline_ms()
            now_ms = wall_ms()
            if now_ms >= next_reconcile_ms:
                next_reconcile_ms = now_ms + MAX_TIMER_SLEEP_MS
                try:
                    self.loader.reconcile()
                except Exception:
                    log.exception("%s: following the internal topic's leaderships failed", self.core_name)
            if deadline_ms is not None and deadline_ms <= now_ms:
                try:
                    self.perform(self.coordinator.tick(now_ms))
                except Exception:  # a core bug must not stop the timers of every group or transaction
                    log.exception("%s tick failed", self.core_name)
                    await asyncio.sleep(MAX_TIMER_SLEEP_MS / 1000)
                await asyncio.sleep(0)  # let requests in between two due timers
                continue
            sleep_ms = MAX_TIMER_SLEEP_MS if deadline_ms is None else min(MAX_TIMER_SLEEP_MS, deadline_ms - now_ms)
            self._rearm.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep_ms / 1000):
                    await self._rearm.wait()
