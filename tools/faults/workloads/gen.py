"""The workloads' pure core: which operation a process does next, and how it is recorded (no I/O).

An operation is a list of micro-ops as Jepsen's kafka workload writes them: `["send", key, value]` and
`["poll"]`, completed as `["send", key, [offset, value]]` and `["poll", [[key, offset, value], ...]]`
(docs/history-format.md). A key is a partition of the run's topic. The queue workload does one
micro-op per operation (`f` = `send` or `poll`); the txn workload does `txn` operations of several.
Values are unique per run (`<process>-<n>`), so the checker can tell every write apart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

SEND_SHARE = 0.6  # Jepsen writes a little more than it reads, so polls keep finding new records
MAX_TXN_MICRO_OPS = 4
ABORT_EVERY = 5  # a process's 2nd, 7th, 12th, ... transaction aborts on purpose: every run has aborted writes


@dataclass
class OpGenerator:
    """Per process: the next operation's micro-ops, from a seeded rng."""

    rng: random.Random
    keys: int
    transactional: bool
    process: int
    _n: int = field(default=0, init=False)
    _txns: int = field(default=0, init=False)

    def renumber(self, process: int) -> None:
        """A fresh process after an unknown outcome (Jepsen): new values, same rng."""
        self.process, self._n = process, 0

    def _send(self) -> list[Any]:
        value = f"{self.process}-{self._n}"
        self._n += 1
        return ["send", self.rng.randrange(self.keys), value]

    def _micro(self) -> list[Any]:
        return self._send() if self.rng.random() < SEND_SHARE else ["poll"]

    def next_op(self) -> tuple[str, list[list[Any]], bool]:
        """(`f`, micro-ops, abort on purpose): a `txn` of 2..MAX_TXN_MICRO_OPS micro-ops, else one `send` or
        `poll`. A deliberately aborted transaction has a send, so the run always has aborted writes."""
        if self.transactional:
            micro = [self._micro() for _ in range(self.rng.randint(2, MAX_TXN_MICRO_OPS))]
            self._txns += 1
            abort = self._txns % ABORT_EVERY == 2
            if abort and not any(m[0] == "send" for m in micro):
                micro[-1] = self._send()
            return "txn", micro, abort
        micro1 = self._micro()
        return micro1[0], [micro1], False


def completed_send(key: int, value: str, offset: int | None) -> list[Any]:
    return ["send", key, [offset, value]] if offset is not None and offset >= 0 else ["send", key, value]


def completed_poll(records: list[tuple[int, int, str]]) -> list[Any]:
    return ["poll", [[k, o, v] for k, o, v in records]]


def rewind_to(polled: list[list[Any]]) -> dict[int, int]:
    """Where an aborted transaction's consumer goes back to: each key's first offset it polled."""
    out: dict[int, int] = {}
    for micro in polled:
        for key, offset, _ in micro[1]:
            out[key] = min(out.get(key, offset), offset)
    return out


def caught_up(positions: dict[int, int], ends: dict[int, int]) -> bool:
    """The final drain is done when every key's position has reached its end offset."""
    return all(positions.get(k, 0) >= end for k, end in ends.items())
