"""The fault run's workloads, by `--workload` name: one module each, exporting a `WORKLOAD` (entry.py).

A `Workload` says what the run starts, records and checks for it (entry.py); run.py drives every one the
same way. A new workload is one module and one line in WORKLOADS.
"""

from __future__ import annotations

from kraftpy.tools.faults.workloads import groups, queue, register, txn
from kraftpy.tools.faults.workloads.entry import Beside, RunCluster, Workload, WorkloadContext

WORKLOADS: dict[str, Workload] = {
    "queue": queue.WORKLOAD,
    "txn": txn.WORKLOAD,
    "groups": groups.WORKLOAD,
    "register": register.WORKLOAD,
}

__all__ = ["WORKLOADS", "Beside", "RunCluster", "Workload", "WorkloadContext"]
