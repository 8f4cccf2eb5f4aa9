"""Deadlines by key, cheap to move: the coordinator's stand-in for Kafka's purgatories.

Every heartbeat moves its member's deadline, so rescheduling must be O(log n)
without searching: a heap of (deadline, seq, key) plus the live deadline per
key; superseded heap entries are skipped when they surface and the heap is
rebuilt when stale entries dominate.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable


class TimerQueue:
    def __init__(self) -> None:
        self._deadlines: dict[Hashable, int] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._deadlines

    def deadline(self, key: Hashable) -> int | None:
        return self._deadlines.get(key)

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        """Set (or move) the deadline of `key`."""
        self._deadlines[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadlines):
            self._heap = [(d, next(self._seq), k) for k, d in self._deadlines.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    def _drop_stale_top(self) -> None:
        while self._heap:
            deadline, _, key = self._heap[0]
            if self._deadlines.get(key) == deadline:
                return
            heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Hashable | None:
        """The earliest key whose deadline is at or before `now_ms`, removed; None when nothing is due."""
        self._drop_stale_top()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._deadlines[key]
        return key
