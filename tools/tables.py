"""Tables for people: rich tables narrow enough for an 80-column terminal or pipe.

No outer edge, no vertical rules, one space of padding: the content decides
the width. `--json` stays the machine interface; these are for reading.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

MAX_WIDTH = 80


def narrow_table(*columns: str, title: str | None = None) -> Table:
    """A table with `columns` (never truncated with an ellipsis: cells fold instead)."""
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    return table
