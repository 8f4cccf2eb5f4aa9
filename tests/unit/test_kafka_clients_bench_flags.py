"""benchmarks/kafka_clients_bench.py refuses a --paced-at rate it cannot pace (0 would divide by zero)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from kafka_clients_bench import positive_rate


@pytest.mark.parametrize(
    ("rate", "said"),
    [("0", "above 0"), ("-5", "above 0"), ("nan", "above 0"), ("inf", "above 0"), ("abc", "not a number")],
)
def test_a_paced_rate_that_cannot_be_paced_is_refused(rate: str, said: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        positive_rate(rate)


def test_a_positive_rate_is_taken() -> None:
    assert positive_rate("1500") == 1500.0 and positive_rate("0.5") == 0.5
