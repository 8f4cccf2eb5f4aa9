"""`--model kafka`: Jepsen's log anomalies over sends and polls, and Adya's over transactions.

Like Jepsen's kafka workload, one model covers both: a history whose operations include `txn`
(a transactional workload: each op a transaction of send/poll micro-ops) is also checked for the
transactional classes (kafka_txn.py). There the aborted read is named G1a, as Adya and Elle name
it, instead of the log checker's `aborted-read` (the same condition). A history without `txn`
operations gets the log classes only. Docs: docs/checker.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from kraftpy.tools.checker.history import History
from kraftpy.tools.checker.kafka import ANOMALY_CLASSES, analyse, partition_logs
from kraftpy.tools.checker.kafka_history import kafka_ops
from kraftpy.tools.checker.kafka_txn import TXN_ANOMALY_CLASSES, analyse_txns
from kraftpy.tools.checker.result import CheckResult

KAFKA_CLASSES = ANOMALY_CLASSES + TXN_ANOMALY_CLASSES


def check_kafka(history: History, allowed: Iterable[str] = ()) -> CheckResult:
    """Find the anomalies; valid unless one of a class not in `allowed` is found."""
    allowed = frozenset(allowed)
    unknown = allowed - set(KAFKA_CLASSES)
    if unknown:
        raise ValueError(f"unknown anomaly class(es) {', '.join(sorted(unknown))}; known: {', '.join(KAFKA_CLASSES)}")
    started = time.monotonic()
    ops = kafka_ops(history)
    anomalies = analyse(ops)
    if any(k.f == "txn" for k in ops):
        anomalies = [a for a in anomalies if a["type"] != "aborted-read"]
        anomalies += analyse_txns(ops, partition_logs(ops))
    for a in anomalies:
        a["failure"] = a["type"] not in allowed
    return CheckResult(
        valid=not any(a["failure"] for a in anomalies),
        model="kafka",
        operations=len(history.operations),
        elapsed_s=time.monotonic() - started,
        anomalies=anomalies,
        history=history,
    )
