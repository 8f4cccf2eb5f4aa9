"""The one simulation kernel: a deterministic loop, clock, network, disk and violation type.

Every simulation workload (cluster.py: Raft; controller_sim.py: the controller;
replication_sim.py: replication; soak.py: controller plus replication) runs on
these pieces, so a seed means the same thing everywhere: one `random.Random(seed)`
in the `Loop` draws every delay, loss and fault, and events run in (virtual
time, sequence) order. docs/testing.md describes the kernel and its workloads.
"""

from tests.simulation.kernel.clock import VirtualClock
from tests.simulation.kernel.disk import Disk, DiskConfig
from tests.simulation.kernel.invariants import InvariantViolation, Violations
from tests.simulation.kernel.loop import Loop
from tests.simulation.kernel.network import Network, NetworkConfig

__all__ = [
    "Disk",
    "DiskConfig",
    "InvariantViolation",
    "Loop",
    "Network",
    "NetworkConfig",
    "Violations",
    "VirtualClock",
]
