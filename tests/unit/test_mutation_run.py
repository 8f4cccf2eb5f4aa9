"""tests/mutation_run.py on a module of its own: which flips it makes, what it reports, that it restores."""

from __future__ import annotations

from pathlib import Path

from tests.mutation_run import Mutant, mutants_of, run

MODULE = '''"""A docstring with a < b and True in it."""


def below_three(x):
    # a comment: x <= 3
    return x < 3
'''


def test_flips_are_made_in_code_only() -> None:
    assert mutants_of(MODULE) == [Mutant(6, "    return x < 3", "    return x <= 3")]
    assert [m.now.strip() for m in mutants_of("ok = a >= b and not c\n")] == [
        "ok = a > b and not c",
        "ok = a >= b or not c",
        "ok = a >= b and c",
    ]


def test_a_mutant_the_tests_miss_is_reported_and_the_module_restored(tmp_path: Path) -> None:
    (tmp_path / "limits.py").write_text(MODULE)
    (tmp_path / "test_strong.py").write_text(
        "from limits import below_three\n\ndef test_edge():\n    assert below_three(2) and not below_three(3)\n"
    )
    (tmp_path / "test_weak.py").write_text(
        "from limits import below_three\n\ndef test_far():\n    assert below_three(0) and not below_three(9)\n"
    )
    tried, survivors = run(tmp_path, "limits.py", ["test_strong.py"], budget_s=60, timeout_s=60)
    assert (tried, survivors) == (1, [])
    tried, survivors = run(tmp_path, "limits.py", ["test_weak.py"], budget_s=60, timeout_s=60)
    assert tried == 1 and [s.line for s in survivors] == [6]
    assert (tmp_path / "limits.py").read_text() == MODULE
