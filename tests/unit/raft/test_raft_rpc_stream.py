"""The RPC stream Raft peers talk over (protocol/shell/rpc.py, `RpcClient(peer_streams=True)`), on a
real aiohttp server on loopback: answers and typed errors as over HTTP, many calls in flight
answered in any order, bad frames answered with INVALID_REQUEST while the stream keeps serving,
and the ends of a stream (server shutdown, oversized frame, a peer without a stream)."""

from __future__ import annotations

import asyncio

import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.protocol.shell.rpc_limits import ListenerLimits
from kraftpy.tools.faults.raw_stream import RawStream
from tests.unit.protocol.test_rpc import crash, echo, fail  # the same handlers the HTTP tests call

WAIT_S = 10  # every wait in these tests is bounded by this


async def park(body: dict) -> dict:
    """Answers when told to (as a parked Raft fetch does), or after a minute."""
    await asyncio.wait_for(RELEASE[body["key"]].wait(), 60)
    return {"released": body["key"]}


RELEASE: dict[str, asyncio.Event] = {}
ROUTES = {"/echo": echo, "/fail": fail, "/crash": crash, "/park": park}


async def serve(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


@pytest.fixture
async def server():
    RELEASE.clear()
    runner, port = await serve(make_app(ROUTES, max_body_bytes=1024))
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    yield ("127.0.0.1", port), client, runner
    await client.close()
    await runner.cleanup()


async def test_answers_and_errors_travel_as_over_http(server) -> None:
    address, client, _ = server
    assert await client.call(address, "/echo", {"value": 7}) == {"echo": 7, "error_code": 0}
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/fail", {})
    assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and info.value.details == {"topic": "x"}
    answer = await client.call(address, "/fail", {}, raise_errors=False)
    assert answer["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/crash", {})
    assert info.value.code is ErrorCode.UNKNOWN_SERVER_ERROR and "RuntimeError: bug" in info.value.message
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/echo", {"value": -1})
    assert info.value.code is ErrorCode.INVALID_REQUEST and "must be >= 0" in info.value.message
    assert (await client.call(address, "/echo", {"value": 2}))["echo"] == 2
    assert len(client._streams) == 1, "every call went over the one stream"


async def test_many_calls_in_flight_are_answered_in_any_order(server) -> None:
    address, client, _ = server
    RELEASE["a"] = asyncio.Event()
    parked = asyncio.create_task(client.call(address, "/park", {"key": "a"}))
    quick = [client.call(address, "/echo", {"value": i}) for i in range(50)]
    answers = await asyncio.wait_for(asyncio.gather(*quick), WAIT_S)
    assert [a["echo"] for a in answers] == list(range(50))  # all answered while the first call waits
    assert not parked.done()
    RELEASE["a"].set()
    assert (await asyncio.wait_for(parked, WAIT_S))["released"] == "a"


async def test_a_timed_out_call_is_request_timed_out_and_the_stream_serves_on(server) -> None:
    address, client, _ = server
    RELEASE["b"] = asyncio.Event()
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/park", {"key": "b"}, timeout_ms=100)
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT
    assert (await client.call(address, "/echo", {"value": 3}))["echo"] == 3


@pytest.mark.parametrize(
    ("frame", "expect_id", "expect"),
    [
        (b"\xff\xfe garbage", -1, "not valid CBOR"),
        (cbor2.dumps([1, 2]), -1, "must be a CBOR map"),
        (cbor2.dumps({"path": "/echo", "body": {"value": 1}}), -1, "needs an integer id"),
        (cbor2.dumps({"id": 5, "path": "/nope", "body": {}}), 5, "unknown request '/nope'"),
        (cbor2.dumps({"id": 6, "path": "/echo", "body": [1]}), 6, "body must be a CBOR map"),
        (cbor2.dumps({"id": 7, "path": "/echo", "body": {"value": "x"}}), 7, "must be an integer, got str"),
    ],
)
async def test_bad_frames_are_invalid_request_and_the_stream_serves_on(server, frame, expect_id, expect) -> None:
    address, _, _ = server
    stream = await RawStream.open(*address)
    try:
        stream.send_payload(frame)
        answer = await stream.receive(WAIT_S)
        assert answer["id"] == expect_id
        assert answer["body"]["error"] == "INVALID_REQUEST" and expect in answer["body"]["message"]
        stream.send_call(8, "/echo", {"value": 4})
        assert await stream.receive(WAIT_S) == {"id": 8, "body": {"echo": 4, "error_code": 0}}
    finally:
        await stream.close()


async def test_an_oversized_frame_ends_the_stream_and_the_next_call_reconnects(server) -> None:
    address, client, _ = server
    with pytest.raises(KafkaError) as info:
        await client.call(address, "/echo", {"value": 1, "pad": b"x" * 5000})
    assert info.value.code is ErrorCode.NETWORK_EXCEPTION
    # The server says why before it closes: the caller reads the bound, not just a closed connection.
    assert "refused a frame: stream frame of" in info.value.message and "over the limit of 1024" in info.value.message
    assert (await client.call(address, "/echo", {"value": 5}))["echo"] == 5


async def test_a_stream_that_answers_no_ping_is_closed_and_one_that_does_stays() -> None:
    """A half-open connection (the peer's host gone, no FIN) is found by the server's ping: quiet for
    stream_heartbeat_ms, pinged, and closed when nothing comes back within half of it. A live but
    quiet client answers the ping and keeps its stream, far past the heartbeat."""
    limits = ListenerLimits(stream_heartbeat_ms=200)
    runner, port = await serve(make_app(ROUTES, limits=limits))
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    address = ("127.0.0.1", port)
    try:
        deaf = await RawStream.open(*address)
        alive = await RawStream.open(*address)
        listening = asyncio.create_task(alive.receive(1.5))  # answers every ping meanwhile
        assert await deaf.receive(WAIT_S, answer_pings=False) is None  # pinged, no pong: closed
        assert deaf.pings == 1
        with pytest.raises(TimeoutError):
            await listening  # 7 heartbeats: every ping answered, the stream stays open
        assert alive.pings >= 3
        alive.send_call(1, "/echo", {"value": 1})
        assert await alive.receive(WAIT_S) == {"id": 1, "body": {"echo": 1, "error_code": 0}}
        await alive.close()
        await deaf.close()
        # The node's own client answers pings too: the same stream serves a call after a quiet second.
        assert (await client.call(address, "/echo", {"value": 2}))["echo"] == 2
        stream = client._streams[address]
        await asyncio.sleep(1.0)
        assert (await client.call(address, "/echo", {"value": 3}))["echo"] == 3
        assert client._streams[address] is stream and stream.usable
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("upgrade", "expect"),
    [
        (b"GET /rpc/stream HTTP/1.1\r\nHost: x\r\n\r\n", "send Connection: Upgrade and Upgrade: kraftpy-frames/1"),
        (
            b"GET /rpc/stream HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            "opens the RPC stream",
        ),
    ],
)
async def test_a_request_that_does_not_ask_for_the_stream_is_refused_with_a_reason(server, upgrade, expect) -> None:
    """A plain GET, or a websocket upgrade (a node from before the framed stream), gets 400 with
    INVALID_REQUEST; the older node's client then calls this one over HTTP, as any peer without a
    stream."""
    address, _, _ = server
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(upgrade)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert head.startswith(b"HTTP/1.1 400 ")
        length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
        body = cbor2.loads(await asyncio.wait_for(reader.readexactly(length), WAIT_S))
        assert body["error"] == "INVALID_REQUEST" and expect in body["message"]
    finally:
        writer.close()


async def test_a_client_falls_back_to_http_on_a_peer_that_refuses_the_upgrade() -> None:
    """What a node of this version does against one that serves only a websocket stream."""
    app = web.Application()

    async def websocket_only(request: web.Request) -> web.Response:
        return web.Response(status=400, text="No WebSocket UPGRADE hdr")

    async def plain(request: web.Request) -> web.Response:
        body = cbor2.loads(await request.read())
        return web.Response(body=cbor2.dumps({"echo": body["value"]}), content_type="application/cbor")

    app.router.add_get("/rpc/stream", websocket_only)
    app.router.add_post("/echo", plain)
    runner, port = await serve(app)
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    try:
        assert (await client.call(("127.0.0.1", port), "/echo", {"value": 4}))["echo"] == 4
        assert client._http_only == {("127.0.0.1", port)}
    finally:
        await client.close()
        await runner.cleanup()


async def test_server_shutdown_closes_streams_and_fails_calls_in_flight(server) -> None:
    address, client, runner = server
    RELEASE["c"] = asyncio.Event()
    parked = asyncio.create_task(client.call(address, "/park", {"key": "c"}))
    assert (await client.call(address, "/echo", {"value": 1}))["echo"] == 1  # the stream is up
    # without closing its streams, shutdown would wait for the stream handler (60 s by default)
    await asyncio.wait_for(runner.cleanup(), WAIT_S)
    with pytest.raises(KafkaError) as info:
        await asyncio.wait_for(parked, WAIT_S)
    assert info.value.code is ErrorCode.NETWORK_EXCEPTION
    with pytest.raises(KafkaError) as info:  # nobody listens there now: the connection is refused
        await client.call(address, "/echo", {"value": 1})
    assert info.value.code is ErrorCode.NETWORK_EXCEPTION
    runner2, _ = await serve(make_app(ROUTES), address[1])  # the peer comes back on its port
    try:
        assert (await client.call(address, "/echo", {"value": 9}))["echo"] == 9
    finally:
        await runner2.cleanup()


async def test_a_peer_without_a_stream_is_called_over_http() -> None:
    app = web.Application()

    async def plain(request: web.Request) -> web.Response:
        body = cbor2.loads(await request.read())
        return web.Response(body=cbor2.dumps({"echo": body["value"]}), content_type="application/cbor")

    app.router.add_post("/echo", plain)
    runner, port = await serve(app)
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    try:
        for value in (1, 2):  # the second call goes straight to HTTP
            assert (await client.call(("127.0.0.1", port), "/echo", {"value": value}))["echo"] == value
        assert client._http_only == {("127.0.0.1", port)}
    finally:
        await client.close()
        await runner.cleanup()


async def test_calls_to_a_peer_are_written_in_the_order_they_were_made_while_the_stream_connects() -> None:
    """Issue 11 §2: a call made while the stream connected waited for the connection and resumed a
    loop iteration after a call made later could already see the new stream, so the later call's
    frame left first (the leader then saw a producer's second batch before its first). Each call now
    takes its turn when it is made, so frames leave in call order."""
    arrived: list[int] = []

    async def record(body: dict) -> dict:
        arrived.append(body["n"])
        return {}

    runner, port = await serve(make_app({"/record": record}))
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    address = ("127.0.0.1", port)
    try:
        first = asyncio.create_task(client.call(address, "/record", {"n": 1}))
        # Make the second call in the window between the stream becoming visible and the first
        # call resuming from its wait for the connection.
        async with asyncio.timeout(WAIT_S):
            while address not in client._streams:
                await asyncio.sleep(0)
        await client.call(address, "/record", {"n": 2})
        await asyncio.wait_for(first, WAIT_S)
        assert arrived == [1, 2]
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_call_read_before_the_peer_closes_is_still_handled() -> None:
    """Issue 11 §3: an acks=0 produce has no answer to wait for, so its client writes the frame and
    may close at once; the server cancelled every call of a stream that ended, including ones it had
    read but not started, and the records were never appended."""
    handled: list[int] = []

    async def record(body: dict) -> dict:
        handled.append(body["n"])
        return {}

    runner, port = await serve(make_app({"/record": record}))
    try:
        for n in range(5):
            stream = await RawStream.open("127.0.0.1", port)
            stream.send_call(1, "/record", {"n": n})
            await stream.close()  # the frame and the FIN leave together: the server reads both at once
        async with asyncio.timeout(WAIT_S):
            while len(handled) < 5:
                await asyncio.sleep(0.01)
        assert handled == [0, 1, 2, 3, 4]
    finally:
        await runner.cleanup()
