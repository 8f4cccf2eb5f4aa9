"""Which partition a record goes to, as Kafka's Java producer decides it.

1. An explicit partition wins.
2. A key: toPositive(murmur2(key)) % partitions, bit for bit as Kafka's
   Utils.murmur2, so keyed records land where a Java client would put them.
3. No key: sticky round-robin (KIP-480): start at a random available partition,
   stay on it until its batch closes, then move to the next available one, so
   batches fill up and short-lived producers (one CLI run each) still spread.
4. Or a custom callable given to the producer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

CustomPartitioner = Callable[[str, bytes | None, Sequence[int], Sequence[int]], int]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2: MurmurHash2 with seed 0x9747b28c, as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's Utils.toPositive: clear the sign bit (not abs(), which differs for MIN_VALUE)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class Partitioner:
    """Chooses partitions; keeps the sticky partition per topic for records without a key."""

    def __init__(self, custom: CustomPartitioner | None = None, rng: random.Random | None = None) -> None:
        """`rng` picks each topic's first sticky partition (the producer passes a seeded-from-OS one);
        without it the first pick is the first available partition (deterministic, for tests)."""
        self._custom = custom
        self._rng = rng
        self._sticky: dict[str, int] = {}
        self._next_start: dict[str, int] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available: Sequence[int] = (),
        explicit: int | None = None,
    ) -> int:
        if num_partitions <= 0:
            raise ValueError(f"topic {topic!r} has no partitions")
        if explicit is not None:
            if not 0 <= explicit < num_partitions:
                raise ValueError(f"partition {explicit} is out of range for {topic!r} (0..{num_partitions - 1})")
            return explicit
        if self._custom is not None:
            chosen = self._custom(topic, key, range(num_partitions), available)
            if not 0 <= chosen < num_partitions:
                raise ValueError(f"custom partitioner chose {chosen} for {topic!r} with {num_partitions} partitions")
            return chosen
        if key is not None:
            return partition_for_key(key, num_partitions)
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            current = self._pick_next(topic, num_partitions, available, previous=None)
        return current

    def on_new_batch(self, topic: str, previous: int, num_partitions: int, available: Sequence[int] = ()) -> None:
        """The batch on `previous` closed: move the sticky partition on (only if it was that one)."""
        if self._sticky.get(topic, previous) == previous:
            self._pick_next(topic, num_partitions, available, previous)

    def _pick_next(self, topic: str, num_partitions: int, available: Sequence[int], previous: int | None) -> int:
        candidates = [p for p in available if 0 <= p < num_partitions] or list(range(num_partitions))
        start = self._next_start.get(topic)
        if start is None:
            start = 0 if self._rng is None else self._rng.randrange(len(candidates))
        chosen = candidates[start % len(candidates)]
        if chosen == previous and len(candidates) > 1:
            start += 1
            chosen = candidates[start % len(candidates)]
        self._next_start[topic] = start + 1
        self._sticky[topic] = chosen
        return chosen
