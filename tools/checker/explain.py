"""The human-readable report of a check: the verdict and, on failure, why.

For a history that is not linearizable: per failing part, the longest
linearizable prefix the search found (its tail), the model state after it,
and the operations that real-time order allows next and that are all illegal
in that state. For the Kafka checker: each anomaly with its operations.
"""

from __future__ import annotations

from typing import Any

from kraftpy.tools.checker.result import CheckResult

PREFIX_TAIL = 8  # how many of the last linearized operations to show


def verdict_word(result: CheckResult) -> str:
    if result.model.startswith("kafka"):
        return {True: "VALID", False: "INVALID"}.get(result.valid, "UNKNOWN")  # type: ignore[arg-type]
    return {True: "LINEARIZABLE", False: "NOT LINEARIZABLE"}.get(result.valid, "UNKNOWN")  # type: ignore[arg-type]


def _key(a: dict[str, Any]) -> str:
    return "The history" if a.get("key") is None else f"Key {a['key']!r}"


def explain(result: CheckResult) -> str:
    """A few readable lines saying what was found."""
    h = result.history
    head = f"{verdict_word(result)}: model {result.model}, {result.operations} operations"
    if h is not None:
        head += f" from {h.source} ({h.format})"
    lines = [head + f", checked in {result.elapsed_s:.3f} s"]
    if result.model.startswith("kafka"):
        lines += _explain_kafka(result)
    else:
        lines += _explain_linearizability(result)
    return "\n".join(lines)


def _explain_linearizability(result: CheckResult) -> list[str]:
    lines: list[str] = []
    for a in result.anomalies:
        if a["type"] == "nonlinearizable":
            prefix = a["longest_prefix"]
            lines.append(f"\n{_key(a)} ({a['calls']} operations) cannot be linearized.")
            if a.get("projection"):
                lines.append("  (Found by searching this key alone, as the search of the whole history had not")
                lines.append("  decided: one key whose operations cannot be linearized is enough.)")
            lines.append(f"  Longest linearizable prefix found: {len(prefix)} operations" + (":" if prefix else "."))
            if len(prefix) > PREFIX_TAIL:
                lines.append(f"    ... {len(prefix) - PREFIX_TAIL} earlier operations")
            for pos, c in list(enumerate(prefix, 1))[-PREFIX_TAIL:]:
                lines.append(f"    {pos:>4}. line {c['line']:<6} {c['text']}")
            lines.append(f"  Model state after it: {a['state']}")
            lines.append("  Operations that cannot be placed next (each is illegal in that state):")
            for c in a["unplaceable"]:
                lines.append(f"          line {c['line']:<6} {c['text']}")
        elif a["type"] == "undecided":
            lines.append(
                f"\n{_key(a)} ({a['calls']} operations) was not decided: budget spent ({a['reason']}); "
                f"longest linearizable prefix found so far: {len(a['longest_prefix'])} operations."
            )
        elif a["type"] == "unchecked":
            lines.append(f"\n{_key(a)} ({a['calls']} operations) was not checked before the budget ran out.")
    if result.valid is False and len(result.anomalies) == 1:
        lines.append("\n(The check stops at the first part that fails; other parts may fail too.)")
    return lines


def _explain_kafka(result: CheckResult) -> list[str]:
    if not result.anomalies:
        return ["No anomalies."]
    counts: dict[str, int] = {}
    for a in result.anomalies:
        counts[a["type"]] = counts.get(a["type"], 0) + 1
    lines = ["Anomalies: " + ", ".join(f"{t} x{n}" for t, n in counts.items())]
    for a in result.anomalies:
        tag = "" if a["failure"] else " (allowed)"
        if "steps" in a:  # a dependency cycle: each step with its type and the key it is about
            lines.append(f"  {a['type']}{tag}: " + _cycle(a))
            continue
        details = ", ".join(f"{k}={v!r}" for k, v in a.items() if k not in ("type", "ops", "failure"))
        ops = ", ".join(f"line {o['line']} p{o['process']} {o['f']} {o['status']}" for o in a["ops"])
        lines.append(f"  {a['type']}{tag}: {details}\n      ops: {ops}")
    return lines


def _cycle(a: dict[str, Any]) -> str:
    lines = {o["id"]: o["line"] for o in a["ops"]}
    steps = [f"line {lines[s['from']]} -{s['type']} key {s['key']!r} {s['value']!r}-> " for s in a["steps"]]
    return "".join(steps) + f"line {lines[a['steps'][0]['from']]}"
