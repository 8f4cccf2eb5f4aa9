"""Helpers for the checker tests: histories from compact event tuples."""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.history import Event, History, pair_events


def history(*events: tuple[Any, ...]) -> History:
    """Events as (process, type, f[, value[, key]]) in real-time order; time = position."""
    evs = []
    for line, e in enumerate(events, start=1):
        process, type_, f = e[0], e[1], e[2]
        value = e[3] if len(e) > 3 else None
        key = e[4] if len(e) > 4 else None
        evs.append(Event(line=line, process=process, type=type_, f=f, key=key, value=value, time=line))
    return History(source="<test>", format="test", operations=pair_events(evs), events=evs, timed=False)


def op(process: int, f: str, value: Any = None, result: Any = None, key: Any = None, status: str = "ok"):
    """An invoke and its completion as two consecutive events (a sequential operation)."""
    return [(process, "invoke", f, value, key), (process, status, f, result if f in READS else value, key)]


READS = {"read", "get", "dequeue"}


def seq(*pairs: list[tuple[Any, ...]]) -> History:
    """A history of operations that do not overlap, in order."""
    return history(*[e for pair in pairs for e in pair])
