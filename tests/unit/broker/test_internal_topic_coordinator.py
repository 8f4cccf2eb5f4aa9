"""The shell the group and transaction coordinators share (broker/groups/shell/internal_topic_coordinator.py).

A scripted core stands in for a coordinator (the shell calls three of its methods); the parts the
subclasses set are small recorders. What is checked is the shell's own contract: a core's tick that
raises does not stop the timers, an action no part performs does not swallow the answers after it,
stop stops the parts in order and fails every waiting request with COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kraftpy.broker.groups.actions import Respond
from kraftpy.broker.groups.shell.internal_topic_coordinator import InternalTopicCoordinatorShell
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import wall_ms


class ScriptedCore:
    """Due at once while `ticks_due` > 0; the first tick raises, the others answer the request it took."""

    def __init__(self, ticks_due: int) -> None:
        self.ticks_due = ticks_due
        self.ticks = 0
        self.request_id: Any = None

    def take(self, request_id: Any, now_ms: int) -> list[Any]:
        self.request_id = request_id
        return []

    def next_deadline_ms(self) -> int | None:
        return wall_ms() if self.ticks_due > 0 else None

    def tick(self, now_ms: int) -> list[Any]:
        self.ticks += 1
        self.ticks_due -= 1
        if self.ticks == 1:
            raise RuntimeError("a bug in the core")
        return [Respond(self.request_id, {"ticked": self.ticks})]

    def append_completed(self, append_id: int, error: ErrorCode, now_ms: int) -> list[Any]:
        return []


class Part:
    def __init__(self, name: str, stopped: list[str]) -> None:
        self.name = name
        self.stopped = stopped
        self.reconciled = 0

    async def stop(self) -> None:
        self.stopped.append(self.name)

    def reconcile(self) -> None:
        self.reconciled += 1


class Shell(InternalTopicCoordinatorShell):
    core_name = "test coordinator"

    def __init__(self, core: ScriptedCore) -> None:
        super().__init__(core)
        self.stopped: list[str] = []
        self.loader = Part("loader", self.stopped)  # type: ignore[assignment]
        self.appender = Part("appender", self.stopped)  # type: ignore[assignment]
        self.creator = Part("creator", self.stopped)

    def _parts_in_stop_order(self) -> tuple[Part, ...]:
        return (self.creator, self.loader, self.appender)  # type: ignore[return-value]


async def test_a_tick_that_raises_is_logged_and_the_timers_go_on(caplog: pytest.LogCaptureFixture) -> None:
    core = ScriptedCore(ticks_due=2)
    shell = Shell(core)
    await shell.start()
    try:  # answered by the second tick; the first one's failure pauses the timers a second
        assert await shell._ask(core.take, 30_000, "the timers stopped") == {"ticked": 2}
    finally:
        await shell.stop()
    assert "test coordinator tick failed" in caplog.text
    assert shell.loader.reconciled >= 1  # start follows the topic's leaderships at once


async def test_an_action_no_part_performs_is_logged_and_the_answers_after_it_still_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shell = Shell(ScriptedCore(ticks_due=0))
    with caplog.at_level(logging.ERROR):
        answer = await shell._ask(lambda rid, now_ms: ["an action of no part", Respond(rid, {"ok": True})], 5_000, "")
    assert answer == {"ok": True}
    assert "no shell part performs 'an action of no part'" in caplog.text


async def test_stop_stops_the_parts_in_order_and_fails_the_waiting_requests() -> None:
    shell = Shell(ScriptedCore(ticks_due=0))
    await shell.start()
    waiting = asyncio.create_task(shell._ask(lambda rid, now_ms: [], 60_000, "no answer"))
    await asyncio.sleep(0)
    await shell.stop()
    with pytest.raises(KafkaError) as info:
        await waiting
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert shell.stopped == ["creator", "loader", "appender"]
    assert shell._timer_task is not None and shell._timer_task.done()
    with pytest.raises(KafkaError) as after:
        await shell._ask(lambda rid, now_ms: [Respond(rid, {})], 5_000, "")
    assert after.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
