"""buffer_memory accounting for the producer (sans-I/O), as Kafka's BufferPool.

Every open batch holds a reservation of max(batch_size, its first record)
bytes until the batch is acknowledged or fails. When the pool cannot cover a
new reservation, the caller queues a Waiter; released memory goes to waiters
strictly first come, first served, so a large record is not starved by a
stream of small ones. The shell turns a waiter into an awaitable bounded by
max_block_ms and cancels it on timeout.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kraftpy.client.errors import RecordTooLargeError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Waiter:
    """A queued reservation; `on_grant` is called once the bytes are reserved for it."""

    size: int
    on_grant: Callable[[], None] = field(default=lambda: None)
    granted: bool = False
    cancelled: bool = False


class BufferPool:
    def __init__(self, total_memory: int) -> None:
        self.total_memory = total_memory
        self.available = total_memory
        self._waiters: deque[Waiter] = deque()

    @property
    def queued(self) -> int:
        """Callers waiting for memory; while any wait, every batch counts as ready (Kafka's `exhausted`)."""
        return len(self._waiters)

    @property
    def used(self) -> int:
        return self.total_memory - self.available

    def check_size(self, size: int) -> None:
        if size > self.total_memory:
            raise RecordTooLargeError(
                f"the record is {size} bytes when serialized, which is larger than the total memory buffer "
                f"configured with buffer_memory ({self.total_memory})"
            )

    def try_allocate(self, size: int) -> bool:
        """Reserve `size` bytes now if nobody is queued ahead and they are free."""
        self.check_size(size)
        if not self._waiters and self.available >= size:
            self.available -= size
            return True
        return False

    def enqueue(self, size: int, on_grant: Callable[[], None] | None = None) -> Waiter:
        """Queue for `size` bytes; granted at once if possible (check `waiter.granted`)."""
        self.check_size(size)
        waiter = Waiter(size, on_grant or (lambda: None))
        self._waiters.append(waiter)
        self._grant()
        return waiter

    def release(self, size: int) -> None:
        if size <= 0:
            return
        self.available += size
        if self.available > self.total_memory:
            raise AssertionError(f"buffer pool over-released: {self.available} > {self.total_memory}")
        self._grant()

    def cancel(self, waiter: Waiter) -> None:
        """The waiter gave up (max_block_ms passed). Memory granted in the meantime goes back to the pool."""
        if waiter.cancelled:
            return
        waiter.cancelled = True
        if waiter.granted:
            self.release(waiter.size)
            return
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        self._grant()  # the head may have been the one blocking the others

    def _grant(self) -> None:
        while self._waiters and self._waiters[0].size <= self.available:
            waiter = self._waiters.popleft()
            self.available -= waiter.size
            waiter.granted = True
            try:
                waiter.on_grant()
            except Exception:  # a broken waiter must not keep memory from the others
                log.exception("buffer pool waiter callback failed")
