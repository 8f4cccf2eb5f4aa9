"""Fingerprint every workload's runs per seed, to show a refactoring kept each seed's run.

    python -m tests.simulation.fingerprint OUT.json                 # before the change
    python -m tests.simulation.fingerprint OUT2.json --compare OUT.json   # after: lists runs that differ

A fingerprint is a hash of the Raft trace, the controller run's stats and final
offset, and the replication and soak results (violations, counts, last trace
lines); identical fingerprints mean the same events in the same order. A change
of behaviour (a core fix) legitimately changes them; a move of code must not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

from tests.simulation import replication_sim, soak
from tests.simulation.cluster import Simulator, profile_config
from tests.simulation.controller_sim import ControllerSim
from tests.simulation.invariants import InvariantViolation

RAFT_SEEDS = (
    ("default", 3, 25),
    ("default", 5, 8),
    ("harsh", 3, 10),
    ("harsh", 5, 5),
    ("mixed", 3, 15),
    ("mixed", 5, 5),
)
REPLICATION_SEEDS = (
    ("default", {}, 40),
    ("harsh", {"flush_interval_ms": (200, 1_500), "fault_interval_ms": (40, 200), "downtime_ms": (10, 150)}, 10),
    ("hw", {"broken_truncate_to_hw": True}, 40),
    ("roles", {"broken_roles_before_registration": True}, 10),
)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _replication(result: replication_sim.SimResult) -> list[Any]:
    r = result
    return [
        r.violations,
        r.acked,
        r.committed,
        r.leader_changes,
        r.crashes,
        r.forfeited,
        r.events,
        _hash("\n".join(r.trace)),
    ]


def fingerprints() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for profile, voters, count in RAFT_SEEDS:
        for seed in range(count):
            sim = Simulator(seed, profile_config(profile, voters, seed=seed))
            try:
                stats: Any = sim.run_random()
            except InvariantViolation as exc:
                stats = {"violation": str(exc).splitlines()[0]}
            out[f"raft/{profile}{voters}/{seed}"] = [_hash(sim.format_trace()), stats, sim.now]
    for seed in range(20):
        ctl = ControllerSim(seed)
        out[f"ctl/{seed}"] = [repr(ctl.run()), ctl.harness.committed.offset, ctl.harness.now_ms]
    for name, changes, count in REPLICATION_SEEDS:
        for seed in range(count):
            out[f"repl/{name}/{seed}"] = _replication(
                replication_sim.run(replication_sim.SimConfig(seed=seed, **changes))
            )
    for seed in range(3):
        out[f"soak/{seed}"] = _replication(soak.run(soak.soak_config(seed, duration_ms=20_000)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--compare", help="an earlier fingerprint file: report the runs that differ")
    args = parser.parse_args(argv)
    now = fingerprints()
    with open(args.out, "w") as fh:
        json.dump(now, fh, indent=0, sort_keys=True)
    if args.compare is None:
        print(f"{len(now)} runs fingerprinted into {args.out}")
        return 0
    with open(args.compare) as fh:
        before = json.load(fh)
    now = json.loads(json.dumps(now))  # the same JSON shapes as the file read back (tuples become lists)
    differ = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for key in differ[:20]:
        print(f"{key}: before {before.get(key)}\n{' ' * len(key)}  now    {now.get(key)}")
    print(f"{len(now)} runs, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
