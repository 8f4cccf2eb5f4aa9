"""CPU time a process has used so far, from /proc/<pid>/stat: the benches' clock for other processes.

The benches that put a figure on the nodes' CPU (per request, per commit, per
record) read it here; time.process_time only covers the bench's own process.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    return sum(cpu_times(pid))
