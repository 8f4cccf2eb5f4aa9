"""What a workload is, as the fault run (run.py) drives it: one `Workload` per `--workload` name.

A workload says what it starts (`make`: the send/poll workers of history.jsonl; `beside`: processes of
its own under the nemesis, such as group members or register clients), what it needs from the cluster
before the clock starts (`warm_up`), what it records after the heal (`after_read`; `readback_apart`: the
final read back goes to readback.jsonl instead of the history), and how it is judged (`model` and
`allowed` for `kraftpy check` over history.jsonl, `read_committed` for the read back, `judge` for a
history of its own). run.py has no per-workload branch: a new workload is one module and one line in
WORKLOADS (workloads/__init__.py).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.history import HistoryWriter, RunEnd

if TYPE_CHECKING:
    from kraftpy.tools.faults.checks import Judgement
    from kraftpy.tools.faults.workloads.runner import Workers

Cli = Callable[..., subprocess.CompletedProcess[str]]  # `kraftpy ARGS...` from the run's client namespace


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


@dataclass(frozen=True)
class RunCluster:
    """What a workload's own hooks get from the run: the cluster, its topic, the run's directory, the client."""

    layout: ClusterLayout
    topic: str
    partitions: int
    out: Path
    client: str  # kraftpy | confluent

    @property
    def bootstrap(self) -> str:
        return self.layout.kafka_bootstrap_servers


@dataclass(frozen=True)
class Beside:
    """The run's view of a workload's own processes under the nemesis."""

    cluster: RunCluster
    history: HistoryWriter
    end: RunEnd
    rng: random.Random


@dataclass(frozen=True)
class Workload:
    make: Callable[[WorkloadContext], Workers]
    read_committed: bool = False  # how the final read back reads
    allowed: tuple[str, ...] = ()  # checker classes reported without failing the run (Jepsen's allowed-error-types)
    model: str = "kafka"  # `kraftpy check --model` over history.jsonl; only "kafka" takes --sub-via and --allow
    readback_apart: bool = False  # the read back is not one of the workload's processes: readback.jsonl
    warm_up: Callable[[RunCluster], Awaitable[None]] | None = None
    # Under the nemesis beside the workers; returns the faults it did itself, by name (summary's faults).
    beside: Callable[[Beside], Awaitable[Mapping[str, int]]] | None = None
    after_read: Callable[[RunCluster, HistoryWriter], Awaitable[Any]] | None = None  # after the read back
    judge: Callable[[Cli, Path], Judgement] | None = None  # its own anomalies by class, and undecided checks

    def check_args(self, sub_via: str) -> list[str]:
        """The model arguments of `kraftpy check` over history.jsonl."""
        if self.model != "kafka":
            return ["--model", self.model]
        return ["--model", "kafka", "--sub-via", sub_via, *(a for c in self.allowed for a in ("--allow", c))]
