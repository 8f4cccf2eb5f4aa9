"""Exponential backoff with jitter (Kafka's retry_backoff_ms / retry_backoff_max_ms); the random source is an input."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Exponential backoff with jitter, as Kafka's retry_backoff_ms / retry_backoff_max_ms."""

    initial_ms: int = 100
    max_ms: int = 1000
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next_ms(self) -> float:
        base = min(self.max_ms, self.initial_ms * (2**self.attempts))
        self.attempts += 1
        return base * (1 + self.rng.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self.attempts = 0
