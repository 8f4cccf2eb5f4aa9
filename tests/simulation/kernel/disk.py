"""The virtual disk: fsyncs that take time, one at a time per node, and are lost in a crash.

What a crash keeps is each log model's business (a synced prefix:
kraftpy.raft.memory_log.MemoryLog for Raft, replication_sim.MemoryLog for
partitions); the disk decides *when* an fsync completes. A crash cancels the
node's fsync in flight: its completion never arrives, so the tail it covered
is lost. With `fsync_max_ms` 0 an fsync completes at once and draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from tests.simulation.kernel.loop import Loop


@dataclass(frozen=True)
class DiskConfig:
    fsync_min_ms: int = 0
    fsync_max_ms: int = 0
    spike_rate: float = 0.0  # a slow fsync: the window in which a crash loses a tail
    spike_max_ms: int = 0


class Disk:
    def __init__(self, loop: Loop, config: DiskConfig) -> None:
        self.loop = loop
        self.config = config
        self.faulty = False
        self.extra_ms: dict[Hashable, int] = {}  # a slow disk on some nodes (scenarios)
        self._busy_until: dict[Hashable, int] = {}
        self._generation: dict[Hashable, int] = {}

    def fsync(self, node: Hashable, on_done: Callable[[], object]) -> None:
        """Call `on_done()` when the fsync completes, unless `node` crashes first."""
        cfg, loop = self.config, self.loop
        if cfg.fsync_max_ms <= 0:
            on_done()
            return
        start = max(loop.now, self._busy_until.get(node, 0))
        done = start + loop.rng.randint(cfg.fsync_min_ms, cfg.fsync_max_ms) + self.extra_ms.get(node, 0)
        if self.faulty and cfg.spike_rate > 0 and loop.rng.random() < cfg.spike_rate:
            done += loop.rng.randint(0, cfg.spike_max_ms)
        self._busy_until[node] = done
        generation = self._generation.get(node, 0)
        loop.at(done, lambda: self._generation.get(node, 0) == generation and on_done())

    def crash(self, node: Hashable) -> None:
        self._busy_until[node] = 0
        self._generation[node] = self._generation.get(node, 0) + 1
