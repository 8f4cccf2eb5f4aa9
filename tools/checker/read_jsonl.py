"""Reader for kraftpy's own JSON Lines history (docs/history-format.md).

One JSON object per line with process, type, f and optionally key, value,
time; any further fields (offset, rebalanced, error, ...) are kept in `extra`.
JSON arrays become tuples so values can be parts of hashable model states.
Non-integer processes (such as "nemesis") are not clients and are skipped.
"""

from __future__ import annotations

import json
from typing import Any

from kraftpy.tools.checker.history import EVENT_TYPES, Event, HistoryError, event_time

_CORE = {"process", "type", "f", "key", "value", "time"}


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def parse_jsonl(text: str) -> list[Event]:
    """Client events of a JSON Lines history, in file order. Blank lines are allowed."""
    events: list[Event] = []
    timed: bool | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise HistoryError(f"not JSON: {e.msg} (column {e.colno})", number) from None
        if not isinstance(obj, dict):
            raise HistoryError(f"expected a JSON object, found {type(obj).__name__}", number)
        for required in ("process", "type", "f"):
            if required not in obj:
                raise HistoryError(f"object has no {required!r}", number)
        process = obj["process"]
        if not isinstance(process, int) or isinstance(process, bool):
            if isinstance(process, str):
                continue  # "nemesis" and other non-client processes
            raise HistoryError(f"process {process!r} is neither an integer nor a name", number)
        type_, f = obj["type"], obj["f"]
        if type_ not in EVENT_TYPES:
            raise HistoryError(f"type {type_!r} is not one of {', '.join(EVENT_TYPES)}", number)
        if not isinstance(f, str) or not f:
            raise HistoryError(f"f {f!r} is not a non-empty string", number)
        time, timed = event_time(obj, number, timed, "time")
        events.append(
            Event(
                line=number,
                process=process,
                type=type_,
                f=f,
                key=_freeze(obj.get("key")),
                value=_freeze(obj.get("value")),
                time=time,
                extra={k: _freeze(v) for k, v in obj.items() if k not in _CORE},
            )
        )
    return events
