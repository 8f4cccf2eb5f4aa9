"""Progress of a long check on stderr, with rich, shown only when wanted.

Shown when stderr is a terminal or when asked (`--progress`); never on
stdout, so `--json` output stays clean. On a terminal it is a live bar; when
asked for while stderr is a file or a pipe, it is a plain line per second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kraftpy.tools.checker.partition import ProgressSink


def wanted(flag: bool | None) -> bool:
    """`flag` if given, else whether stderr is a terminal."""
    return flag if flag is not None else sys.stderr.isatty()


@contextmanager
def progress_sink(enabled: bool) -> Iterator[ProgressSink | None]:
    """A callback to pass to the checker, drawing a progress bar while the block runs."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        yield _plain_lines()
        return
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("checking parts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[steps]:,} steps, {task.fields[configs]:,} configurations"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task("check", total=None, steps=0, configs=0)
    last = [0.0]

    def update(done: int, total: int, steps: int, configs: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.1:
            last[0] = now
            bar.update(task, completed=done, total=total, steps=steps, configs=configs)

    with bar:
        yield update


def _plain_lines(every_s: float = 1.0) -> ProgressSink:
    last = [-every_s]

    def update(done: int, total: int, steps: int, configs: int) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s:
            last[0] = now
            print(
                f"progress: {done}/{total} parts decided, {steps:,} steps, {configs:,} configurations",
                file=sys.stderr,
                flush=True,
            )

    return update
