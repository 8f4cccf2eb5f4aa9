"""The suite's skip rule (tests/conftest.py) on small suites of its own: every kind of skip fails the run."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
CONFTEST = (REPO / "tests" / "conftest.py").read_text()
# The suite's own pytest settings that the rule depends on, as pyproject.toml has them.
XFAIL_STRICT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"].get(
    "xfail_strict", False
)


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(f"[pytest]\nxfail_strict = {XFAIL_STRICT}\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_a_clean_run_passes(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_ok="def test_ok():\n    assert True\n")
    assert suite.runpytest().ret == 0


def test_a_skip_during_a_test_fails_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_skip="import pytest\n\ndef test_x():\n    pytest.skip('no java')\n")
    result = suite.runpytest()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED RUN: 1 test(s) skipped*test_skip.py::test_x*"])


def test_a_module_level_importorskip_fails_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_ok="def test_ok():\n    assert True\n",
        test_missing="import pytest\n\npytest.importorskip('no_such_module_here')\n\ndef test_y():\n    pass\n",
    )
    result = suite.runpytest()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED RUN: 1 test(s) skipped*test_missing.py*"])


def test_a_module_level_skip_fails_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_ok="def test_ok():\n    assert True\n",
        test_gone="import pytest\n\npytest.skip('later', allow_module_level=True)\n",
    )
    assert suite.runpytest().ret == 1


def test_an_xfail_that_passes_fails_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_xpass="import pytest\n\n@pytest.mark.xfail(reason='bug 1')\ndef test_z():\n    pass\n")
    assert suite.runpytest().ret == 1


def test_an_xfail_that_fails_is_allowed(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_xfail="import pytest\n\n@pytest.mark.xfail(reason='bug 1')\ndef test_z():\n    assert False\n"
    )
    assert suite.runpytest().ret == 0


def test_a_skip_on_an_xdist_worker_fails_the_run_too(suite: pytest.Pytester) -> None:
    # The README's test command runs two workers: a skip there must reach the controller's verdict.
    suite.makepyfile(
        test_ok="def test_ok():\n    assert True\n",
        test_skip="import pytest\n\ndef test_x():\n    pytest.skip('no java')\n",
    )
    result = suite.runpytest("-n", "2", "--dist", "loadgroup")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED RUN: 1 test(s) skipped*test_skip.py::test_x*"])


def test_tests_that_start_processes_run_on_one_worker(suite: pytest.Pytester) -> None:
    for folder in ("integration", "kafka_clients", "jepsen_like", "unit", "unit/spark_jobs", "simulation"):
        (suite.path / folder).mkdir()
        (suite.path / folder / f"test_{folder.replace('/', '_')}.py").write_text(
            "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
        )
    result = suite.runpytest("-n", "2", "--dist", "loadgroup", "-v")
    assert result.ret == 0
    grouped: dict[str, set[str]] = {}
    for line in result.outlines:
        if "@" in line and "::" in line:
            nodeid = line.split()[-1] if line.split()[-1].count("::") else line.split()[0]
            path, group = nodeid.split("::")[0], nodeid.rsplit("@", 1)[1]
            grouped.setdefault(group, set()).add(path)
    assert grouped == {
        "processes": {"integration/test_integration.py"},
        "faults": {"jepsen_like/test_jepsen_like.py"},
        "kafka-clients": {"kafka_clients/test_kafka_clients.py"},
        "spark": {"unit/spark_jobs/test_unit_spark_jobs.py"},
    }
