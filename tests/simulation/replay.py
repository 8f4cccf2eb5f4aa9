"""Replay one simulation seed and print its trace.

    python -m tests.simulation.replay --seed 123 [--profile default|harsh] [--voters 3] [--observers 1]
        [--duration-ms 12000] [--last 200]

The run is a pure function of the seed and the configuration, so this reproduces
a failure reported by the random tests exactly (same events, same trace).
"""

from __future__ import annotations

import argparse
import sys

from tests.simulation.cluster import PROFILES, Simulator, profile_config
from tests.simulation.invariants import InvariantViolation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--observers", type=int, default=1)
    parser.add_argument("--duration-ms", type=int, default=None, help="default: the profile's")
    parser.add_argument("--last", type=int, default=0, help="print only the last N trace lines (0: all)")
    args = parser.parse_args(argv)
    changes = {} if args.duration_ms is None else {"duration_ms": args.duration_ms}
    config = profile_config(args.profile, args.voters, args.observers, seed=args.seed, **changes)
    sim = Simulator(args.seed, config)
    try:
        stats = sim.run_random()
    except InvariantViolation as exc:
        print(sim.format_trace(args.last or None))
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print(sim.format_trace(args.last or None))
    print(f"\nok: seed {args.seed}: {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
