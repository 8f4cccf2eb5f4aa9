"""Format detection and the one entry point that reads any history file.

Detection looks at the first non-blank line: Porcupine's etcd prefix, a JSON
object (kraftpy JSON Lines), or anything else EDN. `--format` overrides it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path

from kraftpy.tools.checker.history import Event, History, HistoryError, pair_events
from kraftpy.tools.checker.read_edn import parse_edn
from kraftpy.tools.checker.read_etcd import PREFIX, parse_etcd
from kraftpy.tools.checker.read_jsonl import parse_jsonl

PARSERS: dict[str, Callable[[str], list[Event]]] = {
    "jsonl": parse_jsonl,
    "edn": parse_edn,
    "etcd": parse_etcd,
}
FORMATS = tuple(PARSERS)


def detect_format(text: str) -> str:
    """The format of a history text: "etcd", "jsonl" or "edn"."""
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if line.startswith(PREFIX):
            return "etcd"
        if stripped.startswith('{"'):
            # EDN maps start with a keyword ({:process ...}); a quoted key is JSON, even a
            # broken one, so its reader reports the real error instead of EDN's.
            return "jsonl"
        if stripped.startswith("{"):
            try:
                return "jsonl" if isinstance(json.loads(stripped), dict) else "edn"
            except json.JSONDecodeError:
                return "edn"
        return "edn"
    return "jsonl"  # an empty file: any reader gives an empty history


def parse_history(text: str, fmt: str | None = None, source: str = "<history>") -> History:
    """Read a history from text; `fmt` None means detect it."""
    fmt = fmt or detect_format(text)
    if fmt not in PARSERS:
        raise HistoryError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}", None, source)
    warnings: list[str] = []
    try:
        events = PARSERS[fmt](text)
        backwards = next((b for a, b in itertools.pairwise(events) if b.time < a.time), None)
        if backwards is not None:
            # Jepsen's checkers take the history's order as real-time order; :time is informational
            # (wall clocks of several client machines need not agree). Do the same, and say so.
            warnings.append(
                f"line {backwards.line}: time {backwards.time} goes backwards; "
                "the history's line order is taken as real-time order"
            )
            events = [dataclasses.replace(ev, time=float(ev.line)) for ev in events]
        ops = pair_events(events)
    except HistoryError as e:
        raise e.with_source(source) from None
    timed = fmt != "etcd" and backwards is None and any(ev.time != ev.line for ev in events)
    return History(source=source, format=fmt, operations=ops, events=events, timed=timed, warnings=warnings)


def read_history(path: str | Path, fmt: str | None = None) -> History:
    """Read a history file in any supported format."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror}", None, str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise HistoryError("not UTF-8 text", line, str(path)) from None
    return parse_history(text, fmt, str(path))
