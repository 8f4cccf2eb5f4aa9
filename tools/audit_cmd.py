"""`kraftpy audit --cluster-dir D`: the PySpark replica audit (spark_jobs/) from the command line.

pyspark is an extra (`pip install kraftpy[spark]`) and starts a JVM, so it is
imported only here, after the inputs were checked. Exit codes: 0 no finding,
1 findings, 2 bad input or Spark unavailable.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.checker.history import HistoryError

EXIT_FINDINGS = 1
EXIT_UNUSABLE = 2


class AuditUsageError(click.ClickException):
    exit_code = EXIT_UNUSABLE


def _load_spark_modules() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise AuditUsageError(
            f"the audit needs PySpark, which is not installed ({exc}); install it with `pip install kraftpy[spark]`"
        ) from None


@click.command("audit")
@click.option(
    "--cluster-dir",
    "cluster_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="A cluster directory as `kraftpy cluster start` lays it out.",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL (local[N], spark://...).")
@click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting, e.g. spark.executor.memory=2g (repeatable).",
)
@click.option("--history", type=click.Path(path_type=Path), help="The workload's history (JSON Lines, kafka model).")
@click.option("--topic", help="The history's topic (default: the cluster's only non-internal topic).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object on stdout.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), help="Write an HTML report.")
def audit(
    cluster_dir: Path,
    master: str,
    conf: tuple[str, ...],
    history: Path | None,
    topic: str | None,
    as_json: bool,
    html_out: Path | None,
) -> None:
    """Compare every replica's segment files: divergence, gaps, epoch lineage, lost acked writes, duplicates."""
    settings = {}
    for item in conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise AuditUsageError(f"--conf {item!r} is not KEY=VALUE")
        settings[key.strip()] = value.strip()
    _load_spark_modules()
    from kraftpy.spark_jobs.audit import plan_audit, run_audit
    from kraftpy.spark_jobs.report import findings_table, render_html, summary_table, to_json

    try:
        plan = plan_audit(cluster_dir, history, topic)
    except (KafkaError, HistoryError) as exc:
        raise AuditUsageError(str(exc)) from None
    try:
        from kraftpy.spark_jobs.session import make_session

        spark = make_session(master, conf=settings)
    except Exception as exc:  # pyspark raises its own types for a missing Java or a bad master URL
        raise AuditUsageError(f"cannot start Spark with master {master!r}: {exc}") from None
    try:
        result = run_audit(spark, plan)
    finally:
        spark.stop()
    if html_out is not None:
        html_out.write_text(render_html(result))
    if as_json:
        click.echo(json.dumps(to_json(result)))
    else:
        console = Console()
        console.print(summary_table(result))
        if result.findings:
            console.print(findings_table(result))
    if not result.ok:
        raise SystemExit(EXIT_FINDINGS)
