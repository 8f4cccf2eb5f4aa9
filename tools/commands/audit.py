"""`kraftpy audit --cluster-dir D`: the PySpark replica audit (spark_jobs/) from the command line.

pyspark is an extra and starts a JVM, so it is imported only here, after the
inputs were checked. It says its stages on stderr (planning, starting Spark,
checking with a progress line every PROGRESS_S, reporting). A local master's
driver binds to loopback; `--driver-host` is for a real Spark master. Internal
topics (`__consumer_offsets`, ...) stay out of the summary unless
`--include-internal` or they have findings. Exit codes: 0 no finding,
1 findings, 2 bad input or Spark unavailable.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import click
from rich.console import Console

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.topics import is_internal
from kraftpy.tools.checker.history import HistoryError

EXIT_FINDINGS = 1
EXIT_UNUSABLE = 2
PROGRESS_S = 10.0
# Works from a PyPI install and from a source checkout alike (pyspark and pyarrow are the extra's contents).
INSTALL_HINT = "pip install 'pyspark>=4.0' 'pyarrow>=15' (in a kraftpy source checkout: pip install -e '.[spark]')"


class AuditUsageError(click.ClickException):
    exit_code = EXIT_UNUSABLE


def _load_spark_modules() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise AuditUsageError(
            f"the audit needs PySpark, which is not installed ({exc}); install it with: {INSTALL_HINT}"
        ) from None


def stage(text: str) -> None:
    click.echo(f"audit: {text}", err=True)


class ticking:
    """A progress line on stderr every PROGRESS_S while the body runs (a Spark job says nothing itself)."""

    def __init__(self, started: float, what: str) -> None:
        self.started, self.what = started, what
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(PROGRESS_S):
            stage(f"{self.what}: still running, {time.monotonic() - self.started:.0f} s so far")

    def __enter__(self) -> ticking:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=1)


def visible_rows(rows: list[dict], findings: list[dict]) -> list[dict]:
    """Summary rows without internal topics' partitions, unless a finding names that partition."""
    flagged = {(f["topic"], f["partition"]) for f in findings}
    return [r for r in rows if not is_internal(r["topic"]) or (r["topic"], r["partition"]) in flagged]


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
    "--driver-host",
    help="Address the Spark driver binds and advertises [default: 127.0.0.1 for a local master; "
    "for a real --master give one its executors reach].",
)
@click.option("--include-internal", is_flag=True, help="Also list internal topics' partitions (__consumer_offsets).")
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
    driver_host: str | None,
    include_internal: bool,
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

    started = time.monotonic()
    stage("1/4 planning: reading the cluster layout" + (" and the history" if history else ""))
    try:
        plan = plan_audit(cluster_dir, history, topic)
    except (KafkaError, HistoryError) as exc:
        raise AuditUsageError(str(exc)) from None
    stage(f"2/4 starting Spark (master {master}; a JVM start takes a while)")
    try:
        from kraftpy.spark_jobs.session import make_session

        spark = make_session(master, conf=settings, driver_host=driver_host)
    except Exception as exc:  # pyspark raises its own types for a missing Java or a bad master URL
        raise AuditUsageError(f"cannot start Spark with master {master!r}: {exc}") from None
    stage(f"3/4 checking {len(plan.replicas)} replica(s)")
    try:
        with ticking(started, f"3/4 checking {len(plan.replicas)} replica(s)"):
            result = run_audit(spark, plan)
    finally:
        spark.stop()
    stage(f"4/4 report ({time.monotonic() - started:.0f} s in all)")
    if not include_internal:
        result.replicas = visible_rows(result.replicas, result.findings)
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
