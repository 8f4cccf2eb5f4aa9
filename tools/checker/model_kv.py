"""A key/value map of strings: get, put, append (Porcupine's kv model).

A key never written reads as "". Partitioned (the default), each key is its
own part with a string as state; with `partitioned=False` the whole history
is one search over the map, a tuple with one string per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kraftpy.tools.checker.history import Operation
from kraftpy.tools.checker.model import ILLEGAL, UNKNOWN, Call, Model, ModelError, outcome_output


class KvModel(Model):
    name = "kv"

    def __init__(self, partitioned: bool = True) -> None:
        self.partitioned = partitioned
        self.keys: list[Any] = []

    def prepare(self, ops: Sequence[Operation]) -> list[Call]:
        index: dict[Any, int] = {}
        calls: list[Call] = []
        for op in ops:
            if op.f not in ("get", "put", "append"):
                raise ModelError(f"kv has no operation {op.f!r} (expected get, put, append)", op)
            if op.key is None:
                raise ModelError(f"{op.f} has no key", op)
            if op.status == "fail":
                continue
            out = outcome_output(op)
            if op.f == "get" and out is UNKNOWN:
                continue  # a get with no result constrains nothing
            if op.f == "get" and not isinstance(out, str):
                raise ModelError(f"get returned {out!r}, not a string", op)
            if op.f != "get" and not isinstance(op.value, str):
                raise ModelError(f"{op.f} value {op.value!r} is not a string", op)
            k = index.setdefault(op.key, len(index))
            calls.append(Call(op, (op.f, k, op.value), out, op.call, op.ret))
        self.keys = list(index)
        return calls

    def init(self) -> Any:
        return "" if self.partitioned else ("",) * len(self.keys)

    def step(self, state: Any, inp: Any, out: Any) -> Any:
        f, k, arg = inp
        if self.partitioned:
            if f == "get":
                return state if state == out else ILLEGAL
            return arg if f == "put" else state + arg
        current = state[k]
        if f == "get":
            return state if current == out else ILLEGAL
        new = arg if f == "put" else current + arg
        return (*state[:k], new, *state[k + 1 :])

    def partition(self, calls: list[Call]) -> list[tuple[Any, list[Call]]]:
        if not self.partitioned:
            return [(None, calls)]
        parts: dict[int, list[Call]] = {}
        for c in calls:
            parts.setdefault(c.input[1], []).append(c)
        return [(self.keys[k], part) for k, part in sorted(parts.items())]

    def projections(self, calls: list[Call]) -> tuple[Model, list[tuple[Any, list[Call]]]] | None:
        """Without partitioning, one projection per key against the one-string model.

        A call's input names its key, so the calls serve both models as they are.
        """
        if self.partitioned:
            return None
        per_key = KvModel(partitioned=True)
        per_key.keys = self.keys
        return per_key, per_key.partition(calls)

    def describe_state(self, state: Any) -> str:
        if self.partitioned:
            return repr(state)
        return "{" + ", ".join(f"{self.keys[i]!r}: {v!r}" for i, v in enumerate(state) if v) + "}"

    def describe_call(self, call: Call) -> str:
        f, k, arg = call.input
        key = self.keys[k] if k < len(self.keys) else k
        if f == "get":
            return f"p{call.op.process} get({key!r}) -> {call.output!r}"
        return f"p{call.op.process} {f}({key!r}, {arg!r})" + (" [unknown]" if call.optional else "")
