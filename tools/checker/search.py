"""The Wing-Gong-Lowe linearizability search, as Porcupine implements it.

Design notes: docs/checker.md, section "tools/checker/search.py".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kraftpy.tools.checker.budget import Budget
from kraftpy.tools.checker.model import ILLEGAL, Call, Model

CHECK_EVERY = 1 << 14  # steps between budget checks and progress callbacks


@dataclass(slots=True)
class SearchResult:
    """`valid` is True, False or None (budget exceeded: unknown).

    `order` is a linearization when valid, otherwise the longest linearizable
    prefix found (indices into the calls), with `state` the model state after
    it; for a failure `blocked` lists the calls that could be placed next by
    real-time order and are all illegal in that state.
    """

    valid: bool | None
    order: list[int]
    state: Any
    blocked: list[int] = field(default_factory=list)
    configs: int = 0
    steps: int = 0
    reason: str | None = None


ProgressFn = Callable[[int, int, int], None]  # (steps, configs, depth)


class Search:
    """One resumable search: `run(max_steps)` advances it and returns the result once decided.

    Resumable so that a scheduler can interleave the parts of a partitioned
    history and stop at the first one that fails, as Porcupine does.
    """

    def __init__(self, calls: list[Call], model: Model) -> None:
        n = len(calls)
        self.calls = calls
        self.model = model
        self.n = n
        init_state = model.init()
        self.required = sum(1 for c in calls if not c.optional)
        # Entries in time order; calls (kind 0) before returns (kind 1) at equal times.
        order = sorted([(c.call, 0, i) for i, c in enumerate(calls)] + [(c.ret, 1, i) for i, c in enumerate(calls)])
        self.head, tail = 2 * n, 2 * n + 1
        op_at = [-1] * (2 * n + 2)  # op index at a call entry, -1 at returns and sentinels
        match = [0] * (2 * n + 2)  # call entry -> its return entry
        call_pos = [0] * n
        for pos, (_, kind, i) in enumerate(order):
            if kind == 0:
                op_at[pos] = i
                call_pos[i] = pos
            else:
                match[call_pos[i]] = pos
        self.op_at = op_at
        self.match = match
        self.nxt = [*range(1, 2 * n), tail, 0, tail]
        self.prv = [self.head, *range(0, 2 * n - 1), 0, 2 * n - 1]
        self.nxt[self.head] = 0 if n else tail
        self.prv[tail] = 2 * n - 1 if n else self.head
        self.bits = [1 << i for i in range(n)]
        self.optional = [c.optional for c in calls]
        self.states: list[Any] = [init_state]
        self.state_ids: dict[Any, int] = {init_state: 0}
        self.cache: list[set[int]] = [set()]
        self.trans: dict[int, int] = {}  # state_id * n + op -> next state id, or -1 if illegal
        # The search's registers, saved between slices.
        self.state = 0
        self.lin = 0
        self.remaining = self.required
        self.stack_entry: list[int] = []
        self.stack_state: list[int] = []
        self.best: list[int] = []
        self.best_state = 0
        self.steps = 0
        self.configs = 0
        self.entry = self.nxt[self.head]
        self.result: SearchResult | None = None
        if self.required == 0:
            self.result = SearchResult(True, [], init_state)

    @property
    def depth(self) -> int:
        return len(self.stack_entry)

    def partial(self, reason: str) -> SearchResult:
        """Give up (budget spent): unknown, with the longest prefix found so far."""
        if self.result is not None:
            return self.result
        best, best_state = self.best, self.best_state
        if len(self.stack_entry) > len(best):
            best, best_state = [self.op_at[e] for e in self.stack_entry], self.state
        return SearchResult(None, best, self.states[best_state], [], self.configs, self.steps, reason)

    def run(self, max_steps: int) -> SearchResult | None:
        """Advance by at most `max_steps` steps; the result once decided, else None."""
        if self.result is not None:
            return self.result
        # Hot loop: everything in locals.
        n = self.n
        head = self.head
        op_at, match, nxt, prv = self.op_at, self.match, self.nxt, self.prv
        bits, optional = self.bits, self.optional
        calls = self.calls
        step_fn = self.model.step
        states, state_ids, cache, trans = self.states, self.state_ids, self.cache, self.trans
        stack_entry, stack_state = self.stack_entry, self.stack_state
        state, lin, remaining, entry = self.state, self.lin, self.remaining, self.entry
        best, best_state = self.best, self.best_state
        steps, configs = self.steps, self.configs
        limit = steps + max_steps
        result: SearchResult | None = None

        while True:
            o = op_at[entry]
            if o >= 0:
                if steps >= limit:
                    break
                steps += 1
                tk = state * n + o
                ns = trans.get(tk)
                if ns is None:
                    c = calls[o]
                    new = step_fn(states[state], c.input, c.output)
                    if new is ILLEGAL:
                        ns = -1
                    else:
                        ns = state_ids.get(new)
                        if ns is None:
                            ns = len(states)
                            state_ids[new] = ns
                            states.append(new)
                            cache.append(set())
                    trans[tk] = ns
                if ns >= 0:
                    nb = lin | bits[o]
                    seen = cache[ns]
                    if nb not in seen:
                        seen.add(nb)
                        configs += 1
                        stack_entry.append(entry)
                        stack_state.append(state)
                        state = ns
                        lin = nb
                        # lift: unlink the call and its return
                        a, b = prv[entry], nxt[entry]
                        nxt[a] = b
                        prv[b] = a
                        r = match[entry]
                        a, b = prv[r], nxt[r]
                        nxt[a] = b
                        prv[b] = a
                        entry = nxt[head]
                        if not optional[o]:
                            remaining -= 1
                            if remaining == 0:
                                order = [op_at[e] for e in stack_entry]
                                result = SearchResult(True, order, states[state], [], configs, steps)
                                break
                        continue
                entry = nxt[entry]
            else:
                # A return: the earliest deadline among unlinearized calls, and no candidate fits.
                if not stack_entry:
                    final = states[best_state]
                    blocked = blocked_calls(calls, best, final, self.model)
                    result = SearchResult(False, best, final, blocked, configs, steps)
                    break
                if len(stack_entry) > len(best):
                    best, best_state = [op_at[e] for e in stack_entry], state
                entry = stack_entry.pop()
                state = stack_state.pop()
                o = op_at[entry]
                lin ^= bits[o]
                # unlift: relink the return, then the call
                r = match[entry]
                prv[nxt[r]] = r
                nxt[prv[r]] = r
                prv[nxt[entry]] = entry
                nxt[prv[entry]] = entry
                if not optional[o]:
                    remaining += 1
                entry = nxt[entry]

        self.state, self.lin, self.remaining, self.entry = state, lin, remaining, entry
        self.best, self.best_state = best, best_state
        self.steps, self.configs = steps, configs
        self.result = result
        return result


def search(
    calls: list[Call], model: Model, budget: Budget | None = None, progress: ProgressFn | None = None
) -> SearchResult:
    """Decide whether `calls` are linearizable with respect to `model`, within `budget`."""
    budget = budget or Budget()
    s = Search(calls, model)
    while True:
        result = s.run(CHECK_EVERY)
        if result is not None:
            return result
        if progress is not None:
            progress(s.steps, s.configs, s.depth)
        why = budget.exceeded()
        if why is not None:
            return s.partial(why)


def blocked_calls(calls: list[Call], prefix: list[int], state: Any, model: Model) -> list[int]:
    """After `prefix`, the calls real-time order allows next and that are illegal in `state`.

    The candidates are the unlinearized calls invoked before the earliest
    return among unlinearized required calls. At the longest prefix the
    search found, every candidate is illegal there (a legal one would have
    made a longer prefix); we recompute legality so the report shows it.
    """
    done = set(prefix)
    rest = [i for i in range(len(calls)) if i not in done]
    deadlines = [calls[i].ret for i in rest if not calls[i].optional]
    if not deadlines:
        return []
    first_ret = min(deadlines)
    candidates = [i for i in rest if calls[i].call <= first_ret]
    return [i for i in candidates if model.step(state, calls[i].input, calls[i].output) is ILLEGAL] or [
        i for i in rest if calls[i].ret == first_ret
    ]
