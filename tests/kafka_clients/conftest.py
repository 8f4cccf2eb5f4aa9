"""Fixtures for the real-Kafka-client tests: one 3-node `kraftpy cluster start` cluster for the package.

The clients (confluent-kafka/librdkafka, kafka-python, aiokafka, kcat,
kafkajs) are the real ones, installed by the README's test command
(`.ci/install-test-deps`); they are given nothing but the bootstrap servers.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cluster_support import LocalCluster

JS_DIR = Path(__file__).resolve().parent / "js"


@pytest.fixture(scope="package")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A healthy 3-node cluster; `.bootstrap_servers` are its Kafka listeners.

    Shared by every module here (a cluster start costs seconds): each test names its own topics and
    groups, and a test that changes the cluster puts it back (a killed node restarted, a config reset).
    """
    with LocalCluster(tmp_path_factory.mktemp("kafka-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: run .ci/install-test-deps (the README's test command does)")
    return path


@pytest.fixture(scope="session")
def kafkajs_dir() -> Path:
    """tests/kafka_clients/js, with kafkajs installed in its node_modules."""
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run .ci/install-test-deps (the README's test command does)")
    return JS_DIR
