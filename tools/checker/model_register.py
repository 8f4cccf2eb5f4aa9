"""Knossos's `register` and `cas-register`: one value, reads, writes, compare-and-set.

As in Knossos, a read that returns nil is "value unknown" and always legal,
so it is dropped; a failed operation did not happen; the initial value is nil
unless `--init` says otherwise. A CAS of unknown outcome may have succeeded
(if the value matched at its linearization point) or never happened.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.history import Operation
from kraftpy.tools.checker.model import ILLEGAL, UNKNOWN, Model, ModelError, outcome_output


def register_step(state: Any, inp: Any, out: Any) -> Any:
    """One register call that took effect: a read must see the value, a write sets it, a CAS needs a match."""
    f = inp[0]
    if f == "read":
        return state if state == out else ILLEGAL
    if f == "write":
        return inp[1]
    old, new = inp[1]
    # ok or unknown CAS alike: it can only have taken effect if the value matched.
    return new if state == old else ILLEGAL


class RegisterModel(Model):
    name = "register"
    functions: tuple[str, ...] = ("read", "write")

    def __init__(self, init: Any = None) -> None:
        self.initial = init

    def prepare_one(self, op: Operation) -> tuple[Any, Any] | None:
        if op.f not in self.functions:
            raise ModelError(f"{self.name} has no operation {op.f!r} (expected {', '.join(self.functions)})", op)
        if op.status == "fail":
            return None
        out = outcome_output(op)
        if op.f == "read":
            # nil (or unknown) read: always legal and changes nothing.
            return None if out is None or out is UNKNOWN else (("read", None), out)
        if op.f == "write":
            return ("write", op.value), None
        if not (isinstance(op.value, tuple) and len(op.value) == 2):
            raise ModelError(f"cas value {op.value!r} is not [old new]", op)
        return ("cas", op.value), None

    def init(self) -> Any:
        return self.initial

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        return register_step(state, inp, out)

    def describe_call(self, call: Any) -> str:
        inp = call.input
        if inp[0] == "read":
            return f"p{call.op.process} read -> {call.output!r}"
        if inp[0] == "write":
            return f"p{call.op.process} write({inp[1]!r})" + (" [unknown]" if call.optional else "")
        return f"p{call.op.process} cas({inp[1][0]!r}, {inp[1][1]!r})" + (" [unknown]" if call.optional else "")


class CasRegisterModel(RegisterModel):
    name = "cas-register"
    functions = ("read", "write", "cas")
