"""Integration tests' post-mortems: a failed test's report carries the end of each cluster node's log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.test_cluster_support import failure_log_sections


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("call", "teardown"):
        report.sections.extend(failure_log_sections(getattr(item, "funcargs", {}).values()))
