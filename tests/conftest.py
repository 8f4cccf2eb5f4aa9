"""Suite-wide rules: a skipped test fails the run, process tests run one at a time, shared fixtures.

A skip usually means a missing dependency (pyspark, Java, ...); the bar is
that such a run fails loudly instead of passing with less coverage. That holds
for skips while a test runs and for skips at collection (a module-level
`importorskip`); xfail stays allowed, strict (pyproject's `xfail_strict`), so
an expected failure that starts passing fails too. tests/unit/test_skip_rule.py
tests the rule itself.

A module that leaves a librdkafka client running fails too (tests/native_threads.py says why;
tests/unit/test_native_thread_rule.py tests that rule).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.native_threads import librdkafka_clients_still_running
from tests.ports import PortReservation

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"

_skipped: list[str] = []
_librdkafka_clients = [0]  # running when the last module ended


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seeds",
        type=int,
        default=None,
        help="how many seeds the deterministic simulations run (default: each test's CI count)",
    )
    parser.addoption("--seed-start", type=int, default=0, help="first seed of the simulation runs")


pytest_plugins = ["pytester"]  # tests/unit/test_skip_rule.py runs pytest on this very conftest


KAFKA_PORTS = pytest.StashKey[PortReservation]()
PORTS_OWNER_ENV = "KRAFTPY_TEST_PORTS_PID"


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background by a non-interactive shell (`nohup pytest ... &`) inherits SIGINT
    # ignored, and so would every process a test starts: the tests that Ctrl-C a consumer (it must commit and
    # leave its group) then waited 30 s for nothing. The tests' children get Python's usual Ctrl-C handling.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # `kraftpy cluster start` puts Kafka listeners on 9092-9094 by default; test clusters take a free
    # run of ports instead, so a test run never collides with a cluster the machine already runs.
    # Each xdist worker takes its own run, held while the worker lives: its process tests and the
    # other worker's run side by side. A nested run (pytester) keeps its process's run.
    mine = os.environ.get(PORTS_OWNER_ENV) == str(os.getpid())
    theirs = "KRAFTPY_KAFKA_BASE_PORT" in os.environ and "PYTEST_XDIST_WORKER" not in os.environ
    if not (mine or theirs):
        reservation = PortReservation(9, consecutive=True)
        config.stash[KAFKA_PORTS] = reservation
        os.environ["KRAFTPY_KAFKA_BASE_PORT"] = str(reservation.ports[0])
        os.environ[PORTS_OWNER_ENV] = str(os.getpid())


@pytest.fixture
def reserve_ports() -> Iterator[Callable[[int], list[int]]]:
    """`reserve_ports(n)`: n ports on 127.0.0.1 held for the test (tests/ports.py says why)."""
    held: list[PortReservation] = []

    def reserve(count: int) -> list[int]:
        held.append(PortReservation(count))
        return held[-1].ports

    yield reserve
    for reservation in held:
        reservation.release()


def pytest_unconfigure(config: pytest.Config) -> None:
    reservation = config.stash.get(KAFKA_PORTS, None)
    if reservation is not None:
        reservation.release()
        os.environ.pop(PORTS_OWNER_ENV, None)


# Tests that start real processes (clusters, client subprocesses, fault runs) leave the machine's cores
# to the processes they start: within a group they run one at a time, on one xdist worker. xdist hands
# out groups largest first (by test count), one worker each, then the next group or unit test to the
# first worker free: integration on one worker, the Kafka clients and then the fault runs on the other,
# the in-process unit and simulation tests filling both. Two process tests run side by side at most.
# Every test that makes network namespaces is in `faults` (FAULT_NET_GROUP): two such tests at once
# would see each other's namespaces and share the machine's nftables and loop devices.
# The Spark audit tests share one SparkSession (one JVM, warmed by the first audit) on one worker.
FAULT_NET_GROUP = "faults"
PROCESS_GROUPS = {
    "integration": "processes",
    "jepsen_like": FAULT_NET_GROUP,
    "kafka_clients": "kafka-clients",
    "unit/spark_jobs": "spark",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marker into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        relative = item.path.resolve().relative_to(tests_dir) if item.path.is_relative_to(tests_dir) else None
        where = relative.as_posix() if relative is not None else ""
        group = next((g for folder, g in PROCESS_GROUPS.items() if where.startswith(f"{folder}/")), None)
        # A module that names its group keeps it (network-namespace tests join the fault runs').
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    # Looked at once the module's last test is done: its module fixtures are torn down and the test's
    # own fixture values released (pytest drops them after the teardown report, inside this protocol).
    if nextitem is not None and nextitem.path == item.path:
        return
    running = librdkafka_clients_still_running()
    leaked, _librdkafka_clients[0] = running - _librdkafka_clients[0], running
    if leaked > 0:  # blamed once, on the module that started them
        message = (
            f"{item.path.name} left {leaked} librdkafka client(s) running: a confluent-kafka client of its "
            "tests was never destroyed (tests/native_threads.py says why that matters)"
        )
        item.ihook.pytest_runtest_logreport(
            report=pytest.TestReport(item.nodeid, item.location, {}, "failed", message, "teardown")
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a module skipped as a whole at collection: importorskip, skip(allow_module_level=True)
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _skipped:
        terminalreporter.write_line(
            f"FAILED RUN: {len(_skipped)} test(s) skipped; a skip counts as a failure here (first: {_skipped[0]})",
            red=True,
        )


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED_DIR.is_dir():
        pytest.fail(f"../shared not found at {SHARED_DIR}; the conformance tests read it as it is")
    return SHARED_DIR


@pytest.fixture(scope="session")
def seed_range(request: pytest.FixtureRequest) -> range | None:
    """The seeds asked for with --seeds/--seed-start, or None for each test's default."""
    count = request.config.getoption("--seeds")
    start = request.config.getoption("--seed-start")
    return None if count is None else range(start, start + count)


@pytest.fixture
def closed_port(reserve_ports: Callable[[int], list[int]]) -> str:
    """host:port where nothing listens: connections are refused at once (held, so nothing else binds it)."""
    (port,) = reserve_ports(1)
    return f"127.0.0.1:{port}"
