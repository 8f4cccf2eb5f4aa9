"""The broker's calls to the controller: AlterPartition wire format, NOT_CONTROLLER hints, producer-id blocks,
and a client's forwarded admin request waiting out a controller failover (over real RPC servers)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from kraftpy.broker.replication import AlterPartitionRequest, BrokerState
from kraftpy.broker.shell.alter_partition_manager import _Item, decode_alter_partition_answer, encode_alter_partition
from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.broker.shell.producer_id_manager import ProducerIdManager
from kraftpy.metadata.controller import wire
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.protocol.types import Address, parse_address


class FakeRpc:
    """Answers by address; records every call."""

    def __init__(self, answers: dict[tuple[str, int], Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, int], str, dict[str, Any]]] = []

    async def call(self, address, path, body, *, timeout_ms=None, raise_errors=True):
        self.calls.append((tuple(address), path, dict(body)))
        answer = self.answers[tuple(address)]
        if callable(answer):
            answer = answer(body)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_alter_partition_requests_decode_with_the_controllers_own_codec() -> None:
    topic_id = uuid.uuid4()
    hosted = SimpleNamespace(topic_id=topic_id, partition=2)
    request = AlterPartitionRequest(1, 4, 9, (BrokerState(1, -1), BrokerState(3, 17)))
    body = encode_alter_partition(1, 55, [_Item(hosted, request)])  # type: ignore[arg-type]
    decoded = wire.decode_request("alter_partition", body)
    assert (decoded.broker_id, decoded.broker_epoch) == (1, 55)
    item = decoded.partitions[0]
    assert (item.topic_id, item.partition, item.leader_epoch, item.new_isr, item.partition_epoch) == (
        topic_id,
        2,
        4,
        (1, 3),
        9,
    )


def test_alter_partition_answers_decode_and_malformed_items_count_as_unanswered() -> None:
    topic_id = uuid.uuid4()
    answer = {
        "topics": [
            {
                "topic_id": str(topic_id),
                "partitions": [
                    {
                        "partition": 0,
                        "error_code": 0,
                        "leader_id": 1,
                        "leader_epoch": 4,
                        "isr": [1, 3],
                        "partition_epoch": 10,
                    },
                    {
                        "partition": 1,
                        "error_code": 74,
                        "leader_id": -1,
                        "leader_epoch": -1,
                        "isr": [],
                        "partition_epoch": -1,
                    },
                    {"partition": "x"},
                ],
            },
            {"topic_id": "not-a-uuid", "partitions": [{"partition": 0}]},
        ]
    }
    decoded = decode_alter_partition_answer(answer)
    assert set(decoded) == {(topic_id, 0), (topic_id, 1)}
    assert decoded[(topic_id, 0)].isr == (1, 3) and decoded[(topic_id, 0)].partition_epoch == 10
    assert decoded[(topic_id, 1)].error == ErrorCode.FENCED_LEADER_EPOCH
    assert decode_alter_partition_answer({"topics": "nope"}) == {}


@pytest.mark.parametrize(("host", "hint_address"), [("127.0.0.1", "127.0.0.1:2"), ("::1", "[::1]:2")])
async def test_the_channel_follows_one_not_controller_hint(host: str, hint_address: str) -> None:
    """An IPv6 hint comes in brackets; the channel calls the host without them."""
    stale, real = (host, 1), (host, 2)
    hint = KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=2, leader_address=hint_address)
    rpc = FakeRpc({stale: hint, real: {"ok": True}})
    channel = ControllerChannel(rpc, lambda: stale, request_timeout_ms=100)  # type: ignore[arg-type]
    assert await channel.call("/controller/x", {}) == {"ok": True}
    assert [c[0] for c in rpc.calls] == [stale, real]


async def test_the_channel_without_a_usable_hint_raises() -> None:
    stale = ("127.0.0.1", 1)
    no_hint = ControllerChannel(
        FakeRpc({stale: KafkaError("not me", ErrorCode.NOT_CONTROLLER)}), lambda: stale, request_timeout_ms=100
    )  # type: ignore[arg-type]
    with pytest.raises(KafkaError):
        await no_hint.call("/controller/x", {})
    unknown = ControllerChannel(FakeRpc({}), lambda: None, request_timeout_ms=100)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as raised:
        await unknown.call("/controller/x", {})
    assert raised.value.code == ErrorCode.NOT_CONTROLLER
    assert parse_address("h:9") == ("h", 9) and parse_address("h") is None and parse_address(None) is None


async def test_producer_ids_come_from_blocks_prefetched_before_they_run_out() -> None:
    starts = iter([0, 1000, 2000])
    rpc = FakeRpc({("c", 1): lambda body: {"producer_id_start": next(starts), "producer_id_len": 10}})
    manager = ProducerIdManager(ControllerChannel(rpc, lambda: ("c", 1), request_timeout_ms=100), 1, lambda: 7)  # type: ignore[arg-type]
    ids = [await manager.generate(1000) for _ in range(10)]
    assert ids == list(range(10))
    await asyncio.sleep(0)  # the prefetch of the next block ran meanwhile
    assert await manager.generate(1000) == 1000
    assert rpc.calls[0][2] == {"broker_id": 1, "broker_epoch": 7}
    await manager.stop()


async def test_no_block_means_coordinator_load_in_progress() -> None:
    rpc = FakeRpc({("c", 1): KafkaError("down", ErrorCode.NOT_CONTROLLER)})
    manager = ProducerIdManager(ControllerChannel(rpc, lambda: ("c", 1), request_timeout_ms=100), 1, lambda: 7)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as raised:
        await manager.generate(200)
    assert raised.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await manager.stop()


# --- forwarding a client's admin request (CreateTopics, ...) across a controller failover ------------------


def dead_address() -> Address:
    """An address nothing listens on: connecting is refused, as to a controller just SIGKILLed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[:2]


@pytest.fixture
async def controller() -> AsyncIterator[tuple[Address, list[str]]]:
    """A real RPC server with the controller's create route; each call's path is recorded."""
    calls: list[str] = []
    released = asyncio.Event()  # the hanging handler ends with the fixture: the server's cleanup waits for it

    async def create(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("create")
        return {"topics": [{"name": body["name"], "error_code": 0}]}

    async def refuse(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("refuse")
        raise KafkaError("replication factor 5 > 3 brokers", ErrorCode.INVALID_REPLICATION_FACTOR)

    async def hang(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("hang")
        await released.wait()
        return {}

    runner = web.AppRunner(
        make_app({"/controller/create_topics": create, "/controller/refuse": refuse, "/controller/hang": hang}),
        access_log=None,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield ("127.0.0.1", site._server.sockets[0].getsockname()[1]), calls
    finally:
        released.set()
        await runner.cleanup()


def provider_after(seconds: float, before: Address | None, after: Address) -> Callable[[], Address | None]:
    """The broker's view of the active controller: `before` until `seconds` have passed (the metadata
    quorum has not elected the next one yet), then `after`."""
    switch_at = time.monotonic() + seconds
    return lambda: before if time.monotonic() < switch_at else after


@pytest.mark.parametrize("before", ["dead", "unknown"])
async def test_a_forwarded_request_waits_out_the_controller_failover(
    controller: tuple[Address, list[str]], before: str
) -> None:
    """A dead controller's refused connection (NETWORK_EXCEPTION) and no known controller (NOT_CONTROLLER)
    are both retried until the next controller answers; a plain `call` gives the error to the client."""
    address, calls = controller
    rpc = RpcClient(request_timeout_ms=2000)
    try:
        old = dead_address() if before == "dead" else None
        channel = ControllerChannel(rpc, provider_after(2.0, old, address), request_timeout_ms=2000)
        with pytest.raises(KafkaError) as raised:
            await channel.call("/controller/create_topics", {"name": "t"})
        expected = ErrorCode.NETWORK_EXCEPTION if before == "dead" else ErrorCode.NOT_CONTROLLER
        assert raised.value.code == expected
        with pytest.raises(KafkaError) as raised:  # a deadline of 0: one attempt, as `call`
            await channel.forward("/controller/create_topics", {"name": "t"}, 0)
        assert raised.value.code == expected
        answer = await channel.forward("/controller/create_topics", {"name": "t"}, 30_000)
        assert answer["topics"] == [{"name": "t", "error_code": 0}] and calls == ["create"]
    finally:
        await rpc.close()


async def test_a_forwarded_request_past_its_deadline_is_request_timed_out() -> None:
    rpc = RpcClient(request_timeout_ms=2000)
    try:
        channel = ControllerChannel(rpc, lambda: dead_address(), request_timeout_ms=2000)
        with pytest.raises(KafkaError) as raised:
            await asyncio.wait_for(channel.forward("/controller/create_topics", {"name": "t"}, 400), 30)
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT
        # The last attempt's error is named: a refused connection, or (on a loaded machine, when the
        # backoff left a millisecond or so) that attempt timing out.
        assert "did not answer within 400 ms (last: /controller/create_topics to 127.0.0.1:" in raised.value.message
    finally:
        await rpc.close()


async def test_a_forwarded_request_that_runs_out_of_time_mid_attempt_names_its_own_deadline(
    controller: tuple[Address, list[str]],
) -> None:
    """The controller is dead, then the next one is reached and does not answer before the request's
    deadline: the attempt the deadline cut short is the request's timeout, named as such."""
    address, calls = controller
    rpc = RpcClient(request_timeout_ms=600_000)
    try:
        channel = ControllerChannel(rpc, provider_after(0.25, dead_address(), address), request_timeout_ms=600_000)
        with pytest.raises(KafkaError) as raised:
            await asyncio.wait_for(channel.forward("/controller/hang", {}, 800), 30)
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT and calls == ["hang"]
        assert "did not answer within 800 ms (last: /controller/hang to " in raised.value.message
    finally:
        await rpc.close()


async def test_a_controllers_refusal_is_answered_at_once(controller: tuple[Address, list[str]]) -> None:
    """Only a missing controller is waited out: an error the controller itself gives is the client's answer."""
    address, calls = controller
    rpc = RpcClient(request_timeout_ms=2000)
    try:
        channel = ControllerChannel(rpc, lambda: address, request_timeout_ms=2000)
        with pytest.raises(KafkaError) as raised:
            await channel.forward("/controller/refuse", {}, 30_000)
        assert raised.value.code == ErrorCode.INVALID_REPLICATION_FACTOR and calls == ["refuse"]
    finally:
        await rpc.close()


async def test_a_controller_that_never_answers_is_bounded_by_the_requests_deadline(
    controller: tuple[Address, list[str]],
) -> None:
    """A partitioned controller: the attempt itself is cut at the request's timeout_ms, not at the channel's
    (much longer) request timeout; the outer wait_for only turns a hang into a failure."""
    address, calls = controller
    rpc = RpcClient(request_timeout_ms=600_000)
    try:
        channel = ControllerChannel(rpc, lambda: address, request_timeout_ms=600_000)
        with pytest.raises(KafkaError) as raised:
            await asyncio.wait_for(channel.forward("/controller/hang", {}, 200), 30)
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT and calls == ["hang"]
    finally:
        await rpc.close()
