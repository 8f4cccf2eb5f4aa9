"""Random histories made by running a sequential specification under random concurrency.

Each operation takes effect at one instant between its invocation and its
completion, so the history is linearizable by construction. Some operations
crash (info): they either took effect before the crash or never did; the
process is then retired and a fresh process number takes its place, as in
Jepsen. The specifications here are written independently of the checker's
models, so the property tests compare two implementations.
"""

from __future__ import annotations

import random
from typing import Any

from kraftpy.tools.checker.history import Event, History, pair_events

KINDS = ("register", "cas-register", "etcd", "kv", "set", "queue")
READ_F = {"read", "get", "dequeue"}


class Spec:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.state: Any = {"kv": {}, "set": set(), "queue": []}.get(kind)
        self.counter = 0

    def new_op(self, rng: random.Random) -> tuple[str, Any, Any]:
        """(f, key, argument) of a fresh operation."""
        self.counter += 1
        k = self.kind
        if k in ("register", "cas-register", "etcd"):
            fs = ["read", "write"] + (["cas"] if k != "register" else [])
            f = rng.choice(fs)
            arg = {"read": None, "write": rng.randint(0, 4), "cas": (rng.randint(0, 4), rng.randint(0, 4))}[f]
            return f, None, arg
        if k == "kv":
            f = rng.choice(["get", "get", "put", "append", "append"])
            return f, rng.choice("abc"), None if f == "get" else f"x{self.counter}y"
        if k == "set":
            return ("read", None, None) if rng.random() < 0.4 else ("add", None, self.counter)
        return ("dequeue", None, None) if rng.random() < 0.5 else ("enqueue", None, self.counter)

    def apply(self, f: str, key: Any, arg: Any) -> tuple[str, Any]:
        """Run the op atomically: (completion type, completion value)."""
        k = self.kind
        if k in ("register", "cas-register", "etcd"):
            if f == "read":
                return "ok", self.state
            if f == "write":
                self.state = arg
                return "ok", arg
            if self.state == arg[0]:
                self.state = arg[1]
                return "ok", arg
            return "fail", arg
        if k == "kv":
            cur = self.state.get(key, "")
            if f == "get":
                return "ok", cur
            self.state[key] = arg if f == "put" else cur + arg
            return "ok", arg
        if k == "set":
            if f == "add":
                self.state.add(arg)
                return "ok", arg
            return "ok", tuple(sorted(self.state))
        if f == "enqueue":
            self.state.append(arg)
            return "ok", arg
        return "ok", self.state.pop(0) if self.state else None


def random_history(kind: str, rng: random.Random, processes: int, ops: int, crash_p: float) -> History:
    """A linearizable history of `ops` operations over `processes` concurrent clients."""
    spec = Spec(kind)
    init = 0 if kind in ("register", "cas-register") else None
    if init is not None:
        spec.state = init
    events: list[Event] = []
    slots: list[dict[str, Any]] = [{"p": i, "open": None} for i in range(processes)]
    next_p = processes
    started = 0

    def emit(p: int, type_: str, f: str, key: Any, value: Any) -> None:
        line = len(events) + 1
        events.append(Event(line=line, process=p, type=type_, f=f, key=key, value=value, time=line))

    while started < ops or any(s["open"] for s in slots):
        slot = rng.choice(slots)
        cur = slot["open"]
        if cur is None:
            if started >= ops:
                continue
            f, key, arg = spec.new_op(rng)
            started += 1
            slot["open"] = {"f": f, "key": key, "arg": arg, "done": None}
            emit(slot["p"], "invoke", f, key, arg)
        elif cur["done"] is None and rng.random() < crash_p / 2 and cur["f"] not in READ_F:
            emit(slot["p"], "info", cur["f"], cur["key"], cur["arg"])  # crashed before taking effect
            slot["open"], slot["p"], next_p = None, next_p, next_p + 1
        elif cur["done"] is None:
            cur["done"] = spec.apply(cur["f"], cur["key"], cur["arg"])
        else:
            type_, value = cur["done"]
            if rng.random() < crash_p:
                emit(slot["p"], "info", cur["f"], cur["key"], cur["arg"])  # took effect, then crashed
                slot["p"], next_p = next_p, next_p + 1
            else:
                emit(slot["p"], type_, cur["f"], cur["key"], value)
            slot["open"] = None
    return History("<generated>", "test", pair_events(events), events, False)


IMPOSSIBLE = {"register": 99, "cas-register": 99, "etcd": 99, "kv": "zzz", "set": None, "queue": 10**6}


def corrupt_read(h: History, rng: random.Random) -> History | None:
    """The same history with one completed read changed to a value nothing could produce."""
    reads = [op for op in h.operations if op.status == "ok" and op.f in READ_F]
    if not reads:
        return None
    victim = rng.choice(reads)
    kind_value = IMPOSSIBLE
    events = []
    for ev in h.events:
        if ev.line == victim.complete_line:
            if ev.f == "read" and isinstance(ev.value, tuple):  # a set read: add an element never added
                bad: Any = (*ev.value, 10**6)
            elif ev.f == "get":
                bad = kind_value["kv"]
            elif ev.f == "dequeue":
                bad = kind_value["queue"]
            else:
                bad = 99
            ev = Event(ev.line, ev.process, ev.type, ev.f, ev.key, bad, ev.time)
        events.append(ev)
    return History(h.source, h.format, pair_events(events), events, False)
