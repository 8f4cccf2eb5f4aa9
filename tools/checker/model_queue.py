"""A FIFO queue: enqueue(x), dequeue() -> x (Knossos's fifo-queue, plus "empty").

A dequeue that returns a value must return the head. A dequeue completed ok
with nil/null found the queue empty (legal only when it is), a kraftpy
extension: Jepsen records that case as a failed dequeue, which is dropped.
A dequeue of unknown outcome may have removed the head, or never happened.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.history import Operation
from kraftpy.tools.checker.model import ILLEGAL, UNKNOWN, Call, Model, ModelError, outcome_output


class QueueModel(Model):
    name = "queue"

    def prepare_one(self, op: Operation) -> tuple[Any, Any] | None:
        if op.status == "fail":
            return None
        out = outcome_output(op)
        if op.f == "enqueue":
            return ("enqueue", op.value), None
        if op.f == "dequeue":
            return ("dequeue", None), out
        raise ModelError(f"queue has no operation {op.f!r} (expected enqueue, dequeue)", op)

    def init(self) -> Any:
        return ()

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        if inp[0] == "enqueue":
            return (*state, inp[1])
        if out is UNKNOWN:
            return state[1:] if state else ILLEGAL  # if it happened, it took the head
        if out is None:
            return state if not state else ILLEGAL
        return state[1:] if state and state[0] == out else ILLEGAL

    def describe_state(self, state: Any) -> str:
        return "[" + " ".join(map(repr, state)) + "]"

    def describe_call(self, call: Call) -> str:
        p = call.op.process
        if call.input[0] == "enqueue":
            return f"p{p} enqueue({call.input[1]!r})" + (" [unknown]" if call.optional else "")
        out = call.output
        return f"p{p} dequeue -> " + ("unknown" if out is UNKNOWN else "empty" if out is None else repr(out))
