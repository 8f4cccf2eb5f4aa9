"""A mutation run: does any test notice when one comparison, boolean or bound in a module flips?

    python -m tests.mutation_run raft/leader.py tests/unit/raft --budget-s 600 --out mutants.json

Each mutant flips one operator on one line (`<` and `<=`, `>` and `>=`, `==` and `!=`, `and` and `or`,
`min` and `max`, `True` and `False`, `+ 1` and `- 1`, a dropped `not`), runs the given tests with
`-x`, and puts the line back. A mutant that every test survives is a behaviour no test pins, or
an equivalent program (the docs/testing.md section "Mutation runs" says how sessions told them
apart). It rewrites files in place: run it in a worktree of its own, never where other work is
going on; the file is restored on exit, Ctrl-C and SIGTERM included.

A hand-rolled runner rather than mutmut: mutmut 3 copies the package into a `mutants/` tree and
imports it from there, which this repository's editable layout (the package is the repository
root) does not survive; the few operators above found every gap sessions fixed so far.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FLIPS: tuple[tuple[str, str], ...] = (
    (r"(?<![<>=!])<=(?!=)", "<"),
    (r"(?<![<>=!])>=(?!=)", ">"),
    (r"(?<![<>=!-])<(?![<=])", "<="),
    (r"(?<![<>=!-])>(?![>=])", ">="),
    (r"==", "!="),
    (r"!=", "=="),
    (r"\+ 1\b", "- 1"),
    (r"- 1\b", "+ 1"),
    (r"\band\b", "or"),
    (r"\bor\b", "and"),
    (r"\bmin\(", "max("),
    (r"\bmax\(", "min("),
    (r"\bTrue\b", "False"),
    (r"\bFalse\b", "True"),
    (r"\bnot ", ""),
)
# Lines that hold no decision: declarations, imports, messages, assertions.
SKIPPED_PREFIXES = ("#", "def ", "class ", "@", "import ", "from ", "log.", "raise ", 'return f"')


@dataclass(frozen=True)
class Mutant:
    line: int  # 1-based
    was: str
    now: str


def mutants_of(source: str) -> list[Mutant]:
    """Every single-operator flip of `source`, outside docstrings, comments and the skipped lines."""
    out: list[Mutant] = []
    in_docstring = False
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        stripped = line.strip()
        quotes = stripped.count('"""')
        if in_docstring or quotes:
            if quotes == 1:
                in_docstring = not in_docstring
            continue
        if stripped.startswith(SKIPPED_PREFIXES) or 'f"' in stripped or stripped.startswith("assert "):
            continue
        code = line.split("#", 1)[0]
        for pattern, replacement in FLIPS:
            for match in re.finditer(pattern, code):
                mutated = line[: match.start()] + replacement + line[match.end() :]
                out.append(Mutant(number, line.rstrip("\n"), mutated.rstrip("\n")))
    return out


def survives(root: Path, tests: list[str], timeout_s: float) -> bool:
    """Whether the tests pass (a timeout counts as caught: the mutant hung something)."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        return subprocess.run(command, cwd=root, capture_output=True, timeout=timeout_s).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run(root: Path, module: str, tests: list[str], budget_s: float, timeout_s: float) -> tuple[int, list[Mutant]]:
    """Try the mutants of `module` in order until the budget is spent: (how many tried, the survivors)."""
    path = root / module
    original = path.read_text()
    lines = original.splitlines(keepends=True)

    def restore(*_: object) -> None:
        path.write_text(original)
        raise SystemExit(130)

    previous = {s: signal.signal(s, restore) for s in (signal.SIGINT, signal.SIGTERM)}
    survivors: list[Mutant] = []
    mutants = mutants_of(original)
    started = time.monotonic()
    tried = 0
    try:
        if not survives(root, tests, timeout_s):
            raise SystemExit(f"the tests fail before any mutation: {' '.join(tests)}")
        for tried, mutant in enumerate(mutants, start=1):
            if time.monotonic() - started > budget_s:
                tried -= 1
                break
            ending = "\n" if lines[mutant.line - 1].endswith("\n") else ""
            path.write_text("".join([*lines[: mutant.line - 1], mutant.now + ending, *lines[mutant.line :]]))
            if survives(root, tests, timeout_s):
                survivors.append(mutant)
                print(f"survived {module}:{mutant.line}: {mutant.now.strip()}", flush=True)
            print(f"[{tried}/{len(mutants)}] {len(survivors)} survived", file=sys.stderr, flush=True)
    finally:
        path.write_text(original)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return tried, survivors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="the file to mutate, relative to --root")
    parser.add_argument("tests", nargs="+", help="pytest arguments selecting the tests that should notice")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (a worktree of its own)")
    parser.add_argument("--budget-s", type=float, default=900.0, help="stop trying new mutants after this long")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="one test run longer than this is caught")
    parser.add_argument("--out", type=Path, help="write the survivors here as JSON")
    args = parser.parse_args(argv)
    if not (args.root / args.module).is_file():
        parser.error(f"no file {args.module} under {args.root}")
    tried, survivors = run(args.root, args.module, args.tests, args.budget_s, args.timeout_s)
    total = len(mutants_of((args.root / args.module).read_text()))
    print("\n| module | mutants | tried | caught | survived |\n|---|---|---|---|---|")
    print(f"| {args.module} | {total} | {tried} | {tried - len(survivors)} | {len(survivors)} |")
    if args.out is not None:
        args.out.write_text(json.dumps([asdict(m) for m in survivors], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
