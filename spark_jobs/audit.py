"""The replica audit: plan on the driver (validate inputs, no Spark), then one Spark job over every replica.

    python -m kraftpy.spark_jobs.audit --cluster-dir D [--master local[2]] [--history H.jsonl] [--json] [--html F]

is the same command as `kraftpy audit` (tools/commands/audit.py); docs/audit.md
says what each finding means. plan_audit() rejects a bad directory, an
unreadable history or an unknown topic before a JVM starts; run_audit()
reads the replicas' segments through the kraftpy-log data source (cached:
every check reads them), their checkpoints on the driver, and collects the
union of every check in spark_jobs.checks once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.spark_jobs.history import Sends, read_sends
from kraftpy.spark_jobs.replicas import ReplicaDir, discover

ACKED_SCHEMA = "partition INT, offset BIGINT, value_hash STRING, value_preview STRING"
SENT_SCHEMA = "partition INT, value_hash STRING"


@dataclass(frozen=True)
class AuditPlan:
    cluster_dir: Path
    replicas: list[ReplicaDir]
    topic: str | None  # the history's topic (None without a history)
    sends: Sends | None
    history_path: Path | None = None


@dataclass
class AuditResult:
    plan: AuditPlan
    findings: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)  # per replica: checkpoints and records read

    @property
    def ok(self) -> bool:
        return not self.findings

    def counts(self) -> Counter[tuple[str, int, str]]:
        """(topic, partition, kind) -> number of findings."""
        return Counter((f["topic"], f["partition"], f["kind"]) for f in self.findings)


def plan_audit(cluster_dir: Path, history: Path | None = None, topic: str | None = None) -> AuditPlan:
    """Check the inputs; KafkaError (INVALID_CONFIG) or HistoryError names what is wrong."""
    replicas = discover(cluster_dir)
    topics = sorted({r.topic for r in replicas})
    if topic is not None and topic not in topics:
        raise KafkaError(
            f"topic {topic!r} has no replica in {cluster_dir} (topics: {', '.join(topics) or 'none'})",
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
    sends = None
    if history is not None:
        if not history.is_file():
            raise KafkaError(f"history file {history} does not exist", ErrorCode.INVALID_CONFIG)
        sends = read_sends(history)
        if topic is None:
            user_topics = [t for t in topics if not t.startswith("__")]
            if len(user_topics) != 1:
                raise KafkaError(
                    f"--topic is needed with --history: the cluster has topics {', '.join(user_topics) or 'none'}",
                    ErrorCode.INVALID_CONFIG,
                )
            topic = user_topics[0]
    return AuditPlan(cluster_dir.resolve(), replicas, topic, sends, history)


def run_audit(spark: Any, plan: AuditPlan) -> AuditResult:
    """Run every check in one Spark job; `spark` comes from spark_jobs.session.make_session."""
    from kraftpy.spark_jobs import checks
    from kraftpy.spark_jobs.datasource import FORMAT_NAME
    from kraftpy.spark_jobs.records import REPLICA_SCHEMA, replica_info_row

    result = AuditResult(plan)
    if not plan.replicas:
        return result
    path = str(plan.cluster_dir)
    records = spark.read.format(FORMAT_NAME).load(path).cache()
    replicas = spark.createDataFrame([replica_info_row(r) for r in plan.replicas], REPLICA_SCHEMA)
    acked = sent = None
    if plan.sends is not None:
        acked = spark.createDataFrame(plan.sends.acked, ACKED_SCHEMA)
        sent = spark.createDataFrame(plan.sends.sent, SENT_SCHEMA)
    found = checks.all_findings(records, replicas, acked=acked, sent=sent, topic=plan.topic)
    order = ["topic", "partition", "kind", "offset", "nodes"]
    result.findings = [row.asDict() for row in found.orderBy(*order).collect()]
    result.replicas = [
        row.asDict() for row in checks.summary(records, replicas).orderBy("topic", "partition", "node").collect()
    ]
    records.unpersist()
    return result


if __name__ == "__main__":
    from kraftpy.tools.commands.audit import audit

    audit()
