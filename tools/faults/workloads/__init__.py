"""The fault run's workloads, by `--workload` name: one module each, with `make(ctx)`, `READ_COMMITTED`, `ALLOWED`.

`make(ctx)` returns an object with `async prepare()` (before the clock and the nemesis start: coordinators
loaded), `async run(end) -> WorkloadStats` (under the nemesis, until `end`), `async drain()` (after the
heal) and `stats`; `READ_COMMITTED` says how the final read back reads; `ALLOWED` names the checker's
classes that are reported without failing the run (Jepsen's allowed-error-types).
A new workload is one module and one line in WORKLOADS.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import ModuleType

from kraftpy.tools.faults.history import HistoryWriter
from kraftpy.tools.faults.workloads import queue, txn


@dataclass(frozen=True)
class WorkloadContext:
    history: HistoryWriter
    bootstrap: str
    topic: str
    keys: int  # key k is partition k of `topic`
    max_ops: int
    rng: random.Random
    rate_per_s: float | None
    client: str  # kraftpy | confluent (clients.CLIENTS)
    sub_via: str  # assign | subscribe


# groups and register run the queue workload beside their own processes (groups.py, register.py, run.py).
WORKLOADS: dict[str, ModuleType] = {
    "queue": queue,
    "txn": txn,
    "groups": queue,
    "register": queue,
}
