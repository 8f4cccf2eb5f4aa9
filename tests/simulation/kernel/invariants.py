"""The one violation type and the collector every workload reports broken invariants through."""

from __future__ import annotations

from collections.abc import Callable


class InvariantViolation(AssertionError):
    """A safety or liveness property failed; the message names the seed and how to replay it."""


class Violations:
    """Broken invariants of one run, each stamped with the virtual time it was found at.

    A workload either raises at once (`strict`: the run stops at the first
    violation, the Raft and controller workloads) or collects up to `limit`
    and stops after the event that found them (the replication workloads,
    whose result lists them).
    """

    def __init__(self, now_ms: Callable[[], int], *, strict: bool = False, limit: int = 20) -> None:
        self._now_ms = now_ms
        self.strict = strict
        self.limit = limit
        self.found: list[str] = []

    def report(self, message: str) -> None:
        if self.strict:
            raise InvariantViolation(message)
        if len(self.found) < self.limit:
            self.found.append(f"t={self._now_ms()} {message}")

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_first(self, context: str = "") -> None:
        if self.found:
            raise InvariantViolation(f"{context}{self.found[0]}" + "".join(f"\n  also: {v}" for v in self.found[1:]))
