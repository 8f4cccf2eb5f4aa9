"""The fault run's workloads, by `--workload` name: one module each, exporting a `WORKLOAD` (entry.py).

A `Workload` says what the run starts, records and checks for it (entry.py); run.py drives every one the
same way. A new workload is one module and one line in WORKLOADS. The modules are imported when a run
asks for one: a group member process (group_member.py, in this package) starts without their imports.
"""

from __future__ import annotations

import importlib

from kraftpy.tools.faults.workloads.entry import Beside, RunCluster, Workload, WorkloadContext

WORKLOADS: dict[str, str] = {  # name -> its module
    "queue": "kraftpy.tools.faults.workloads.queue",
    "txn": "kraftpy.tools.faults.workloads.txn",
    "groups": "kraftpy.tools.faults.workloads.groups",
    "register": "kraftpy.tools.faults.workloads.register",
}


def workload(name: str) -> Workload:
    """The workload named `name` (a key of WORKLOADS)."""
    found: Workload = importlib.import_module(WORKLOADS[name]).WORKLOAD
    return found


__all__ = ["WORKLOADS", "Beside", "RunCluster", "Workload", "WorkloadContext", "workload"]
