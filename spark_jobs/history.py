"""The sends of a workload's history (docs/history-format.md, kafka model), as the audit compares them.

Read with the checker's own reader (kraftpy.tools.checker), so the audit and
`kraftpy check --model kafka` agree on what the history says. A send's message
is compared with a record's value as UTF-8 text, which is how the fault
suite's producer writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraftpy.spark_jobs.records import digest, preview
from kraftpy.tools.checker.formats import read_history
from kraftpy.tools.checker.history import HistoryError
from kraftpy.tools.checker.kafka_history import kafka_ops


@dataclass(frozen=True)
class Sends:
    acked: list[tuple[int, int, str, str]]  # (partition, offset, value digest, value preview): ok sends
    sent: list[tuple[int, str]]  # (partition, value digest) of every send invoked, whatever its outcome


def message_bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else str(value).encode("utf-8")


def read_sends(path: Path) -> Sends:
    """The history's sends; HistoryError (with file and line) when the file cannot be read as a history."""
    history = read_history(path)
    acked: list[tuple[int, int, str, str]] = []
    sent: set[tuple[int, str]] = set()
    for op in kafka_ops(history):
        for key, value, offset in op.sends:
            if not isinstance(key, int) or isinstance(key, bool):
                raise HistoryError(f"send key {key!r} is not a partition number", op.op.invoke_line, str(path))
            data = message_bytes(value)
            sent.add((key, digest(data) or ""))
            if op.status == "ok" and offset is not None:
                acked.append((key, offset, digest(data) or "", preview(data) or ""))
    return Sends(acked, sorted(sent))
