"""Options of the fault runs: how long the workload and nemeses run, and the nemesis seed."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jepsen_like")
    group.addoption(
        "--jepsen-time-s",
        type=float,
        default=None,
        help="seconds of workload under faults (default: the CI run's 20; e.g. 600 for a soak)",
    )
    group.addoption("--jepsen-seed", type=int, default=None, help="seed of the nemesis schedule (default: random)")
