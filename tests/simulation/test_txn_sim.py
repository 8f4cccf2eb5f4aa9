"""The transaction coordinator core on the simulation kernel: failovers, lost acknowledgements, a zombie."""

from __future__ import annotations

import pytest

from tests.simulation.txn_sim import TxnSim


@pytest.mark.parametrize("seed", range(12))
def test_transactions_stay_atomic_across_coordinator_failovers(seed: int) -> None:
    sim = TxnSim(seed, crashes=3)
    violations = sim.run()
    violations.raise_first(f"seed {seed}")
    assert sim.commit_acked, "no transaction committed: the workload did nothing"
    assert sim.term > 1, "no failover happened"
    assert sim.fenced == 1, "the first producer was not fenced by the second"
