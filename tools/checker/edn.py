"""A small, strict EDN reader: the subset Jepsen and Knossos write histories in.

Supported: nil, true, false, integers (optional N suffix), floats, strings with
the standard escapes, characters, keywords, symbols, vectors, lists, maps, sets,
`#_` discard and tagged literals (the tag is dropped and the form kept, so
`#jepsen.history.Op{...}` reads as a map). Anything else is an error naming the
line and column: a history we cannot read exactly must not be guessed at.

Values map to Python as: nil -> None, keyword -> Keyword, symbol -> Symbol,
vector/list -> tuple (hashable, so values can be model states), map -> dict,
set -> frozenset.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Keyword:
    """An EDN keyword such as :ok; kept distinct from the string "ok"."""

    name: str

    def __repr__(self) -> str:
        return f":{self.name}"


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str

    def __repr__(self) -> str:
        return self.name


class EdnError(ValueError):
    """Unreadable EDN; `line` and `column` are 1-based."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


# One token per match. Order matters: strings and comments before atoms.
_TOKEN = re.compile(
    r"""
    (?P<ws>[\s,]+)
  | (?P<comment>;[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<badstring>")
  | (?P<open>\#\{|[\[({])
  | (?P<close>[\])}])
  | (?P<discard>\#_)
  | (?P<tag>\#[A-Za-z][^\s,\[\](){}"\\;]*)
  | (?P<char>\\(?:newline|space|tab|return|formfeed|backspace|u[0-9a-fA-F]{4}|\S))
  | (?P<atom>[^\s,\[\](){}"\\;\#][^\s,\[\](){}"\\;]*)
    """,
    re.VERBOSE | re.DOTALL,
)
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)N?\Z")
_FLOAT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?M?\Z")
_SYMBOL = re.compile(r"[A-Za-z*!_?$%&=<>.+\-/][A-Za-z0-9*!_?$%&=<>.+\-/:#']*\Z")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r", "formfeed": "\f", "backspace": "\b"}
_CLOSER = {"[": "]", "(": ")", "{": "}", "#{": "}"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        # Line starts, to turn a position into (line, column) only on error or on request.
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, pos: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def error(self, message: str, pos: int) -> EdnError:
        return EdnError(message, *self.where(pos))

    def next_token(self) -> tuple[str, str, int] | None:
        """The next significant token as (kind, text, start), or None at end of input."""
        text = self.text
        while self.pos < len(text):
            m = _TOKEN.match(text, self.pos)
            if m is None:
                raise self.error(f"unexpected character {text[self.pos]!r}", self.pos)
            start, self.pos = self.pos, m.end()
            kind = m.lastgroup
            assert kind is not None
            if kind in ("ws", "comment"):
                continue
            if kind == "badstring":
                raise self.error("unterminated string", start)
            return kind, m.group(), start
        return None

    def read(self, token: tuple[str, str, int] | None = None) -> Any:
        """Read one form; `token` is its first token if already taken."""
        if token is None:
            token = self.next_token()
            if token is None:
                raise self.error("unexpected end of input", len(self.text))
        kind, text, start = token
        if kind == "open":
            return self.read_collection(text, start)
        if kind == "close":
            raise self.error(f"unexpected {text!r}", start)
        if kind == "discard":
            self.read()
            return self.read()
        if kind == "tag":
            # Tagged literal: Jepsen prints records as #jepsen.history.Op{...}; keep the form.
            return self.read()
        if kind == "string":
            return self.string(text, start)
        if kind == "char":
            body = text[1:]
            if len(body) == 1:
                return body
            if body.startswith("u") and len(body) == 5:
                return chr(int(body[1:], 16))
            return _CHARS[body]
        return self.atom(text, start)

    def read_collection(self, opener: str, start: int) -> Any:
        closer = _CLOSER[opener]
        items: list[Any] = []
        while True:
            token = self.next_token()
            if token is None:
                raise self.error(f"{opener!r} opened here is never closed", start)
            if token[0] == "close":
                if token[1] != closer:
                    raise self.error(f"expected {closer!r} to close {opener!r}, found {token[1]!r}", token[2])
                break
            if token[0] == "discard":
                self.read()
                continue
            items.append(self.read(token))
        if opener in ("[", "("):
            return tuple(items)
        if opener == "#{":
            try:
                return frozenset(items)
            except TypeError:
                raise self.error("set holds an unhashable element", start) from None
        if len(items) % 2:
            raise self.error("map has an odd number of forms", start)
        out: dict[Any, Any] = {}
        for i in range(0, len(items), 2):
            key = items[i]
            try:
                if key in out:
                    raise self.error(f"duplicate map key {key!r}", start)
            except TypeError:
                raise self.error("map key is unhashable", start) from None
            out[key] = items[i + 1]
        return out

    def string(self, text: str, start: int) -> str:
        body = text[1:-1]
        if "\\" not in body:
            return body
        out: list[str] = []
        i = 0
        while i < len(body):
            c = body[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            esc = body[i + 1]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 2
            elif esc == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
            else:
                raise self.error(f"bad escape \\{esc} in string", start + 1 + i)
        return "".join(out)

    def atom(self, text: str, start: int) -> Any:
        if text == "nil":
            return None
        if text == "true":
            return True
        if text == "false":
            return False
        if _INT.match(text):
            return int(text.rstrip("N"))
        if _FLOAT.match(text):
            return float(text.rstrip("M"))
        if text.startswith(":"):
            name = text[1:]
            if name.startswith(":"):
                name = name[1:]  # auto-resolved ::kw: keep its name
            if not name or not _SYMBOL.match(name):
                raise self.error(f"bad keyword {text!r}", start)
            return Keyword(name)
        if _SYMBOL.match(text):
            return Symbol(text)
        raise self.error(f"cannot read {text!r}", start)


def loads(text: str) -> Any:
    """Read exactly one EDN form from `text`."""
    reader = _Reader(text)
    value = reader.read()
    extra = reader.next_token()
    if extra is not None:
        raise reader.error("more than one form", extra[2])
    return value


def iter_forms(text: str) -> Iterator[tuple[Any, int]]:
    """Yield (form, line) for each top-level form; a leading vector or list yields its elements.

    That covers the ways Jepsen and Knossos write a history: one map per line,
    or one vector (Jepsen) or list (Knossos's data files) of maps.
    """
    reader = _Reader(text)
    token = reader.next_token()
    if token is not None and token[0] == "open" and token[1] in ("[", "("):
        start, opener = token[2], token[1]
        closer = _CLOSER[opener]
        while True:
            token = reader.next_token()
            if token is None:
                raise reader.error(f"{opener!r} opened here is never closed", start)
            if token[0] == "close":
                if token[1] != closer:
                    raise reader.error(f"expected {closer!r} to close {opener!r}, found {token[1]!r}", token[2])
                break
            if token[0] == "discard":
                reader.read()
                continue
            yield reader.read(token), reader.where(token[2])[0]
        extra = reader.next_token()
        if extra is not None:
            raise reader.error("unexpected form after the history vector", extra[2])
        return
    while token is not None:
        line = reader.where(token[2])[0]
        yield reader.read(token), line
        token = reader.next_token()
