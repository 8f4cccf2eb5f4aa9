"""The suite's rule on librdkafka clients (tests/conftest.py, tests/native_threads.py) on small suites:
a client left running when its module ends is an error of that module; one destroyed is not."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
CONFTEST = (REPO / "tests" / "conftest.py").read_text()

CLIENT = 'Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})'
LEAKY = f"""
from confluent_kafka import Producer

KEPT = []

def test_keeps_a_producer():
    KEPT.append({CLIENT})
"""
TIDY = f"""
import pytest
from confluent_kafka import Producer

@pytest.fixture(scope="module")
def producer():
    yield {CLIENT}

def test_one(producer):
    assert producer.flush(0) == 0

def test_two(producer):
    assert producer.flush(0) == 0

def test_own_producer():
    local = {CLIENT}
    assert local.flush(0) == 0
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # In a process of its own: a client leaked on purpose must not outlive the nested run here.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_a_client_left_running_is_an_error_of_its_module(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_leaky=LEAKY, test_tidy=TIDY)
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 1
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*test_leaky.py left 1 librdkafka client(s) running*"])
    assert "test_tidy.py left" not in result.stdout.str()


def test_clients_destroyed_by_their_module_pass(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_tidy=TIDY)
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.assert_outcomes(passed=3)


def test_a_client_left_running_on_an_xdist_worker_fails_the_run(suite: pytest.Pytester) -> None:
    # The README's test command runs two workers: the error must reach the controller's verdict.
    suite.makepyfile(test_leaky=LEAKY, test_tidy=TIDY)
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*test_leaky.py left 1 librdkafka client(s) running*"])
