"""Reader for Porcupine's Jepsen etcd logs (`INFO  jepsen.util - P  :type  :f  value`).

The grammar is the one in shared/conformance/porcupine/README.md: the prefix
has exactly two spaces after INFO, the four fields after it are separated by
tabs (files 000-099) or runs of spaces (100-102), so we split on any run of
whitespace, as Porcupine does. There are no timestamps: time is the line number.
"""

from __future__ import annotations

import re
from typing import Any

from kraftpy.tools.checker.edn import Keyword
from kraftpy.tools.checker.history import EVENT_TYPES, Event, HistoryError

PREFIX = "INFO  jepsen.util - "
_FIELDS = re.compile(r"(\S+)\s+:(\S+)\s+:(\S+)\s+(\S.*?)\s*\Z")
_INT = re.compile(r"-?[0-9]+\Z")
_PAIR = re.compile(r"\[\s*(-?[0-9]+)\s+(-?[0-9]+)\s*\]\Z")
_FUNCTIONS = ("read", "write", "cas")


def _value(text: str, line: int) -> Any:
    if text == "nil":
        return None
    if _INT.match(text):
        return int(text)
    m = _PAIR.match(text)
    if m:
        return (int(m.group(1)), int(m.group(2)))
    if text.startswith(":") and len(text) > 1:
        return Keyword(text[1:])
    raise HistoryError(f"cannot read value {text!r} (expected nil, an integer, [A B] or a keyword)", line)


def parse_etcd(text: str) -> list[Event]:
    """Every line of an etcd log as an Event; time is the line number."""
    events: list[Event] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if raw == "":
            continue  # the final LF leaves an empty tail
        if not raw.startswith(PREFIX):
            raise HistoryError(f"line does not start with {PREFIX!r}", number)
        m = _FIELDS.match(raw, len(PREFIX))
        if m is None:
            raise HistoryError("expected four fields: process :type :f value", number)
        proc_text, type_, f, value_text = m.groups()
        if not _INT.match(proc_text):
            raise HistoryError(f"process {proc_text!r} is not an integer", number)
        if type_ not in EVENT_TYPES:
            raise HistoryError(f"type :{type_} is not one of :invoke :ok :fail :info", number)
        if f not in _FUNCTIONS:
            raise HistoryError(f"f :{f} is not one of :read :write :cas", number)
        value = _value(value_text, number)
        events.append(Event(line=number, process=int(proc_text), type=type_, f=f, value=value, time=number))
    return events
