"""The listener's resource bounds (protocol/shell/rpc_limits.py), on real aiohttp servers on loopback:
a body with too many CBOR items is refused before it is decoded, a stream client that never reads
its answers stops being read (no task per frame beyond the bound), connections beyond
max_connections are closed at once, and idle connections are closed (issue 11, section 6)."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.shell.rpc import _BUDGET, _STREAM_SOCKETS, CONTENT_TYPE, STREAM_PATH, make_app
from kraftpy.protocol.shell.rpc_limits import LimitedTCPSite, ListenerLimits, count_items
from kraftpy.protocol.stream_frames import frame as stream_frame
from kraftpy.protocol.stream_frames import upgrade_request
from kraftpy.tools.faults.raw_stream import RawStream

WAIT_S = 10


@pytest.mark.parametrize(
    "value",
    [0, -1, 2**64, 1.5, "text", b"bytes" * 100, [], {}, [1, [2, {"a": b"x" * 300}]], {"k": [None, True] * 50}],
)
def test_count_items_counts_every_cbor_item(value: object) -> None:
    def walk(v: object) -> int:
        if isinstance(v, list):
            return 1 + sum(walk(x) for x in v)
        if isinstance(v, dict):
            return 1 + sum(walk(k) + walk(x) for k, x in v.items())
        return 2 if isinstance(v, int) and not -(2**64) <= v < 2**64 else 1  # a bignum is a tag + bytes

    assert count_items(cbor2.dumps(value), 10**6) == walk(value)


def test_count_items_stops_at_the_limit() -> None:
    assert count_items(cbor2.dumps([0] * 1000), 10) == 11


async def serve(limits: ListenerLimits, routes: dict) -> tuple[web.AppRunner, LimitedTCPSite, int]:
    runner = web.AppRunner(make_app(routes, limits=limits), keepalive_timeout=limits.connections_max_idle_ms / 1000)
    await runner.setup()
    site = LimitedTCPSite(runner, "127.0.0.1", 0, limits)
    await site.start()
    return runner, site, site._server.sockets[0].getsockname()[1]


async def echo(body: dict) -> dict:
    return {"echo": body.get("value")}


async def test_a_body_with_too_many_items_is_refused_undecoded() -> None:
    runner, _, port = await serve(ListenerLimits(max_body_items=1000), {"/echo": echo})
    try:
        async with aiohttp.ClientSession() as session:
            for body in ({"value": [{}] * 5000}, {"value": [0] * 1_000_000}):
                data = cbor2.dumps(body)
                async with session.post(
                    f"http://127.0.0.1:{port}/echo", data=data, headers={"Content-Type": CONTENT_TYPE}
                ) as resp:
                    answer = cbor2.loads(await resp.read())
                assert answer["error_code"] == ErrorCode.INVALID_REQUEST and "CBOR items" in answer["message"]
            small = cbor2.dumps({"value": [1, 2]})
            async with session.post(f"http://127.0.0.1:{port}/echo", data=small) as resp:
                assert cbor2.loads(await resp.read()) == {"echo": [1, 2], "error_code": 0}
    finally:
        await runner.cleanup()


def raw_stream(port: int) -> socket.socket:
    """A stream client that never reads: the upgrade by hand, then frames only (another process
    would behave the same; an asyncio client in this process would read the answers for us)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window it offers is small
    sock.connect(("127.0.0.1", port))
    sock.sendall(upgrade_request(STREAM_PATH, {"Host": "127.0.0.1"}))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert b" 101 " in head.split(b"\r\n")[0]
    return sock


async def test_a_stream_client_that_never_reads_is_not_read_either() -> None:
    calls = 0

    async def big(body: dict) -> dict:
        nonlocal calls
        calls += 1
        return {"payload": b"x" * 65536}

    limits = ListenerLimits(stream_max_in_flight_calls=16, stream_max_queued_answer_bytes=256 * 1024)
    runner, _, port = await serve(limits, {"/big": big})
    frames = 20_000
    sock = await asyncio.to_thread(raw_stream, port)
    frame = stream_frame(cbor2.dumps({"id": 1, "path": "/big", "body": {"pad": b"p" * 1024}}))  # 20 MB in all
    sock.settimeout(3)  # sendall blocks once the server stops reading

    def flood() -> int:
        sent = 0
        try:
            for _ in range(frames):
                sock.sendall(frame)
                sent += 1
        except TimeoutError:
            pass
        return sent

    try:
        sent = await asyncio.to_thread(flood)
        tasks_while_flooded = len(asyncio.all_tasks())
        # Before the bound, every frame was read and became a task holding a 64 KiB answer.
        assert sent < frames, "the server read every frame of a client that reads nothing"
        assert calls <= limits.stream_max_in_flight_calls + limits.stream_max_queued_answer_bytes // 65536 + 64
        assert tasks_while_flooded < 100
    finally:
        sock.close()
        await runner.cleanup()


async def test_connections_beyond_the_limit_are_closed_at_once() -> None:
    runner, site, port = await serve(ListenerLimits(max_connections=5), {"/echo": echo})
    sockets = []
    try:
        for _ in range(5):
            sockets.append(socket.create_connection(("127.0.0.1", port)))
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(WAIT_S):
            while site.limiter.open_connections < 5:
                await asyncio.sleep(0.01)
        extra = socket.create_connection(("127.0.0.1", port))
        sockets.append(extra)
        extra.settimeout(WAIT_S)
        assert await loop.run_in_executor(None, extra.recv, 1) == b""  # closed by the server
        assert site.status()["refused_connections"] == 1
        for s in sockets[:5]:
            s.close()
        async with asyncio.timeout(WAIT_S):
            while site.limiter.open_connections > 0:
                await asyncio.sleep(0.01)
        async with (
            aiohttp.ClientSession() as session,  # room again
            session.post(f"http://127.0.0.1:{port}/echo", data=cbor2.dumps({"value": 1})) as resp,
        ):
            assert cbor2.loads(await resp.read())["echo"] == 1
    finally:
        for s in sockets:
            s.close()
        await runner.cleanup()


async def test_an_idle_connection_is_closed() -> None:
    runner, _, port = await serve(ListenerLimits(connections_max_idle_ms=300), {"/echo": echo})
    try:
        silent = socket.create_connection(("127.0.0.1", port))  # never sends a byte (or half-open)
        silent.settimeout(WAIT_S)
        assert await asyncio.get_running_loop().run_in_executor(None, silent.recv, 1) == b""
        silent.close()
        stream = await RawStream.open("127.0.0.1", port)
        assert await stream.receive(WAIT_S) is None  # no frames sent: the stream is idle, and closed
        await stream.close()
    finally:
        await runner.cleanup()


async def test_a_stream_that_keeps_calling_outlives_the_idle_time() -> None:
    """Idleness is the time since the last frame, not since the stream opened: one timer re-armed
    when it fires early (IdleTimer), not a timeout per frame."""
    runner, _, port = await serve(ListenerLimits(connections_max_idle_ms=300), {"/echo": echo})
    try:
        stream = await RawStream.open("127.0.0.1", port)
        for n in range(8):  # 8 x 100 ms: well past 300 ms in all, never 300 ms without a frame
            stream.send_call(n, "/echo", {"value": n})
            assert await stream.receive(WAIT_S) == {"id": n, "body": {"echo": n, "error_code": 0}}
            await asyncio.sleep(0.1)
        assert await stream.receive(WAIT_S) is None  # then silence: closed as idle
        await stream.close()
    finally:
        await runner.cleanup()


async def test_a_streams_calls_start_in_the_order_they_arrived() -> None:
    """A large frame is checked off the loop; a small one behind it must not start first (a producer's
    batches to one partition would reach the log out of sequence, issue 11 section 2)."""
    order: list[int] = []

    async def record(body: dict) -> dict:
        order.append(body["n"])
        return {}

    runner, _, port = await serve(ListenerLimits(), {"/record": record})
    try:
        stream = await RawStream.open("127.0.0.1", port)
        big = {"n": 0, "items": [0] * 150_000}  # counted in a worker thread: takes a while
        for n, body in enumerate([big, {"n": 1}, {"n": 2}]):
            stream.send_call(n, "/record", body)
        answers = [await stream.receive(WAIT_S) for _ in range(3)]
        assert sorted(a["id"] for a in answers) == [0, 1, 2]
        assert order == [0, 1, 2]
        await stream.close()
    finally:
        await runner.cleanup()


MIB = 1024 * 1024


async def _until(what: str, condition) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def test_large_stream_frames_sent_slowly_hold_at_most_the_listeners_byte_budget() -> None:
    """Before the budget, every connection could hold a partial frame of up to the body bound (64 MiB
    by default): a thousand connections sending half a frame each were 32 GB. Now a large frame holds
    its size from its header on, and a connection whose frame does not fit reads nothing more."""
    limits = ListenerLimits(queued_max_request_bytes=2 * MIB)
    runner, _, port = await serve(limits, {"/echo": echo})
    app = runner.app
    budget = app[_BUDGET]
    pad = b"p" * (3 * MIB // 2)
    payload = cbor2.dumps({"id": 1, "path": "/echo", "body": {"value": 1, "pad": pad}})
    framed = stream_frame(payload)
    first, second = await RawStream.open("127.0.0.1", port), await RawStream.open("127.0.0.1", port)
    try:
        first.send_bytes(framed[: MIB // 2])  # the header and part of the payload
        await _until("the first frame's bytes to be held", lambda: budget.held_bytes == len(payload))
        second.send_bytes(framed)  # all of it: the server must not read it while the budget is spent
        await _until("the second frame to wait for the budget", lambda: budget._waiters)
        await asyncio.sleep(0.2)
        waiting = [s for s in app[_STREAM_SOCKETS] if s._awaiting_budget]
        assert len(waiting) == 1 and waiting[0]._splitter.buffered_bytes < MIB  # not the 1.5 MiB frame
        assert budget.held_bytes == len(payload)
        first.send_bytes(framed[MIB // 2 :])  # the first call runs, ends, frees its bytes; the second goes in
        assert await first.receive(WAIT_S) == {"id": 1, "body": {"echo": 1, "error_code": 0}}
        assert await second.receive(WAIT_S) == {"id": 1, "body": {"echo": 1, "error_code": 0}}
        await _until("every byte to be freed", lambda: budget.held_bytes == 0)
    finally:
        await first.close()
        await second.close()
        await runner.cleanup()


async def test_a_stream_that_leaves_mid_frame_frees_the_frames_bytes() -> None:
    runner, _, port = await serve(ListenerLimits(queued_max_request_bytes=2 * MIB), {"/echo": echo})
    budget = runner.app[_BUDGET]
    try:
        stream = await RawStream.open("127.0.0.1", port)
        stream.send_bytes((MIB).to_bytes(4, "big") + b"x" * 1000)
        await _until("the frame's bytes to be held", lambda: budget.held_bytes == MIB)
        await stream.close()
        await _until("the bytes to be freed", lambda: budget.held_bytes == 0)
    finally:
        await runner.cleanup()


async def test_large_http_bodies_wait_for_the_listeners_byte_budget() -> None:
    limits = ListenerLimits(queued_max_request_bytes=2 * MIB)
    runner, _, port = await serve(limits, {"/echo": echo})
    budget = runner.app[_BUDGET]
    body = cbor2.dumps({"value": 7, "pad": b"p" * (3 * MIB // 2)})
    head = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        (_, w1), (_, w2) = connections
        w1.write(head.encode() + body[: MIB // 2])
        await _until("the first body's bytes to be held", lambda: budget.held_bytes == len(body))
        w2.write(head.encode() + body)
        await _until("the second body to wait", lambda: budget._waiters)
        assert budget.held_bytes == len(body)
        w1.write(body[MIB // 2 :])
        for reader, _ in connections:
            answer_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            assert answer_head.startswith(b"HTTP/1.1 200")
        await _until("every byte to be freed", lambda: budget.held_bytes == 0)
    finally:
        for _, writer in connections:
            writer.close()
        await runner.cleanup()


async def test_a_caller_that_leaves_mid_body_is_no_error_and_the_listener_serves_on(caplog) -> None:
    # Fault runs cut peers off mid-request all the time: each left an ERROR with a traceback.
    caplog.set_level(logging.INFO, logger="kraftpy.protocol.shell.rpc")
    runner, _, port = await serve(ListenerLimits(), {"/echo": echo})
    try:
        head = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: 1000\r\n\r\n"
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head.encode() + b"x" * 10)
        await writer.drain()
        await asyncio.sleep(0.1)  # the route is reading the body now
        writer.transport.abort()
        await _until("the lost connection to be logged", lambda: "connection was lost" in caplog.text)
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{port}/echo", data=cbor2.dumps({"value": 1})) as resp,
        ):
            assert cbor2.loads(await resp.read()) == {"echo": 1, "error_code": 0}
    finally:
        await runner.cleanup()
