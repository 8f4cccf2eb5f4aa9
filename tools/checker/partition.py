"""Checking the independent parts of a history: interleaved in one process, or spread over several.

Parts come from the model's `partition` (P-compositionality: the history is
linearizable exactly when every part is). One failing part decides the
verdict, so parts run in round-robin slices and the check stops at the first
failure, as Porcupine stops at its first failing partition; a hard part can
then no longer hide an easy violation behind it. With several big parts and
more than one core, the parts still undecided after a first slice here are
spread over forked worker processes (which inherit the searches where they
stopped), each running its own round robin; the first failure reported ends
them all.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.model import Call, Model
from kraftpy.tools.checker.search import Search, SearchResult

FIRST_SLICE_STEPS = 1 << 11  # slices grow from this to SLICE_STEPS: easy failures show up at once
SLICE_STEPS = 1 << 14
PARALLEL_MIN_CALLS = 300  # below this many calls in total, forking costs more than it saves
PARALLEL_MIN_PART = 60  # parts smaller than this do not count as "big"


@dataclass(slots=True)
class PartOutcome:
    """One part and its search result; `result` is None when the check stopped before it finished.

    `model` is the model the part was searched with when it is not the check's (a projection's).
    """

    label: Any
    calls: list[Call]
    result: SearchResult | None = None
    model: Model | None = None


ProgressSink = Callable[[int, int, int, int], None]  # (parts done, parts, steps, configs)


def _round_robin(
    searches: list[tuple[int, Search]],
    budget: Budget,
    report: Callable[[int, SearchResult], None],
    tick: Callable[[int, int], None] | None,
    stop_on_failure: bool,
) -> None:
    """Run searches in slices until all are decided, one fails, or the budget is spent."""
    active = list(searches)
    slice_steps = FIRST_SLICE_STEPS * 2
    while active:
        still: list[tuple[int, Search]] = []
        for index, s in active:
            result = s.run(slice_steps)
            if result is None:
                still.append((index, s))
                continue
            report(index, result)
            if result.valid is False and stop_on_failure:
                return
        active = still
        slice_steps = min(slice_steps * 2, SLICE_STEPS)
        if tick is not None:
            tick(sum(s.steps for _, s in searches), sum(s.configs for _, s in searches))
        why = budget.exceeded() if active else None
        if why is not None:
            for index, s in active:
                report(index, s.partial(why))
            return


def _worker(jobs: list[tuple[int, Search]], budget: Budget, out: Any, stop_on_failure: bool) -> None:
    searches = jobs  # inherited through fork, mid-search
    last = [0.0]

    def tick(steps: int, configs: int) -> None:
        now = time.monotonic()
        if now - last[0] > 0.2:
            last[0] = now
            out.put(("tick", os.getpid(), steps, configs))

    _round_robin(searches, budget, lambda i, r: out.put(("done", i, r)), tick, stop_on_failure)
    out.put(("exit", os.getpid(), 0, 0))


def _assign(parts: list[tuple[Any, list[Call]]], workers: int) -> list[list[int]]:
    """Greedy balance by size: biggest part first onto the least loaded worker."""
    bins: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for index in sorted(range(len(parts)), key=lambda i: -len(parts[i][1])):
        w = loads.index(min(loads))
        bins[w].append(index)
        loads[w] += len(parts[index][1])
    return [b for b in bins if b]


def choose_workers(parts: list[tuple[Any, list[Call]]], requested: int | None) -> int:
    """How many processes to use: `requested`, or one per big part up to the cores we may use."""
    if requested is not None:
        return max(1, min(requested, len(parts)))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    big = sum(1 for _, calls in parts if len(calls) >= PARALLEL_MIN_PART)
    if cores < 2 or big < 2 or sum(len(c) for _, c in parts) < PARALLEL_MIN_CALLS:
        return 1
    return min(cores, big)


def check_parts(
    parts: list[tuple[Any, list[Call]]],
    model: Model,
    budget: Budget | None = None,
    workers: int | None = None,
    progress: ProgressSink | None = None,
    stop_on_failure: bool = True,
) -> list[PartOutcome]:
    """Search every part; stop at the first failure when `stop_on_failure`."""
    budget = budget or Budget()
    outcomes = [PartOutcome(label, calls) for label, calls in parts]
    done = [0, len(parts)]  # parts decided, parts

    def report(index: int, result: SearchResult) -> None:
        outcomes[index].result = result
        done[0] += 1

    def tick(steps: int, configs: int) -> None:
        if progress is not None:
            progress(done[0], len(parts), steps, configs)

    # One slice of every part here first: small parts finish and easy failures show up
    # without paying for worker processes; the rest continue where they stopped.
    searches = [(i, Search(calls, model)) for i, (_, calls) in enumerate(parts)]
    remaining = []
    for position, (index, s) in enumerate(searches):
        why = budget.exceeded()
        if why is not None:
            for later, t in [*remaining, *searches[position:]]:
                report(later, t.partial(why))
            return outcomes
        result = s.run(FIRST_SLICE_STEPS)
        if result is None:
            remaining.append((index, s))
            continue
        report(index, result)
        if result.valid is False and stop_on_failure:
            return outcomes
    n_workers = choose_workers([parts[i] for i, _ in remaining], workers)
    if n_workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        _round_robin(remaining, budget, report, tick, stop_on_failure)
        tick(sum(s.steps for _, s in searches), sum(s.configs for _, s in searches))
        return outcomes
    _check_forked(remaining, budget.split(n_workers), n_workers, report, progress, stop_on_failure, done)
    return outcomes


def _check_forked(
    searches: list[tuple[int, Search]],
    budget: Budget,
    n_workers: int,
    report: Callable[[int, SearchResult], None],
    progress: ProgressSink | None,
    stop_on_failure: bool,
    done: list[int],
) -> None:
    # fork: the workers inherit the parts instead of unpickling them.
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = []
    total = done[1]
    for positions in _assign([(None, s.calls) for _, s in searches], n_workers):
        jobs = [searches[k] for k in positions]
        p = ctx.Process(target=_worker, args=(jobs, budget, out, stop_on_failure), daemon=True)
        p.start()
        procs.append(p)
    ticks: dict[int, tuple[int, int]] = {}
    running = len(procs)
    try:
        while running:
            try:
                kind, a, b, c = _get(out)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break  # a worker died without saying so (killed): its parts stay unchecked
                continue
            if kind == "done":
                report(a, b)
                if b.valid is False and stop_on_failure:
                    break
            elif kind == "tick":
                ticks[a] = (b, c)
            else:
                running -= 1
            if progress is not None:
                progress(done[0], total, sum(t[0] for t in ticks.values()), sum(t[1] for t in ticks.values()))
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join()
        out.close()


def _get(out: Any) -> tuple[Any, Any, Any, Any]:
    item = out.get(timeout=0.5)
    if item[0] == "done":
        return item[0], item[1], item[2], None
    return item
