"""The client's Kafka connection shell against a real Kafka listener with scripted answers.

Versions are negotiated on connect; at most max_in_flight requests are on
the wire at once and every answer reaches its caller; a request that gets
no answer in time closes the connection and fails the others on it; the
transport dials again only after the reconnect backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kraftpy.client.shell.kafka_connection import KafkaConnection
from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import API_VERSIONS, SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import message_classes
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.kafka.shell.listener import KafkaListener, RequestContext

METADATA = 3
ApiVersionsResponse = message_classes(API_VERSIONS)[1]
MetadataResponse = message_classes(METADATA)[1]


class ScriptedBroker:
    """Answers ApiVersions with `ranges` and Metadata once `release` is set, counting what is in flight."""

    one_at_a_time_api_keys: frozenset[int] = frozenset()

    def __init__(self, ranges: dict[int, tuple[int, int]]) -> None:
        self.ranges = ranges
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.metadata_versions: list[int] = []
        self.order: list[int] = []

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.header.api_key == API_VERSIONS:
            keys = [
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=low, max_version=high)
                for k, (low, high) in self.ranges.items()
            ]
            return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
        self.metadata_versions.append(ctx.header.api_version)
        self.order.append(ctx.header.correlation_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return MetadataResponse(brokers=[], cluster_id="c", controller_id=ctx.header.correlation_id, topics=[])

    def answer_undecodable(self, error: KafkaError) -> None:
        return None


ALL = {k: (a.min_version, a.max_version) for k, a in SUPPORTED_APIS.items()}


@pytest.fixture
async def broker() -> AsyncIterator[tuple[ScriptedBroker, int]]:
    apis = ScriptedBroker({**ALL, METADATA: (0, 9)})
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, apis, KafkaListenerLimits())
    await listener.start()
    try:
        yield apis, listener.port
    finally:
        apis.release.set()
        await listener.stop()


def metadata_request() -> Any:
    return message_classes(METADATA)[0](topics=[], allow_auto_topic_creation=False)


async def test_versions_are_negotiated_and_in_flight_requests_are_bounded(broker) -> None:
    apis, port = broker
    conn = KafkaConnection(("127.0.0.1", port), client_id="t", max_in_flight=2)
    await conn.open(5_000)
    try:
        assert conn.versions[METADATA] == 9  # the broker's highest, below the client's
        assert conn.versions[0] == 12  # Produce: the client's highest, below the broker's 13
        calls = [asyncio.create_task(conn.request(METADATA, 9, metadata_request(), 5_000)) for _ in range(5)]
        for _ in range(100):  # bounded: until two are held by the broker
            if apis.in_flight == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert apis.in_flight == 2  # the other three wait in the client
        apis.release.set()
        answers = await asyncio.gather(*calls)
        assert apis.most_in_flight == 2 and apis.metadata_versions == [9] * 5
        # Each caller got its own answer (the broker echoes the correlation id as controller_id).
        assert len({a.controller_id for a in answers}) == 5
    finally:
        await conn.close()


async def test_requests_reach_the_broker_in_call_order_while_they_wait_for_a_slot(broker) -> None:
    apis, port = broker
    conn = KafkaConnection(("127.0.0.1", port), client_id="t", max_in_flight=1)
    await conn.open(5_000)
    try:
        calls = [asyncio.create_task(conn.request(METADATA, 9, metadata_request(), 5_000)) for _ in range(20)]
        await asyncio.sleep(0.05)
        apis.release.set()
        await asyncio.gather(*calls)
        assert len(apis.order) == 20 and apis.order == sorted(apis.order)  # ids are given in call order
    finally:
        await conn.close()


async def test_a_request_without_an_answer_in_time_closes_the_connection_and_fails_the_others(broker) -> None:
    _apis, port = broker
    conn = KafkaConnection(("127.0.0.1", port), client_id="t", max_in_flight=5)
    await conn.open(5_000)
    try:
        other = asyncio.create_task(conn.request(METADATA, 9, metadata_request(), 10_000))
        await asyncio.sleep(0.05)
        with pytest.raises(KafkaError) as err:
            await conn.request(METADATA, 9, metadata_request(), 200)
        assert err.value.code == ErrorCode.REQUEST_TIMED_OUT
        with pytest.raises(KafkaError) as err:
            await other
        assert err.value.code == ErrorCode.NETWORK_EXCEPTION and not conn.usable
    finally:
        await conn.close()


async def test_the_transport_dials_again_only_after_the_reconnect_backoff(broker) -> None:
    apis, port = broker
    apis.release.set()
    transport = KafkaTransport(request_timeout_ms=2_000, reconnect_backoff_ms=300, reconnect_backoff_max_ms=300)
    closed = ("127.0.0.1", 1)  # nothing listens on port 1 of loopback
    try:
        with pytest.raises(KafkaError) as err:
            await transport.call(closed, "/kafka/metadata", {"topics": None})
        assert err.value.code == ErrorCode.NETWORK_EXCEPTION and "failed" in err.value.message
        with pytest.raises(KafkaError) as err:  # at once: refused without dialling
            await transport.call(closed, "/kafka/metadata", {"topics": None})
        assert "next attempt in" in err.value.message
        answer = await transport.call(("127.0.0.1", port), "/kafka/metadata", {"topics": None})
        assert answer["cluster_id"] == "c" and answer["brokers"] == [] and answer["topics"] == []
    finally:
        await transport.close()


async def test_an_api_the_broker_lacks_is_unsupported_version(broker) -> None:
    apis, port = broker
    apis.release.set()
    del apis.ranges[19]  # no CreateTopics
    transport = KafkaTransport(request_timeout_ms=2_000)
    try:
        with pytest.raises(KafkaError) as err:
            await transport.call(("127.0.0.1", port), "/controller/create_topics", {"topics": []})
        assert err.value.code == ErrorCode.UNSUPPORTED_VERSION
    finally:
        await transport.close()
