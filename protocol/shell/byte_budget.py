"""A listener's budget for the bytes of requests it holds, over all its connections.

Design notes: docs/protocol.md, section "protocol/shell/rpc_limits.py" (the RPC listener) and
docs/kafka-listener.md (the Kafka listeners).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

# Frames up to this size never wait for the budget: what they hold is bounded by connections x
# requests in flight instead, so a client's small requests (Metadata, a heartbeat, a fetch, a
# commit) are never stalled behind connections that reserved the whole budget for large frames
# they then send slowly.
SMALL_FRAME_BYTES = 16 * 1024


def budgeted_bytes(frame_bytes: int) -> int:
    """What a frame of `frame_bytes` holds of its listener's budget: all of it, or 0 when small."""
    return frame_bytes if frame_bytes > SMALL_FRAME_BYTES else 0


class ByteBudget:
    """The bytes of request frames held, over all connections of a listener (Kafka's
    queued.max.request.bytes).

    First come, first served: a large frame waiting is not overtaken by small ones. One frame
    larger than the whole budget still goes in when nothing else is held.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.held_bytes = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.held_bytes == 0 or self.held_bytes + size <= self.limit_bytes

    def try_acquire(self, size: int) -> bool:
        """Hold `size` bytes now if they fit and nobody waits ahead; False otherwise (nothing held)."""
        if not self._waiters and self._fits(size):
            self.held_bytes += size
            return True
        return False

    def add(self, size: int) -> None:
        """Count bytes already in memory (a frame that arrived whole in one read): held at once, over
        the limit if need be, so later frames wait for them."""
        self.held_bytes += size

    async def acquire(self, size: int) -> None:
        if not self._waiters and self._fits(size):
            self.held_bytes += size
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)  # granted just as we were cancelled: give it back
            else:
                # Cancelled while waiting; `_grant` may have dropped the entry already. Whoever
                # waited behind it may fit now.
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
                self._grant()
            raise

    def release(self, size: int) -> None:
        self.held_bytes -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            size, future = self._waiters[0]
            if future.done():  # its task was cancelled this tick; its except clause has not run yet
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self.held_bytes += size
            future.set_result(None)
