"""DeferredResponses: hold each controller response until the log commits past its offset.

KRaft's DeferredEventQueue, for the shell. A response is released once every
record appended up to its offset is committed, including responses that wrote
nothing themselves (they may depend on earlier uncommitted records). Offsets
must be added in non-decreasing order, as appends happen. On losing
leadership, `fail_all` hands back everything still waiting; the shell answers
those NOT_CONTROLLER (their records may never commit).
"""

from __future__ import annotations

from collections import deque
from typing import Any


class DeferredResponses:
    def __init__(self) -> None:
        self._queue: deque[tuple[int, Any]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, offset: int, item: Any) -> None:
        if self._queue and offset < self._queue[-1][0]:
            raise ValueError(f"offset {offset} is below the last deferred offset {self._queue[-1][0]}")
        self._queue.append((offset, item))

    def complete_up_to(self, committed_offset: int) -> list[Any]:
        """Items whose offset is <= the committed offset, in the order they were added."""
        out = []
        while self._queue and self._queue[0][0] <= committed_offset:
            out.append(self._queue.popleft()[1])
        return out

    def fail_all(self) -> list[Any]:
        out = [item for _, item in self._queue]
        self._queue.clear()
        return out
