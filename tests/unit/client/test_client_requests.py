"""The consumer's one request path: the shared request layout and ClusterClient.exchange against a real server.

Fetch, list_offsets, offsets_for_leader_epoch and the group member's requests all reach their cores through
`ClusterClient.exchange`, so the rule "an answer the core cannot read counts as no answer" is tested once,
here, against a Kafka listener on loopback (scripted_broker.py: the broker's real codec and translation,
scripted answers), not three times.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraftpy.client.consumer.fetcher import Fetcher
from kraftpy.client.consumer.offset_fetcher import OffsetFetcher
from kraftpy.client.consumer.position_validator import PositionValidator
from kraftpy.client.consumer.requests import BrokerRequestCore, answered_partitions, topics_body, wire_epoch
from kraftpy.client.metadata import Metadata
from kraftpy.client.shell.cluster_client import ClusterClient
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.scripted_broker import ScriptedBroker, scripted_brokers


def test_the_three_consumer_cores_are_driven_the_same_way() -> None:
    paths = {core.path for core in (Fetcher, OffsetFetcher, PositionValidator)}
    assert paths == {"/kafka/fetch", "/kafka/list_offsets", "/kafka/offsets_for_leader_epoch"}
    for core in (Fetcher, OffsetFetcher, PositionValidator):
        assert issubclass(core, BrokerRequestCore)
        assert core.prepare_requests is not BrokerRequestCore.prepare_requests
        assert core.handle_response is not BrokerRequestCore.handle_response


def test_request_layout_groups_partitions_under_their_topic_and_reads_back() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    topics = topics_body([(a0, {"x": 1}), (b0, {"x": 2}), (a1, {"x": 3})])
    assert topics == [
        {"name": "a", "partitions": [{"partition": 0, "x": 1}, {"partition": 1, "x": 3}]},
        {"name": "b", "partitions": [{"partition": 0, "x": 2}]},
    ]
    assert [(tp, part["x"]) for tp, part in answered_partitions({"topics": topics})] == [(a0, 1), (a1, 3), (b0, 2)]
    assert list(answered_partitions({})) == [] and list(answered_partitions({"topics": None})) == []
    assert (wire_epoch(None), wire_epoch(7)) == (-1, 7)


LIST_OFFSETS = "/kafka/list_offsets"
ASK = {
    "replica_id": -1,
    "isolation_level": 0,
    "topics": [{"name": "t", "partitions": [{"partition": 0, "timestamp": -1}]}],
}
GOOD = {"topics": [{"name": "t", "partitions": [{"partition": 0, "error_code": 0, "offset": 5, "timestamp": -1}]}]}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedBroker]:
    async with scripted_brokers(1, topics={"t": 1}) as (broker,):
        yield broker


class Core:
    """Reads answers as the consumer cores do and records what it was told; `unreadable` answers raise, as
    a core's reading does on an answer it cannot use."""

    def __init__(self, unreadable: bool = False) -> None:
        self.unreadable = unreadable
        self.answers: list[tuple[TopicPartition, int]] = []
        self.failures: list[ErrorCode] = []
        self.times_ms: list[int] = []

    def on_response(self, body: dict[str, Any], now_ms: int) -> None:
        self.times_ms.append(now_ms)
        if self.unreadable:
            raise ValueError("partition entries must be maps")
        self.answers += [(tp, part.get("error_code", 0)) for tp, part in answered_partitions(body)]

    def on_failure(self, error: KafkaError, now_ms: int) -> None:
        self.times_ms.append(now_ms)
        self.failures.append(error.code)


async def test_exchange_gives_the_core_the_answer_or_the_error_and_an_unreadable_answer_counts_as_none(
    server: ScriptedBroker, closed_port: str
) -> None:
    host, port = closed_port.rsplit(":", 1)
    cluster = ClusterClient(Metadata([server.address]), request_timeout_ms=5_000)
    t0 = TopicPartition("t", 0)
    try:
        server.script["list_offsets"] = [GOOD]
        core = Core()
        await cluster.exchange(server.address, LIST_OFFSETS, ASK, core.on_response, core.on_failure)
        assert core.answers == [(t0, 0)] and core.failures == []

        core = Core(unreadable=True)
        await cluster.exchange(server.address, LIST_OFFSETS, ASK, core.on_response, core.on_failure)
        assert core.answers == [] and core.failures == [ErrorCode.CORRUPT_MESSAGE]

        core = Core()  # an error answer is an answer: the core reads its error_code
        server.script["list_offsets"] = [KafkaError("no such thing", ErrorCode.INVALID_REQUEST)]
        await cluster.exchange(server.address, LIST_OFFSETS, ASK, core.on_response, core.on_failure)
        assert core.failures == [] and core.answers == [(t0, ErrorCode.INVALID_REQUEST)]

        core = Core()
        await cluster.exchange((host, int(port)), LIST_OFFSETS, ASK, core.on_response, core.on_failure)
        assert core.answers == [] and core.failures == [ErrorCode.NETWORK_EXCEPTION]

        core = Core()  # no address: the first candidate that answers (the bootstrap server here)
        server.script["list_offsets"] = [GOOD]
        await cluster.exchange(None, LIST_OFFSETS, ASK, core.on_response, core.on_failure)
        assert core.answers == [(t0, 0)]
        assert all(isinstance(t, int) for t in core.times_ms)
    finally:
        await cluster.close()
