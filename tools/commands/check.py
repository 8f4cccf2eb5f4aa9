"""`kraftpy check HISTORY --model MODEL`: the linearizability and Kafka log checker's CLI.

Exit codes: 0 linearizable (or, for kafka, no failure anomaly), 1 not, 2
unknown (budget spent) or unreadable input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kraftpy.tools.checker.explain import explain
from kraftpy.tools.checker.formats import FORMATS, read_history
from kraftpy.tools.checker.history import HistoryError
from kraftpy.tools.checker.kafka import SUBSCRIBE_ALLOWED
from kraftpy.tools.checker.kafka_check import KAFKA_CLASSES, check_kafka
from kraftpy.tools.checker.kafka_groups import check_kafka_groups
from kraftpy.tools.checker.linearizability import check_linearizability
from kraftpy.tools.checker.model import ModelError
from kraftpy.tools.checker.models import MODEL_NAMES
from kraftpy.tools.checker.progress import progress_sink, wanted

EXIT_UNREADABLE = 2


def parse_init(text: str | None) -> Any:
    """--init as JSON when it parses (3, "x", null), else the text itself."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return tuple(value) if isinstance(value, list) else value


def _classes(values: tuple[str, ...]) -> set[str]:
    out: set[str] = set()
    for v in values:
        out.update(x.strip() for x in v.split(",") if x.strip())
    return out


@click.command("check")
@click.argument("history_path", metavar="HISTORY", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--model",
    "model",
    required=True,
    type=click.Choice([*MODEL_NAMES, "kafka", "kafka-groups"]),
    help="Model to check.",
)
@click.option("--init", "init", default=None, help="Initial register value (JSON, else text); default nil.")
@click.option("--no-partition", is_flag=True, help="Check a P-compositional model (kv) as one search.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="History format (default: detect).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), help="Write an HTML report.")
@click.option("--timeout-s", type=click.FloatRange(min=0), default=None, help="Give up (unknown) after this long.")
@click.option("--memory-mb", type=click.FloatRange(min=1), default=None, help="Give up (unknown) above this RSS.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes for independent parts.")
@click.option(
    "--allow",
    "allow",
    multiple=True,
    metavar="CLASS[,CLASS]",
    help=f"kafka: anomaly classes that do not fail the check ({', '.join(KAFKA_CLASSES)}).",
)
@click.option(
    "--sub-via",
    type=click.Choice(["assign", "subscribe"]),
    default="assign",
    help="kafka: as Jepsen, subscribe allows poll-skip and nonmonotonic-poll (rebalances move consumers).",
)
@click.option("--progress/--no-progress", "show_progress", default=None, help="Progress on stderr (default: if a TTY).")
def check(
    history_path: Path,
    model: str,
    init: str | None,
    no_partition: bool,
    fmt: str | None,
    as_json: bool,
    html_out: Path | None,
    timeout_s: float | None,
    memory_mb: float | None,
    workers: int | None,
    allow: tuple[str, ...],
    sub_via: str,
    show_progress: bool | None,
) -> None:
    """Check HISTORY for linearizability against MODEL, or for Kafka log anomalies."""
    try:
        history = read_history(history_path, fmt)
        for warning in history.warnings:
            click.echo(f"Warning: {warning}", err=True)
        if model == "kafka":
            allowed = _classes(allow) | (SUBSCRIBE_ALLOWED if sub_via == "subscribe" else set())
            result = check_kafka(history, allowed)
        elif model == "kafka-groups":
            result = check_kafka_groups(history, _classes(allow))
        else:
            with progress_sink(wanted(show_progress)) as sink:
                result = check_linearizability(
                    history,
                    model,
                    init=parse_init(init),
                    partition=not no_partition,
                    timeout_s=timeout_s,
                    memory_mb=memory_mb,
                    workers=workers,
                    progress=sink,
                )
    except (HistoryError, ModelError) as e:
        where = "" if isinstance(e, HistoryError) else f"{history_path}:"
        click.echo(f"Error: INVALID_REQUEST: {where}{e}", err=True)
        sys.exit(EXIT_UNREADABLE)
    except ValueError as e:  # e.g. an unknown --allow class
        click.echo(f"Error: INVALID_REQUEST: {e}", err=True)
        sys.exit(EXIT_UNREADABLE)

    if html_out is not None:
        from kraftpy.tools.checker.html_report import render_html

        html_out.write_text(render_html(result), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(explain(result))
    sys.exit(result.exit_code)
