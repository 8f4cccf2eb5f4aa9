"""Virtual time: milliseconds that only the loop moves, and never backwards."""

from __future__ import annotations


class VirtualClock:
    """The simulation's one clock; cores get `now_ms` from it as an argument."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def advance_to(self, time_ms: int) -> None:
        # An event scheduled in the past runs "now": time is monotonic as a real monotonic clock.
        self.now_ms = max(self.now_ms, time_ms)
