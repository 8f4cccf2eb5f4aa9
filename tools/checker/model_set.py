"""A set: add(x) and read() -> the whole set (Knossos's set semantics).

A read must return exactly the elements added so far. A read with no known
result constrains nothing and is dropped; an add of unknown outcome may have
happened or not. Reads see every element, so the set is not partitioned.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.history import Operation
from kraftpy.tools.checker.model import ILLEGAL, UNKNOWN, Call, Model, ModelError, outcome_output


class SetModel(Model):
    name = "set"

    def prepare_one(self, op: Operation) -> tuple[Any, Any] | None:
        if op.status == "fail":
            return None
        out = outcome_output(op)
        if op.f == "add":
            return ("add", op.value), None
        if op.f == "read":
            if out is UNKNOWN or out is None:
                return None
            try:
                return ("read", None), frozenset(out)
            except TypeError:
                raise ModelError(f"read returned {out!r}, not a collection of values", op) from None
        raise ModelError(f"set has no operation {op.f!r} (expected add, read)", op)

    def init(self) -> Any:
        return frozenset()

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        if inp[0] == "add":
            return state | {inp[1]}
        return state if state == out else ILLEGAL

    def describe_state(self, state: Any) -> str:
        return "#{" + " ".join(sorted(map(repr, state))) + "}"

    def describe_call(self, call: Call) -> str:
        if call.input[0] == "add":
            return f"p{call.op.process} add({call.input[1]!r})" + (" [unknown]" if call.optional else "")
        return f"p{call.op.process} read -> {self.describe_state(call.output)}"
