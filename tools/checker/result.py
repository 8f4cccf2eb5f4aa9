"""The outcome of a check, and its JSON form: {valid, model, operations, elapsed_s, anomalies}."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraftpy.tools.checker.edn import Keyword, Symbol
from kraftpy.tools.checker.history import History


@dataclass(slots=True)
class CheckResult:
    """`valid` is True, False or "unknown"; anomalies are JSON-ready dicts.

    `detail` carries what the explanation and the HTML report need (per-part
    outcomes, the model); it is not part of the JSON output.
    """

    valid: bool | str
    model: str
    operations: int
    elapsed_s: float
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    history: History | None = None
    detail: Any = None

    @property
    def exit_code(self) -> int:
        """0 linearizable (or no failure anomaly), 1 not, 2 unknown."""
        if self.valid is True:
            return 0
        if self.valid is False:
            return 1
        return 2

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "model": self.model,
            "operations": self.operations,
            "elapsed_s": round(self.elapsed_s, 6),
            "anomalies": self.anomalies,
        }


def jsonable(value: Any) -> Any:
    """EDN values (keywords, tuples, sets) as JSON values."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Keyword):
        return ":" + value.name
    if isinstance(value, Symbol):
        return value.name
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted((jsonable(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    return repr(value)
