"""The workloads' shell: worker processes that do the generator's operations through a client and record them.

Each worker is one Jepsen process at a time: its own producer and consumer (clients.py), assigned to every
key or subscribed with the run's group (`sub_via`). An operation ends `ok`, `fail` (definitely not done: a
transaction aborted) or `info` (unknown: a timeout, a send whose fate the client cannot tell); after `info`
the worker closes its clients and goes on as a fresh process (Jepsen). Polls record what they returned; a
failed poll read nothing, so it is `fail`. After the heal, `drain` gives every worker a fresh consumer that
polls until it has reached the end offsets of its keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.workloads.clients import CLIENTS, ClientSpec
from kraftpy.tools.faults.workloads.gen import OpGenerator, caught_up, completed_poll, completed_send, rewind_to

WORKERS = 4
DRAIN_PROCESS_BASE = 2_000_000  # process numbers of the drain's consumers, apart from the workers'
DRAIN_TIMEOUT_S = 60.0
DRAIN_IDLE_POLLS = 20  # empty polls in a row, caught up or not, end a worker's drain (the judges see the rest)
RETRY_PAUSE_S = 0.2
PREPARE_TIMEOUT_S = 90.0


@dataclass
class WorkloadStats:
    invoked: int = 0
    ok: int = 0
    info: int = 0
    fail: int = 0
    ops: Counter[str] = field(default_factory=Counter)  # "f type", e.g. "txn fail"
    acked: dict[int, dict[str, int]] = field(default_factory=dict)  # key -> message -> offset


class Failed(Exception):
    """The operation definitely did not happen (a transaction aborted): recorded `fail`."""


class AbortUnanswered(Exception):
    """A transaction failed and its abort was not acknowledged: recorded `info`, with both errors."""


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:90]}"


def _check_not_moved(client: Any, rebalances: int) -> None:
    """A rebalance that moved this consumer's partitions ends the transaction: the consumer resumed them
    from their committed offsets, so its later polls may repeat records it read in this transaction (an
    int-nonmonotonic-poll), and the offsets it would commit may be of partitions now another member's."""
    if client.rebalances.count != rebalances:
        raise Failed("a rebalance moved this consumer's partitions during the transaction")


@dataclass
class Workers:
    history: HistoryWriter
    spec: ClientSpec
    client: str
    max_ops: int
    rng: random.Random
    rate_per_s: float | None = None
    stats: WorkloadStats = field(default_factory=WorkloadStats)
    end: RunEnd = field(default_factory=lambda: RunEnd(0.0))
    _next_process: int = WORKERS

    def __post_init__(self) -> None:
        self.stats.acked = {k: {} for k in range(self.spec.keys)}

    def _record(self, process: int, type_: str, f: str, value: Any, **extra: Any) -> None:
        self.history.event(process, type_, f, value=value, **extra)
        self.stats.ops[f"{f} {type_}"] += 1

    async def _open(self, worker: int, process: int) -> Any:
        client = CLIENTS[self.client](self.spec, worker, process)
        f = self.spec.sub_via
        self._record(process, "invoke", f, list(range(self.spec.keys)))
        try:
            keys = await client.open()
        except Exception as exc:
            self._record(process, "info", f, list(range(self.spec.keys)), error=repr(exc)[:200])
            await client.close()
            raise
        self._record(process, "ok", f, keys)
        return client

    async def prepare(self) -> None:
        """One client opened and closed before the clock starts: the first init_transactions waits for the
        transaction coordinator to load, which would otherwise eat a short run. Not an operation."""
        deadline = time.monotonic() + PREPARE_TIMEOUT_S
        while True:
            client = CLIENTS[self.client](self.spec, -1, -1)
            try:
                await client.open()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(RETRY_PAUSE_S)
            finally:
                await client.close()

    async def run(self, end: RunEnd) -> WorkloadStats:
        self.end = end
        await asyncio.gather(*(self._worker(w) for w in range(WORKERS)))
        return self.stats

    async def _worker(self, worker: int) -> None:
        process = worker
        gen = OpGenerator(random.Random(self.rng.random()), self.spec.keys, self.spec.transactional, process)
        pause_s = WORKERS / self.rate_per_s if self.rate_per_s else 0.0
        client = None
        try:
            while not self.end.passed() and self.stats.invoked < self.max_ops:
                if client is None:
                    try:
                        client = await self._open(worker, process)
                    except Exception:
                        process, self._next_process = self._next_process, self._next_process + 1
                        gen.renumber(process)
                        await asyncio.sleep(RETRY_PAUSE_S)
                        continue
                f, micro, abort = gen.next_op()
                self.stats.invoked += 1
                self._record(process, "invoke", f, micro)
                try:
                    if self.spec.transactional:
                        done = await self._txn(client, micro, abort)
                    else:
                        done = await self._single(client, micro)
                except Failed as exc:
                    self.stats.fail += 1
                    self._record(process, "fail", f, micro, error=str(exc)[:200])
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                except Exception as exc:  # unknown: a fresh process goes on (Jepsen)
                    self.stats.info += 1
                    self._record(process, "info", f, micro, error=repr(exc)[:200])
                    fatal = f == "send" and client.fatal(exc)
                    await client.close()
                    client = None
                    if fatal:  # a client bug that shows only under faults must not pass as a fault
                        raise
                    process, self._next_process = self._next_process, self._next_process + 1
                    gen.renumber(process)
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                self.stats.ok += 1
                self._record(process, "ok", f, done)
                for m in done:
                    if m[0] == "send" and isinstance(m[2], list):
                        self.stats.acked[m[1]][m[2][1]] = m[2][0]
                if pause_s:
                    await asyncio.sleep(pause_s)
        finally:
            if client is not None:
                await client.close()

    async def _single(self, client: Any, micro: list[list[Any]]) -> list[list[Any]]:
        m = micro[0]
        if m[0] == "send":
            return [completed_send(m[1], m[2], await client.send(m[1], m[2]))]
        try:
            records = await client.poll()
        except Exception as exc:
            raise Failed(f"poll: {exc!r}") from None
        if records and self.spec.sub_via == "subscribe":
            with contextlib.suppress(Exception):  # the group resumes here; a lost commit only means a re-read
                await client.commit_positions()
        return [completed_poll(records)]

    async def _txn(self, client: Any, micro: list[list[Any]], abort: bool) -> list[list[Any]]:
        """One transaction: its sends and polls, the polled offsets committed with it (subscribe), commit.
        An error before the commit's answer aborts it: `fail` when the abort is acknowledged, else unknown."""
        await client.begin()
        done: list[list[Any]] = []
        offsets: dict[int, int] = {}
        rebalances = client.rebalances.count
        try:
            for m in micro:
                if m[0] == "send":
                    done.append(completed_send(m[1], m[2], await client.send(m[1], m[2])))
                else:
                    records = await client.poll()
                    done.append(completed_poll(records))
                    for key, offset, _ in records:
                        offsets[key] = offset + 1
                    _check_not_moved(client, rebalances)
            if offsets and self.spec.sub_via == "subscribe":
                _check_not_moved(client, rebalances)
                await client.send_offsets(offsets)
            if abort:
                raise Failed("aborted on purpose")
        except Exception as exc:
            await self._abort(client, done, exc)
        try:
            await client.commit()
        except TimeoutError:
            raise
        except Exception as exc:
            await self._abort(client, done, exc)
        return done

    async def _abort(self, client: Any, done: list[list[Any]], cause: BaseException) -> None:
        try:
            await client.abort()
        except Exception as exc:  # not acknowledged: the outcome is unknown
            # The history keeps one error per operation: the one that made us abort first, then the abort's
            # (session 23 could not tell what the commits before refused aborts had answered).
            raise AbortUnanswered(f"{_brief(cause)}; then the abort: {_brief(exc)}") from exc
        # The records it read are not consumed: back to them, on the keys this consumer still holds (a
        # rebalance resumed the others elsewhere, from their committed offsets).
        mine = set(await client.assigned())
        await client.seek({k: o for k, o in rewind_to([m for m in done if m[0] == "poll"]).items() if k in mine})
        raise Failed(f"aborted: {cause!r}")

    async def drain(self) -> None:
        """Every worker's fresh consumer polls to the end offsets of its keys (bounded); recorded as polls."""
        await asyncio.gather(*(self._drain_one(w) for w in range(WORKERS)))

    async def _drain_one(self, worker: int) -> None:
        process = DRAIN_PROCESS_BASE + worker
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        try:
            client = await self._open(worker, process)
        except Exception:
            return  # the judges (unseen, the read back) see what no consumer read
        try:
            ends = await client.end_offsets()
            idle = 0
            while time.monotonic() < deadline and idle < DRAIN_IDLE_POLLS:
                self._record(process, "invoke", "poll", [["poll"]])
                try:
                    records = await client.poll()
                except Exception as exc:
                    self._record(process, "fail", "poll", [["poll"]], error=repr(exc)[:200])
                    continue
                self._record(process, "ok", "poll", [completed_poll(records)])
                mine = await client.assigned()
                idle = 0 if records or not mine else idle + 1  # a subscriber waits for its assignment first
                if mine and caught_up({k: await client.position(k) for k in mine}, {k: ends[k] for k in mine}):
                    break
        finally:
            await client.close()
