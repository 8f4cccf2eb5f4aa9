"""Reader for Jepsen/Knossos EDN histories: one map per line, or one vector of maps.

Each map needs :process, :type and :f; :key, :value and :time are optional
(time is the line number when no event has one). Events whose process is not
an integer (Jepsen's :nemesis) are not client operations and are skipped.
Other fields (:index, :error, :rebalance-log, ...) are kept in `extra`.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.edn import EdnError, Keyword, iter_forms
from kraftpy.tools.checker.history import Event, HistoryError, event_time

_CORE = {"process", "type", "f", "key", "value", "time"}


def _name(value: Any, what: str, line: int) -> str:
    if isinstance(value, Keyword):
        return value.name
    if isinstance(value, str):
        return value
    raise HistoryError(f"{what} {value!r} is not a keyword", line)


def parse_edn(text: str) -> list[Event]:
    """Client events of an EDN history, in file order."""
    events: list[Event] = []
    timed: bool | None = None
    try:
        for form, line in iter_forms(text):
            if not isinstance(form, dict):
                raise HistoryError(f"expected a map, found {type(form).__name__}", line)
            fields = {(k.name if isinstance(k, Keyword) else k): v for k, v in form.items()}
            for required in ("process", "type", "f"):
                if required not in fields:
                    raise HistoryError(f"map has no :{required}", line)
            process = fields["process"]
            if not isinstance(process, int) or isinstance(process, bool):
                continue  # :nemesis and other non-client processes
            time, timed = event_time(fields, line, timed, ":time")
            events.append(
                Event(
                    line=line,
                    process=process,
                    type=_name(fields["type"], ":type", line),
                    f=_name(fields["f"], ":f", line),
                    key=fields.get("key"),
                    value=fields.get("value"),
                    time=time,
                    extra={k: v for k, v in fields.items() if k not in _CORE and isinstance(k, str)},
                )
            )
    except EdnError as e:
        raise HistoryError(f"{e.reason} (column {e.column})", e.line) from None
    return events
