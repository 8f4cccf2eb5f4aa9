"""A listener's budget for the bytes of large answers (Fetch records) it holds, over all its connections.

An answer holds memory from the read that fills it until its last byte is in the socket; a client
that never reads keeps it there. Kafka sends fetched records from the file and holds none; here
they are bytes in memory, so each Kafka listener has a budget (`queued_max_response_bytes`) and
each connection one `AnswerAllowance` of it (a connection makes one large answer at a time). A
Fetch reads no more than its allowance grants, so memory stays bounded however many clients
stop reading, and while the budget is spent a Fetch gets fewer bytes, not none forever.

Design notes: docs/kafka-listener.md, section "Bounds".
"""

from __future__ import annotations

import asyncio


class AnswerBudget:
    """The bytes all of a listener's large answers hold, against `limit_bytes`."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.held_bytes = 0
        self.peak_bytes = 0  # the most ever held at once
        self._room = asyncio.Event()
        self._room.set()

    @property
    def free_bytes(self) -> int:
        return max(0, self.limit_bytes - self.held_bytes)

    def allowance(self) -> AnswerAllowance:
        return AnswerAllowance(self)

    def _moved(self, delta: int) -> None:
        self.held_bytes += delta
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        if self.held_bytes < self.limit_bytes:
            self._room.set()
        else:
            self._room.clear()


class AnswerAllowance:
    """One connection's share of its listener's AnswerBudget: what its answer in the making, or in the
    socket, holds."""

    __slots__ = ("budget", "held_bytes")

    def __init__(self, budget: AnswerBudget) -> None:
        self.budget = budget
        self.held_bytes = 0

    def grant(self, want_bytes: int) -> int:
        """Hold as much of `want_bytes` as the budget has room for (what this answer held counts back
        in) and say how much: the most the answer may read. 0 when the budget is spent."""
        granted = min(max(0, want_bytes), self.held_bytes + self.budget.free_bytes)
        self.hold(granted)
        return granted

    def hold(self, size_bytes: int) -> None:
        """Hold exactly `size_bytes`: what the answer turned out to be (over its grant only by the one
        batch a Fetch always carries when granted anything), or 0 once it is written or dropped."""
        self.budget._moved(size_bytes - self.held_bytes)
        self.held_bytes = size_bytes

    async def wait_for_room(self, timeout_ms: int) -> bool:
        """Wait until the budget has room or `timeout_ms` passes; True when it has room."""
        if self.budget.free_bytes > 0:
            return True
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self.budget._room.wait()
        except TimeoutError:
            return False
        return True
