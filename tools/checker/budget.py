"""Time and memory limits for a check: exceeding either gives "unknown", never a verdict.

The deadline is on the monotonic clock, which is system-wide on Linux, so a
deadline computed in the parent holds in forked worker processes too. Memory
is the resident set size of the current process, read from /proc (a cheap
read; the search calls `exceeded` only every few thousand steps).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident memory of this process, or 0 where /proc is not available."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(frozen=True, slots=True)
class Budget:
    deadline: float | None = None  # time.monotonic() value
    memory_bytes: int | None = None  # per process

    @classmethod
    def from_limits(cls, timeout_s: float | None, memory_mb: float | None) -> Budget:
        return cls(
            None if timeout_s is None else time.monotonic() + timeout_s,
            None if memory_mb is None else int(memory_mb * 1024 * 1024),
        )

    def exceeded(self) -> str | None:
        """Why the budget is spent ("timeout" or "memory"), or None."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "timeout"
        if self.memory_bytes is not None and rss_bytes() >= self.memory_bytes:
            return "memory"
        return None

    def split(self, workers: int) -> Budget:
        """The budget of one of `workers` processes sharing the memory limit."""
        if self.memory_bytes is None or workers <= 1:
            return self
        return Budget(self.deadline, self.memory_bytes // workers)
