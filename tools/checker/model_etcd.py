"""Porcupine's etcd model: one register read, written and CASed by Jepsen's etcd test.

Semantics as shared/conformance/porcupine/README.md states them: the initial
value is nil (key absent) and a read of nil is legal only when the key is
absent; a failed CAS stays in the history as "returned false" (legal only
when the value differs); info writes and CASes may take effect at any point
after their invocation or never; `:fail :read :timed-out` has no output and
constrains nothing, so it is dropped.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.history import Operation
from kraftpy.tools.checker.model import ILLEGAL, UNKNOWN, Model, ModelError, outcome_output
from kraftpy.tools.checker.model_register import register_step


class EtcdModel(Model):
    name = "etcd"

    def prepare_one(self, op: Operation) -> tuple[Any, Any] | None:
        if op.f == "read":
            if op.status != "ok":
                return None  # timed-out read: unknown result, no effect
            return ("read", None), op.result
        if op.f == "write":
            if op.status == "fail":
                return None
            return ("write", op.value), outcome_output(op)
        if op.f == "cas":
            if not (isinstance(op.value, tuple) and len(op.value) == 2):
                raise ModelError(f"cas value {op.value!r} is not [old new]", op)
            out = {"ok": True, "fail": False}.get(op.status, UNKNOWN)
            return ("cas", op.value), out
        raise ModelError(f"etcd has no operation {op.f!r} (expected read, write, cas)", op)

    def init(self) -> Any:
        return None

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        if inp[0] == "cas" and out is False:
            return state if state != inp[1][0] else ILLEGAL  # "returned false": legal only on a mismatch
        # ok, or unknown: an unknown CAS that did not match is the same as one that never ran.
        return register_step(state, inp, out)

    def describe_call(self, call: Any) -> str:
        inp, out, p = call.input, call.output, call.op.process
        if inp[0] == "read":
            return f"p{p} read -> {'nil' if out is None else out}"
        if inp[0] == "write":
            return f"p{p} write({inp[1]})" + (" [unknown]" if out is UNKNOWN else "")
        shown = {True: "ok", False: "false"}.get(out, "unknown")
        return f"p{p} cas({inp[1][0]}, {inp[1][1]}) -> {shown}"
