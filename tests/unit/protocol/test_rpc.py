"""The CBOR RPC layer on a real aiohttp server on loopback: answers, typed errors, and
a server that keeps serving after every kind of bad request."""

from __future__ import annotations

import asyncio
import random
import socket

import aiohttp
import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import CONTENT_TYPE, RpcClient, make_app
from kraftpy.protocol.validate import field


async def echo(body: dict) -> dict:
    return {"echo": field(body, "value", int, min_value=0)}


async def fail(body: dict) -> dict:
    raise KafkaError("no such topic 'x'", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic="x")


async def crash(body: dict) -> dict:
    raise RuntimeError("bug")


async def slow(body: dict) -> dict:
    await asyncio.sleep(1)
    return {}


@pytest.fixture
async def server():
    app = make_app({"/echo": echo, "/fail": fail, "/crash": crash, "/slow": slow}, max_body_bytes=1024)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    client = RpcClient(request_timeout_ms=2000)
    yield ("127.0.0.1", port), client
    await client.close()
    await runner.cleanup()


async def raw_post(address, path: str, data: bytes) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://{address[0]}:{address[1]}{path}", data=data, headers={"Content-Type": CONTENT_TYPE}) as resp,
    ):
        return resp.status, cbor2.loads(await resp.read())


async def test_call_returns_answer_with_no_error(server) -> None:
    address, client = server
    assert await client.call(address, "/echo", {"value": 7}) == {"echo": 7, "error_code": 0}


async def test_kafka_error_travels_to_the_caller(server) -> None:
    address, client = server
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/fail", {})
    assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert info.value.details == {"topic": "x"}


@pytest.mark.parametrize(
    ("path", "data", "expect"),
    [
        ("/echo", b"\xff\xfe garbage", "not valid CBOR"),
        ("/echo", b"", "empty request body"),
        ("/echo", cbor2.dumps([1, 2]), "must be a CBOR map"),
        ("/echo", cbor2.dumps({"value": "7"}), "field 'value' must be an integer, got str"),
        ("/echo", cbor2.dumps({"value": True}), "field 'value' must be an integer, got bool"),
        ("/echo", cbor2.dumps({"value": -1}), "field 'value' must be >= 0"),
        ("/echo", cbor2.dumps({}), "missing required field 'value'"),
        ("/nope", cbor2.dumps({}), "unknown request POST /nope"),
        ("/echo", cbor2.dumps({"value": b"x" * 5000}), "too large"),
    ],
)
async def test_bad_request_is_invalid_request_and_server_keeps_serving(server, path, data, expect) -> None:
    address, client = server
    status, body = await raw_post(address, path, data)
    assert status == 400
    assert body["error"] == "INVALID_REQUEST"
    assert expect in body["message"]
    assert (await client.call(address, "/echo", {"value": 1}))["echo"] == 1


async def test_handler_crash_is_unknown_server_error_and_server_survives(server) -> None:
    address, client = server
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/crash", {})
    assert info.value.code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "RuntimeError: bug" in info.value.message
    assert (await client.call(address, "/echo", {"value": 2}))["echo"] == 2


async def test_timeout_is_request_timed_out(server) -> None:
    address, client = server
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/slow", {}, timeout_ms=100)
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT


@pytest.mark.parametrize("streams", [False, True], ids=["http", "stream"])
async def test_refused_connection_is_network_exception_and_says_nothing_was_sent(streams: bool) -> None:
    with socket.socket() as s:  # a port nobody listens on: bind, read it, close
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RpcClient(request_timeout_ms=1000, peer_streams=streams)
    try:
        with pytest.raises(KafkaError) as info:
            await client.call(("127.0.0.1", port), "/echo", {"value": 1})
        assert info.value.code is ErrorCode.NETWORK_EXCEPTION
        assert info.value.details.get("sent") is False  # a history may count the call a definite failure
    finally:
        await client.close()


async def test_a_connection_lost_after_the_request_does_not_say_unsent() -> None:
    """The peer read the request and hung up: it may have acted on it, so the error claims nothing."""

    async def read_then_hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(read_then_hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = RpcClient(request_timeout_ms=2000)
    try:
        with pytest.raises(KafkaError) as info:
            await client.call(("127.0.0.1", port), "/echo", {"value": 1})
        assert info.value.code is ErrorCode.NETWORK_EXCEPTION and "sent" not in info.value.details
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


def test_backoff_grows_exponentially_and_caps() -> None:
    b = Backoff(initial_ms=100, max_ms=1000, jitter=0.0, rng=random.Random(1))
    assert [b.next_ms() for _ in range(6)] == [100, 200, 400, 800, 1000, 1000]
    b.reset()
    assert b.next_ms() == 100
    jittered = Backoff(initial_ms=100, max_ms=1000, jitter=0.2, rng=random.Random(1))
    firsts = []
    for _ in range(50):
        jittered.reset()
        firsts.append(jittered.next_ms())
    assert all(80 <= x <= 120 for x in firsts)
    assert len(set(firsts)) > 1  # jitter actually varies


async def test_http_and_stream_answer_a_call_the_same(server) -> None:
    """One server pipeline: an answer, a typed error, a rejected body and a crash look alike on both transports."""
    address, http = server
    streamed = RpcClient(peer_streams=True)

    async def outcome(client: RpcClient, path: str, body: dict) -> object:
        try:
            return await client.call(address, path, body)
        except KafkaError as err:
            return (err.code, err.message, err.details)

    try:
        for path, body in (("/echo", {"value": 3}), ("/fail", {}), ("/echo", {"value": -1}), ("/crash", {})):
            assert await outcome(http, path, body) == await outcome(streamed, path, body), path
        assert streamed._streams and not http._streams  # each went its own way
    finally:
        await streamed.close()


async def test_a_bare_ipv6_host_is_called_over_both_transports() -> None:
    """A leader hint '[::1]:port' parses to host '::1'; the client must bracket it in the URL."""
    app = make_app({"/echo": echo})
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "::1", 0)
        await site.start()
    except OSError:
        await runner.cleanup()
        pytest.skip("no IPv6 loopback on this machine")
    port = site._server.sockets[0].getsockname()[1]
    clients = [RpcClient(request_timeout_ms=2000, peer_streams=streams) for streams in (False, True)]
    try:
        for client in clients:
            assert (await client.call(("::1", port), "/echo", {"value": 4}))["echo"] == 4
    finally:
        for client in clients:
            await client.close()
        await runner.cleanup()
