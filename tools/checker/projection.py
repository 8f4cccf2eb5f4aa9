"""Deciding one big search through the model's projections, when the search alone is stuck.

Design notes: docs/checker.md, section "tools/checker/projection.py".
"""

from __future__ import annotations

import heapq
from typing import Any

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.model import ILLEGAL, Call, Model
from kraftpy.tools.checker.partition import PartOutcome, ProgressSink, check_parts
from kraftpy.tools.checker.search import CHECK_EVERY, Search, SearchResult

# Steps of the whole search before the projections are tried. c10 --no-partition,
# the largest history the whole search decides, takes 1.4 million.
PLAIN_STEPS = 1 << 21


def check_projected(
    calls: list[Call],
    model: Model,
    projections: tuple[Model, list[tuple[Any, list[Call]]]],
    budget: Budget,
    workers: int | None = None,
    progress: ProgressSink | None = None,
    plain_steps: int = PLAIN_STEPS,
) -> list[PartOutcome]:
    """The outcomes for the history `calls`: the whole search's, or a failing projection's."""
    whole = Search(calls, model)
    result = _run(whole, budget, progress, plain_steps)
    if result is not None:
        return [PartOutcome(None, calls, result)]
    part_model, parts = projections
    outcomes = check_parts(parts, part_model, budget, workers=workers, progress=progress)
    for o in outcomes:
        o.model = part_model
    if any(o.result is not None and o.result.valid is False for o in outcomes):
        return outcomes
    if all(o.result is not None and o.result.valid is True for o in outcomes):
        index = {id(c): i for i, c in enumerate(calls)}
        orders = [[index[id(o.calls[i])] for i in o.result.order] for o in outcomes if o.result is not None]
        merged = merge_orders(calls, orders)
        replayed = None if merged is None else replay(calls, model, merged)
        if replayed is not None:
            return [PartOutcome(None, calls, replayed)]
    why = budget.exceeded()
    result = whole.partial(why) if why is not None else _run(whole, budget, progress, None)
    assert result is not None
    return [PartOutcome(None, calls, result)]


def _run(s: Search, budget: Budget, progress: ProgressSink | None, max_steps: int | None) -> SearchResult | None:
    """Advance `s` up to `max_steps` more steps (None: no limit); None if still undecided then."""
    limit = None if max_steps is None else s.steps + max_steps
    while limit is None or s.steps < limit:
        why = budget.exceeded()  # first: a spent budget never becomes a verdict
        if why is not None:
            return s.partial(why)
        result = s.run(CHECK_EVERY if limit is None else min(CHECK_EVERY, limit - s.steps))
        if result is not None:
            return result
        if progress is not None:
            progress(0, 1, s.steps, s.configs)
    return None


def merge_orders(calls: list[Call], orders: list[list[int]]) -> list[int] | None:
    """One order of the calls in `orders` keeping each list's order and real time, or None.

    Greedy: place the head of a list that no unplaced call precedes in real
    time (returned before it was invoked). Calls in no list (optional ones a
    projection left out) are not placed.
    """
    placed = [False] * len(calls)
    returns = [(c.ret, i) for i, c in enumerate(calls)]  # unplaced calls by return time
    heapq.heapify(returns)
    heads = [0] * len(orders)
    merged: list[int] = []
    total = sum(len(o) for o in orders)
    in_orders = {i for o in orders for i in o}
    while len(merged) < total:
        while returns and (placed[returns[0][1]] or returns[0][1] not in in_orders):
            heapq.heappop(returns)
        first_ret = returns[0][0] if returns else float("inf")
        for k, order in enumerate(orders):
            if heads[k] < len(order) and calls[order[heads[k]]].call <= first_ret:
                i = order[heads[k]]
                heads[k] += 1
                placed[i] = True
                merged.append(i)
                break
        else:
            return None
    return merged


def replay(calls: list[Call], model: Model, order: list[int]) -> SearchResult | None:
    """`order` as a linearization checked against `model`, or None if it is not one.

    It is one when it holds every call that is not optional, respects real
    time (no later call returned before an earlier one was invoked), and
    every step is legal.
    """
    if {i for i, c in enumerate(calls) if not c.optional} - set(order):
        return None
    later_ret = float("inf")
    for i in reversed(order):
        if calls[i].call > later_ret:
            return None
        later_ret = min(later_ret, calls[i].ret)
    state = model.init()
    for i in order:
        c = calls[i]
        state = model.step(state, c.input, c.output)
        if state is ILLEGAL:
            return None
    return SearchResult(True, list(order), state, [], 0, len(order))
