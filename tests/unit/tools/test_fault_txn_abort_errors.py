"""A transaction whose abort is not acknowledged is `info`, and its history names both errors.

The fault runs recorded only the abort's error; session 23 saw librdkafka refuse aborts after commits
the coordinator had completed and could not tell what those commits had answered. The client here is a
stand-in that fails the commit and then the abort (the runner's bookkeeping is what is tested).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from kraftpy.tools.faults.history import HistoryWriter
from kraftpy.tools.faults.workloads.clients import ClientSpec, RebalanceCount
from kraftpy.tools.faults.workloads.runner import AbortUnanswered, Workers


class CommitThenAbortFail:
    def __init__(self) -> None:
        self.rebalances = RebalanceCount()

    async def begin(self) -> None:
        pass

    async def send(self, key: int, value: str) -> int:
        return 7

    async def commit(self) -> None:
        raise RuntimeError("commit: coordinator moved")

    async def abort(self) -> None:
        raise RuntimeError("abort: INVALID_TXN_STATE")

    async def assigned(self) -> list[int]:
        return []

    async def seek(self, offsets: Any) -> None:
        pass


def test_an_unacknowledged_abort_names_the_failure_that_caused_it(tmp_path: Path) -> None:
    spec = ClientSpec("127.0.0.1:1", "t", 1, "assign", transactional=True, group_id="g")
    workers = Workers(HistoryWriter(tmp_path / "h.jsonl"), spec, "kraftpy", max_ops=1, rng=random.Random(1))
    with pytest.raises(AbortUnanswered) as caught:
        asyncio.run(workers._txn(CommitThenAbortFail(), [["send", 0, "0-1"]], abort=False))
    recorded = repr(caught.value)[:200]  # what the runner writes into the history's `error`
    assert "commit: coordinator moved" in recorded and "abort: INVALID_TXN_STATE" in recorded
