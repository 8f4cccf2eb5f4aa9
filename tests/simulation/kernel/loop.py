"""The deterministic event loop: one seeded generator, one queue ordered by (time, sequence)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from tests.simulation.kernel.clock import VirtualClock


class Loop:
    """Runs callbacks in virtual-time order; ties run in the order they were scheduled.

    `rng` is the run's only source of randomness (network, disk, faults and
    workload draws all come from it), so a run is a pure function of its seed
    and configuration.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self._queue: list[tuple[int, int, Callable[[], object]]] = []
        self._seq = 0
        self.events = 0

    @property
    def now(self) -> int:
        return self.clock.now_ms

    @property
    def next_time(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def at(self, time_ms: int, fn: Callable[[], object]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(time_ms, self.now), self._seq, fn))

    def after(self, delay_ms: int, fn: Callable[[], object]) -> None:
        self.at(self.now + delay_ms, fn)

    def step(self) -> bool:
        """Run the next event; False when nothing is scheduled."""
        if not self._queue:
            return False
        time_ms, _, fn = heapq.heappop(self._queue)
        self.clock.advance_to(time_ms)
        self.events += 1
        fn()
        return True

    def run_until(
        self, predicate: Callable[[], bool], deadline_ms: int, after_event: Callable[[], None] | None = None
    ) -> bool:
        """Run events until `predicate()` holds (checked before each event) or the next event is past
        `deadline_ms` (the clock then moves to the deadline). Returns whether the predicate held."""
        while not predicate():
            if not self._queue or self._queue[0][0] > deadline_ms:
                self.clock.advance_to(deadline_ms)
                return predicate()
            self.step()
            if after_event is not None:
                after_event()
        return True

    def every(
        self, interval_ms: int | tuple[int, int], fn: Callable[[], object], *, first_ms: int | None = None
    ) -> None:
        """Call `fn` forever, every `interval_ms` (or a delay drawn from the (low, high) range each time)."""

        def delay() -> int:
            return interval_ms if isinstance(interval_ms, int) else self.rng.randint(*interval_ms)

        def run() -> None:
            fn()
            self.after(delay(), run)

        self.after(delay() if first_ms is None else first_ms, run)
