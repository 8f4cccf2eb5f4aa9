"""`gc_paused()`: pause Python's cyclic GC while bulk-building acyclic metadata objects.

Encoding or decoding a 100,000-partition image allocates millions of small
tuples and lists, none of them in reference cycles; with the collector on, its
repeated passes over a large heap more than double the time. The previous GC
state is restored on exit, so nesting and callers that disabled GC are safe.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
