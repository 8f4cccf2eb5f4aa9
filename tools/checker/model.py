"""What a sequential specification must provide to the linearizability search.

Design notes: docs/checker.md, section "tools/checker/model.py".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from kraftpy.tools.checker.history import Operation


class _Unknown:
    """The output of an operation whose outcome was not observed."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"  # unpickles as this module's singleton


UNKNOWN = _Unknown()


class _Illegal:
    def __repr__(self) -> str:
        return "ILLEGAL"

    def __reduce__(self) -> str:
        return "ILLEGAL"


ILLEGAL = _Illegal()
"""Returned by `Model.step` when the output cannot happen in the given state."""


@dataclass(slots=True)
class Call:
    """One operation as the search sees it."""

    op: Operation
    input: Any
    output: Any
    call: float
    ret: float  # +inf: may be linearized at any point after `call`, or never

    @property
    def optional(self) -> bool:
        return math.isinf(self.ret)


class ModelError(ValueError):
    """An operation the model does not understand; names the line."""

    def __init__(self, message: str, op: Operation) -> None:
        super().__init__(f"line {op.invoke_line}: {message}")
        self.line = op.invoke_line


class Model:
    """Base class: override `prepare_one`, `init` and `step`; `partition` if P-compositional."""

    name = "model"

    def prepare(self, ops: Sequence[Operation]) -> list[Call]:
        """The calls the search must place, in invocation order."""
        calls = []
        for op in ops:
            io = self.prepare_one(op)
            if io is not None:
                calls.append(Call(op, io[0], io[1], op.call, op.ret))
        return calls

    def prepare_one(self, op: Operation) -> tuple[Any, Any] | None:
        """(input, output) for one operation, or None to drop it (see the module docstring)."""
        raise NotImplementedError

    def init(self) -> Hashable:
        raise NotImplementedError

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        """The state after applying (inp -> out) to `state`, or ILLEGAL."""
        raise NotImplementedError

    def partition(self, calls: list[Call]) -> list[tuple[Any, list[Call]]]:
        """Independent parts as (label, calls); one part unless the model is P-compositional."""
        return [(None, calls)]

    def projections(self, calls: list[Call]) -> tuple[Model, list[tuple[Any, list[Call]]]] | None:
        """Sub-histories with a smaller model, for a search that is too big as one; None if none.

        A projection keeps the calls that touch one component of the state,
        checked against a model of that component alone. A model offers them
        only when every call reads and changes one component and its output
        depends on that component alone: then a linearization of the whole
        history restricted to a projection is a linearization of the
        projection, so a projection that cannot be linearized proves the
        history cannot be. Linearizations of the projections only propose
        an order for the whole history; see projection.py.
        """
        return None

    def describe_state(self, state: Any) -> str:
        return repr(state)

    def describe_call(self, call: Call) -> str:
        return call.op.describe()


def outcome_output(op: Operation) -> Any:
    """The observed output of a completed op, or UNKNOWN for info/pending."""
    return op.result if op.status == "ok" else UNKNOWN
