"""The linearizability checker and the Kafka log checker behind `kraftpy check`.

Public API: read a history (`read_history`, `parse_history`), check it
(`check_linearizability` for the models in MODEL_NAMES, `check_kafka`), and
report (`CheckResult.to_json`, `explain`, `render_html`). docs/checker.md
describes the semantics; docs/history-format.md the formats.
"""

from kraftpy.tools.checker.explain import explain
from kraftpy.tools.checker.formats import FORMATS, detect_format, parse_history, read_history
from kraftpy.tools.checker.history import Event, History, HistoryError, Operation
from kraftpy.tools.checker.html_report import render_html
from kraftpy.tools.checker.kafka_check import KAFKA_CLASSES, check_kafka
from kraftpy.tools.checker.linearizability import check_linearizability
from kraftpy.tools.checker.models import MODEL_NAMES, make_model
from kraftpy.tools.checker.result import CheckResult

__all__ = [
    "FORMATS",
    "KAFKA_CLASSES",
    "MODEL_NAMES",
    "CheckResult",
    "Event",
    "History",
    "HistoryError",
    "Operation",
    "check_kafka",
    "check_linearizability",
    "detect_format",
    "explain",
    "make_model",
    "parse_history",
    "read_history",
    "render_html",
]
