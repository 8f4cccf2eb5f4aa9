"""benchmarks/pyspy_raw.py: py-spy's raw output read into shares by innermost function and by any
frame on the stack (what raft_profile.py and kafka_profile.py print)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "pyspy_raw", Path(__file__).resolve().parents[2] / "benchmarks" / "pyspy_raw.py"
)
assert _SPEC is not None and _SPEC.loader is not None
pyspy_raw = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pyspy_raw)
innermost, profile, share_table = pyspy_raw.innermost, pyspy_raw.profile, pyspy_raw.share_table


def test_samples_are_counted_by_leaf_and_by_every_frame_once_per_stack(tmp_path: Path) -> None:
    one, two = tmp_path / "a.txt", tmp_path / "b.txt"
    one.write_text(
        "main (/x/cli.py:3);handle (/x/broker/produce.py:10);_walk (/x/validation.py:58) 7\n"
        "main (/x/cli.py:3);handle (/x/broker/produce.py:10);handle (/x/broker/produce.py:12) 2\n"
        "\n"
    )
    two.write_text("main (/x/cli.py:3);_worker (/usr/lib/thread.py:9) 1\n")
    total, by_leaf, by_frame = profile([one, two])
    assert total == 10
    assert by_leaf == {"_walk (validation.py)": 7, "handle (produce.py)": 2, "_worker (thread.py)": 1}
    assert by_frame["main (cli.py)"] == 10 and by_frame["handle (produce.py)"] == 9  # a recursion counts once
    assert innermost(one) == (9, {"_walk (validation.py)": 7, "handle (produce.py)": 2})
    assert share_table(total, by_leaf, 1).splitlines() == [
        "| function | share |",
        "|---|---|",
        "| _walk (validation.py) | 70.0% |",
    ]
