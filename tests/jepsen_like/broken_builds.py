"""Does a short fault run catch a deliberately broken build? Several seeds per family, a catch-rate table.

    python -m tests.jepsen_like.broken_builds --seeds 3            # every family, seeds 201-203
    python -m tests.jepsen_like.broken_builds --family kill --seeds 5
    python -m tests.jepsen_like.broken_builds --family disk --break truncate-to-hw --seeds 5 --out runs/bb

Each run is `kraftpy faults run --nemesis FAMILY` against brokers started with KRAFTPY_TEST_BREAK
(test_families.py's BREAK_OF names the break per family). A run catches the break when it exits 1 with
acknowledged writes lost (or written twice: append-duplicates). Exits 1 when a family caught nothing (the
run would prove nothing for it), else 0. Root and network namespaces needed, as for every fault run. Not a
CI test: a catch depends on which writes were in flight when a leadership moved, so one run may miss
(docs/jepsen.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from kraftpy.broker.shell.fault_injection import BREAKS
from tests.jepsen_like.test_families import BREAK_OF, LOST, finish, start_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(BREAK_OF), action="append")
    parser.add_argument("--seeds", type=int, default=3, help="runs per family (seeds 201, 202, ...)")
    parser.add_argument("--break", dest="broken", choices=BREAKS, help="another break than the family's")
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 50:
        parser.error("--seeds must be between 1 and 50")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kraftpy-broken-") as tmp:
        for family in args.family or sorted(BREAK_OF):
            broken = args.broken or BREAK_OF[family]
            caught = 0
            for i in range(args.seeds):
                seed = 201 + i
                out = (args.out or Path(tmp)) / f"{family}-{broken}-{seed}"
                code, summary, _ = finish(start_run(out, family, broken, seed), out, family)
                hit = code == 1 and bool(set(summary["anomalies"]) & {*LOST, "duplicate"})
                caught += hit
                found = ", ".join(sorted(summary["anomalies"])) or "none"
                verdict = "caught" if hit else "MISSED"
                print(f"{family:10} {broken:15} seed {seed}: {verdict} ({found})", file=sys.stderr)
            rows.append((family, broken, caught, args.seeds))
    print(f"{'family':10} {'broken build':15} caught")
    for family, broken, caught, runs in rows:
        print(f"{family:10} {broken:15} {caught}/{runs}")
    return 1 if any(caught == 0 for *_, caught, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
