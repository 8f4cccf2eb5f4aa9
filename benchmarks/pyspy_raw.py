"""Reading py-spy's raw output (`py-spy record -f raw`): samples by innermost function and by any
frame on the stack. Shared by the profile benchmarks (raft_profile.py, kafka_profile.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def _frame_name(frame: str) -> str:
    """A frame as py-spy writes it, `name (path/to/file.py:123)`, as `name (file.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})"


def profile(raws: list[Path]) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, samples by innermost function, samples by function anywhere on the stack), over
    every file in `raws` (one per process, or one process)."""
    total, by_leaf, by_frame = 0, Counter(), Counter()
    for raw in raws:
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = [_frame_name(f) for f in stack.split(";")]
            by_leaf[frames[-1]] += n
            for name in set(frames):
                by_frame[name] += n
            total += n
    return total, by_leaf, by_frame


def innermost(raw: Path) -> tuple[int, Counter[str]]:
    """py-spy's raw output: (samples, samples by innermost function "name (file)")."""
    total, by_leaf, _ = profile([raw])
    return total, by_leaf


def share_table(total: int, counts: Counter[str], top: int) -> str:
    rows = [f"| {name} | {100 * count / max(total, 1):.1f}% |" for name, count in counts.most_common(top)]
    return "\n".join(["| function | share |", "|---|---|", *rows])
