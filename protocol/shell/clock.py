"""The two clocks of the shells, in milliseconds: the one place a clock is read.

The cores take `now_ms` as an argument (they never read a clock);
the shells pass `monotonic_ms()` for every duration they measure (ISR lag,
produce and fetch timeouts, backoffs), so a wall-clock jump cannot fence a
follower or expire a request. Record timestamps, retention and producer-id
expiry compare against batch timestamps, which are wall-clock times, so they
get `wall_ms()`.
"""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
