"""Seeded random runs: 3- and 5-voter quorums plus an observer under proposals, reads and faults.

Each seed runs a workload under crashes (also in the middle of a step), graceful
restarts, partitions, message drops, duplicates and reordering, with every
invariant checked as it goes (see invariants.py), then a fault-free period in
which the cluster must elect a leader, commit and converge. CI runs the default
seed counts below; `pytest tests/simulation --seeds 20000` soaks, and
`--seed-start S --seeds 1 -k <label>` (or `python -m tests.simulation.replay --seed S`)
replays one seed; a failure prints both commands.
"""

from __future__ import annotations

import pytest

from tests.simulation.cluster import profile_config, run_seed
from tests.simulation.invariants import InvariantViolation

CI_SEEDS = {  # 980 seeds, about 50 s of CPU; --seeds N runs N of each instead
    ("default", 3): 350,
    ("default", 5): 200,
    ("harsh", 3): 80,
    ("harsh", 5): 50,
    ("mixed", 3): 200,
    ("mixed", 5): 100,
}


@pytest.mark.parametrize(
    ("profile", "voters"),
    sorted(CI_SEEDS),
    ids=[f"{profile}{voters}" for profile, voters in sorted(CI_SEEDS)],
)
def test_random_faults(profile: str, voters: int, seed_range: range | None) -> None:
    seeds = seed_range if seed_range is not None else range(CI_SEEDS[(profile, voters)])
    committed = 0
    for seed in seeds:
        failure = None
        try:
            stats = run_seed(seed, profile_config(profile, voters, seed=seed))
        except InvariantViolation as exc:
            failure = str(exc)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        committed += stats["committed"]
    assert committed > 10 * len(seeds), "the workload hardly committed anything"


def test_a_seed_replays_exactly() -> None:
    """Same seed, same configuration: the same events in the same order (what replay relies on)."""
    from tests.simulation.cluster import Simulator

    traces = []
    for _ in range(2):
        sim = Simulator(11, profile_config("harsh", 5))
        sim.run_random()
        traces.append(sim.format_trace())
    assert traces[0] == traces[1]
    assert len(traces[0].splitlines()) > 500
