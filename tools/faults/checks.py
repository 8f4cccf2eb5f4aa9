"""`kraftpy check` for a fault run: bounded, and its verdict read as Jepsen's three values.

A linearizability search can take exponential time (every write whose outcome is unknown stays open
to the history's end), so the checker gets its own bound (`--timeout-s`), shorter than the process's:
past it, it answers "unknown" itself. A check that decides nothing leaves the run undecided, never
valid and never invalid; an answer that is not JSON means the checker itself failed (`CheckFailed`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftpy.tools.faults.workloads.entry import Cli

CHECK_TIMEOUT_S = 90.0  # one check process, as the run's other CLI calls (run.py counts it in its bound)
ANSWER_MARGIN_S = 15.0  # the search stops this much earlier, to answer "unknown" itself


class CheckFailed(Exception):
    """`kraftpy check` printed no verdict."""


@dataclass(frozen=True)
class CheckVerdict:
    valid: bool | None  # None: the checker could not decide (time, memory)
    body: dict[str, Any]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The anomalies that fail a run (a workload's allowed classes do not)."""
        return [a for a in self.body.get("anomalies", []) if a.get("failure", True) and a.get("type") != "undecided"]

    @property
    def undecided(self) -> list[dict[str, Any]]:
        return [a for a in self.body.get("anomalies", []) if a.get("type") == "undecided"]


@dataclass
class Judgement:
    """What a workload's own judge found: anomalies by class, and the checks that decided nothing."""

    anomalies: dict[str, Any] = field(default_factory=dict)
    undecided: dict[str, Any] = field(default_factory=dict)


def run_verdict(anomalies: dict[str, Any], undecided: dict[str, Any]) -> bool | None:
    """A run's verdict from all its judges: any anomaly fails it; else a check that decided nothing
    leaves it unknown (None); else it is valid."""
    if anomalies:
        return False
    return None if undecided else True


def run_check(
    cli: Cli, history: Path, args: Sequence[str], process_timeout_s: float, search_s: float | None = None
) -> CheckVerdict:
    """`kraftpy check HISTORY ARGS --json`, its search bounded by `search_s` (default: ANSWER_MARGIN_S
    less than `process_timeout_s`, the bound of the whole process)."""
    if search_s is None:
        search_s = max(1.0, process_timeout_s - ANSWER_MARGIN_S)
    try:
        done = cli("check", str(history), *args, "--json", "--timeout-s", f"{search_s:g}", timeout_s=process_timeout_s)
    except subprocess.TimeoutExpired:  # it did not even answer "unknown" in time (a starved machine)
        reason = f"kraftpy check did not answer within {process_timeout_s:g} s"
        return CheckVerdict(None, {"valid": "unknown", "anomalies": [{"type": "undecided", "reason": reason}]})
    try:
        body = json.loads(done.stdout)
    except ValueError:
        raise CheckFailed(f"kraftpy check failed: {done.stderr.strip()[-500:]}") from None
    if not isinstance(body, dict):
        raise CheckFailed(f"kraftpy check printed {type(body).__name__}, not a verdict")
    valid = body.get("valid")
    return CheckVerdict(True if valid is True else None if valid == "unknown" else False, body)
