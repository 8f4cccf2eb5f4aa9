"""The virtual network: per-message delay, loss, duplication, delay spikes (reordering), and cuts.

Cuts are directed: (a, b) in `cut` loses a's messages to b, also those already
in flight when they arrive. Loss, duplication and spikes apply only while the
kernel's faults are on; a rate of 0 draws nothing from the generator, so a
workload that never duplicates keeps the random stream it had without the option.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from tests.simulation.kernel.loop import Loop


@dataclass(frozen=True)
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    spike_rate: float = 0.0  # some messages take much longer: they overtake each other
    spike_max_ms: int = 0


class Network:
    def __init__(self, loop: Loop, config: NetworkConfig) -> None:
        self.loop = loop
        self.config = config
        self.cut: set[tuple[Hashable, Hashable]] = set()
        self.faulty = False

    def connected(self, src: Hashable, dst: Hashable) -> bool:
        return (src, dst) not in self.cut

    def send(self, src: Hashable, dst: Hashable, deliver: Callable[[], object]) -> int:
        """Schedule `deliver()` at the destination; returns the copies sent (0: lost)."""
        cfg, rng = self.config, self.loop.rng
        if not self.connected(src, dst) or (self.faulty and cfg.drop_rate > 0 and rng.random() < cfg.drop_rate):
            return 0
        copies = 1
        if self.faulty and cfg.duplicate_rate > 0 and rng.random() < cfg.duplicate_rate:
            copies = 2
        for _ in range(copies):
            delay_ms = rng.randint(cfg.min_delay_ms, cfg.max_delay_ms)
            if self.faulty and cfg.spike_rate > 0 and rng.random() < cfg.spike_rate:
                delay_ms += rng.randint(0, cfg.spike_max_ms)
            self.loop.after(delay_ms, lambda: self.connected(src, dst) and deliver())
        return copies

    def cut_both(self, a: Hashable, b: Hashable) -> None:
        self.cut |= {(a, b), (b, a)}

    def heal_both(self, a: Hashable, b: Hashable) -> None:
        self.cut -= {(a, b), (b, a)}

    def partition(self, nodes: Iterable[Hashable], *groups: Iterable[Hashable]) -> None:
        """Only nodes in the same group can talk; nodes in no group are cut from everyone."""
        sets = [set(g) for g in groups]
        nodes = list(nodes)
        self.cut = {(a, b) for a in nodes for b in nodes if a != b and not any(a in g and b in g for g in sets)}

    def heal(self) -> None:
        self.cut = set()
