"""The history model shared by every reader and checker: events, operations, pairing.

A reader turns a file into client `Event`s in real-time order; `pair_events`
matches each invocation with the next event of the same process, giving
`Operation`s with a call time and a return time. An `info` completion, or an
invocation that never completes, returns at +infinity: it may take effect at
any point after its call, or never.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.tools.checker.edn import Keyword

EVENT_TYPES = ("invoke", "ok", "fail", "info")


class HistoryError(ValueError):
    """A history we cannot read; names the file and line and says what is wrong."""

    def __init__(self, message: str, line: int | None = None, source: str | None = None) -> None:
        self.reason = message
        self.line = line
        self.source = source
        super().__init__(self._text())

    def _text(self) -> str:
        where = ":".join(str(x) for x in (self.source, self.line) if x is not None)
        return f"{where}: {self.reason}" if where else self.reason

    def with_source(self, source: str) -> HistoryError:
        self.source = source
        self.args = (self._text(),)
        return self


def event_time(fields: Mapping[str, Any], line: int, timed: bool | None, key: str) -> tuple[int | float, bool]:
    """An event's time (its line number when the history has no times) and whether it had one.

    Either every event of a history has a time or none has; `timed` is what the events so far said."""
    has_time = "time" in fields
    if timed is not None and timed != has_time:
        raise HistoryError(f"some events have {key} and some do not", line)
    time = fields["time"] if has_time else line
    if not isinstance(time, int | float) or isinstance(time, bool):
        raise HistoryError(f"{key} {time!r} is not a number", line)
    return time, has_time


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a history: an invocation or a completion by a client process."""

    line: int
    process: int
    type: str
    f: str
    key: Any = None
    value: Any = None
    time: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Operation:
    """An invocation and its completion, if any.

    `status` is the completion's type, or "pending" when none came. `ret` is
    +inf for info and pending operations. `result` is the completion's value.
    """

    id: int
    process: int
    f: str
    key: Any
    value: Any
    result: Any
    status: str
    call: float
    ret: float
    invoke_line: int
    complete_line: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        """True when the outcome is known (ok or fail)."""
        return self.status in ("ok", "fail")

    def describe(self) -> str:
        key = "" if self.key is None else f" key={_show(self.key)}"
        shown = self.result if self.status == "ok" else self.value
        return f"p{self.process} {self.f}{key} {_show(shown)} [{self.status}]"


def _show(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, Keyword):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + " ".join(_show(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value + '"'
    return str(value)


@dataclass(slots=True)
class History:
    """Client operations in invocation order, and where they came from."""

    source: str
    format: str
    operations: list[Operation]
    events: list[Event]
    timed: bool  # False when time is the line order
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.operations)


def pair_events(events: Iterable[Event], source: str | None = None) -> list[Operation]:
    """Match invocations with completions, process by process.

    The completion of an invocation is the next event of the same process. A
    completion with nothing open, a second invocation while one is open, or a
    completion whose f differs from its invocation is an error naming the line.
    """
    open_ops: dict[int, Operation] = {}
    ops: list[Operation] = []
    last_time = -math.inf
    for ev in events:
        if ev.type not in EVENT_TYPES:
            raise HistoryError(f"type {ev.type!r} is not one of {', '.join(EVENT_TYPES)}", ev.line, source)
        if ev.time < last_time:  # parse_history puts such histories in line order first
            raise HistoryError(f"time {ev.time} goes backwards (previous {last_time})", ev.line, source)
        last_time = ev.time
        current = open_ops.get(ev.process)
        if ev.type == "invoke":
            if current is not None:
                raise HistoryError(
                    f"process {ev.process} invokes {ev.f} while its {current.f} from line "
                    f"{current.invoke_line} is still open",
                    ev.line,
                    source,
                )
            op = Operation(
                id=len(ops),
                process=ev.process,
                f=ev.f,
                key=ev.key,
                value=ev.value,
                result=None,
                status="pending",
                call=ev.time,
                ret=math.inf,
                invoke_line=ev.line,
                complete_line=None,
                extra=dict(ev.extra),
            )
            ops.append(op)
            open_ops[ev.process] = op
            continue
        if current is None:
            raise HistoryError(
                f"process {ev.process} completes {ev.f} ({ev.type}) but has no open invocation",
                ev.line,
                source,
            )
        if ev.f != current.f:
            raise HistoryError(
                f"completion f {ev.f!r} differs from the invocation's {current.f!r} on line {current.invoke_line}",
                ev.line,
                source,
            )
        if ev.key is not None and current.key is not None and ev.key != current.key:
            raise HistoryError(
                f"completion key {ev.key!r} differs from the invocation's {current.key!r} "
                f"on line {current.invoke_line}",
                ev.line,
                source,
            )
        del open_ops[ev.process]
        current.status = ev.type
        current.result = ev.value
        current.complete_line = ev.line
        current.extra.update(ev.extra)
        if current.key is None:
            current.key = ev.key
        # An info op's outcome is unknown: it stays open to the end of time.
        current.ret = math.inf if ev.type == "info" else ev.time
    return ops
