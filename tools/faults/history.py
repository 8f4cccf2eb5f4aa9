"""Writing a history as docs/history-format.md's JSON Lines, the format `kraftpy check` reads.

Every event gets `time` in nanoseconds of the monotonic clock, so invocations
and completions are ordered as they happened; nemesis events are written with
the process "nemesis", which the checker skips.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class RunEnd:
    """When the workload under faults ends: at its time limit, later while the nemesis finishes its first round
    (a run must have done every named fault), and never past `hard_limit_s` beyond the time limit."""

    def __init__(self, time_s: float, *, hard_limit_s: float = 120.0) -> None:
        self.at = time.monotonic() + time_s
        self.time_limit_at = self.at
        self._limit = self.at + hard_limit_s

    def hold_until_done(self) -> None:
        """The nemesis calls this before each fault of its first round."""
        self.at = max(self.at, min(time.monotonic() + 5.0, self._limit))

    def extend_to(self, at: float) -> None:
        """Keep the workload going until monotonic time `at` (an overlapping schedule's last heal), within
        the hard limit."""
        self.at = max(self.at, min(at, self._limit))

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def time_limit_passed(self) -> bool:
        """Past the time limit asked for, whatever holds the end later."""
        return time.monotonic() >= self.time_limit_at


class HistoryWriter:
    """Appends events to a .jsonl file (flushed per line, so a crashed run still leaves its history)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("w", encoding="utf-8")
        self.events = 0

    def event(self, process: int | str, type_: str, f: str, **fields: Any) -> None:
        line = {"process": process, "type": type_, "f": f, **fields, "time": time.monotonic_ns()}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()
        self.events += 1

    def nemesis(self, f: str, value: Any) -> None:
        self.event("nemesis", "info", f, value=value)

    def close(self) -> None:
        self._file.close()
