"""The one SparkSession the audit tests share.

A local session is a JVM whose start takes seconds here, and the first audit in it pays for the JIT and
the Python workers' start as well; later audits cost a fraction of that. So every module here uses this
one session, on one xdist worker (the `spark` group, tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from kraftpy.spark_jobs.session import make_session

    session = make_session("local[2]", app_name="kraftpy-audit-tests")
    yield session
    session.stop()
