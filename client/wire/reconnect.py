"""When the client may dial a broker again after a failed connection (Kafka's reconnect.backoff.ms).

Per address: the first retry waits `reconnect_backoff_ms`, each further
failure doubles it up to `reconnect_backoff_max_ms`, with Kafka's 20% jitter;
a connection that opens resets it. Pure: the caller passes `now_ms`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kraftpy.protocol.backoff import Backoff

Address = tuple[str, int]
RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1_000


@dataclass
class ReconnectBackoff:
    reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS
    reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS
    rng: random.Random = field(default_factory=random.Random)
    _backoffs: dict[Address, Backoff] = field(default_factory=dict)
    _not_before_ms: dict[Address, int] = field(default_factory=dict)

    def wait_ms(self, address: Address, now_ms: int) -> int:
        """How long before `address` may be dialled again (0: now)."""
        return max(0, self._not_before_ms.get(address, now_ms) - now_ms)

    def failed(self, address: Address, now_ms: int) -> int:
        """A connection attempt failed: the wait before the next one, in ms."""
        backoff = self._backoffs.setdefault(
            address, Backoff(self.reconnect_backoff_ms, self.reconnect_backoff_max_ms, rng=self.rng)
        )
        wait_ms = int(backoff.next_ms())
        self._not_before_ms[address] = now_ms + wait_ms
        return wait_ms

    def connected(self, address: Address) -> None:
        self._backoffs.pop(address, None)
        self._not_before_ms.pop(address, None)
