"""Inline calls on the RPC stream (protocol/shell/rpc_calls.py `inline_handler`, ServedStream,
`RpcClient.call_now`), on a real aiohttp server on loopback: an inline route answers on the stream
from inside the read, with no task, and over HTTP through the same handler; the caller's end is told
its answer, its timeout or the stream's end exactly once; answers to a peer that stops reading are
held within the stream's bound and all delivered once it reads again."""

from __future__ import annotations

import asyncio
from typing import Any

import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import _STREAM_SOCKETS, RpcClient, make_app
from kraftpy.protocol.shell.rpc_calls import Reply, inline_handler
from kraftpy.protocol.shell.rpc_limits import INLINE_DECODE_BYTES, ListenerLimits
from kraftpy.tools.faults.raw_stream import RawStream

WAIT_S = 10  # every wait in these tests is bounded by this

PARKED: dict[str, Reply] = {}  # replies owed by /later, by key


def now(body: dict, reply: Reply) -> None:
    reply({"echo": body.get("value")})


def later(body: dict, reply: Reply) -> None:
    """Answers when the test says (as a parked Raft fetch is answered by a later step)."""
    PARKED[body["key"]] = reply


def refuse(body: dict, reply: Reply) -> None:
    raise KafkaError("not here", ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=3)


def reply_error(body: dict, reply: Reply) -> None:
    reply(KafkaError("gave up", ErrorCode.REQUEST_TIMED_OUT))


def crash(body: dict, reply: Reply) -> None:
    raise RuntimeError("bug")


def big(body: dict, reply: Reply) -> None:
    reply({"n": body["n"], "pad": b"p" * (256 * 1024)})


async def park(body: dict) -> dict:
    await asyncio.sleep(60)
    return {}


ROUTES = {
    **{
        path: inline_handler(handler)
        for path, handler in {
            "/now": now,
            "/later": later,
            "/refuse": refuse,
            "/reply_error": reply_error,
            "/crash": crash,
            "/big": big,
        }.items()
    },
    "/park": park,  # an ordinary route, for comparison
}


async def _until(what: str, predicate) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def server():
    PARKED.clear()
    app = make_app(ROUTES, max_body_bytes=1024)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield ("127.0.0.1", site._server.sockets[0].getsockname()[1]), app, runner
    await runner.cleanup()


@pytest.mark.parametrize("stream", [True, False])
async def test_an_inline_route_answers_on_the_stream_and_over_http_alike(server, stream: bool) -> None:
    address, _, _ = server
    client = RpcClient(request_timeout_ms=5000, peer_streams=stream)
    try:
        assert await client.call(address, "/now", {"value": 7}) == {"echo": 7, "error_code": 0}
        with pytest.raises(KafkaError) as info:
            await client.call(address, "/refuse", {})
        assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and info.value.details == {"leader_id": 3}
        with pytest.raises(KafkaError) as info:
            await client.call(address, "/reply_error", {})
        assert info.value.code is ErrorCode.REQUEST_TIMED_OUT and info.value.message == "gave up"
        with pytest.raises(KafkaError) as info:
            await client.call(address, "/crash", {})
        assert info.value.code is ErrorCode.UNKNOWN_SERVER_ERROR and "RuntimeError: bug" in info.value.message
        waiting = asyncio.create_task(client.call(address, "/later", {"key": "a"}))
        await _until("the call to park", lambda: "a" in PARKED)
        assert not waiting.done()
        PARKED["a"]({"released": "a"})
        PARKED["a"]({"released": "twice"})  # a second reply is ignored
        assert await asyncio.wait_for(waiting, WAIT_S) == {"released": "a", "error_code": 0}
        assert bool(client._streams) is stream
    finally:
        await client.close()


async def test_an_inline_call_runs_in_the_read_with_no_task(server) -> None:
    address, app, _ = server
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    try:
        await client.call(address, "/now", {"value": 1})  # the stream is up
        (served,) = list(app[_STREAM_SOCKETS])
        waiting = asyncio.create_task(client.call(address, "/later", {"key": "b"}))
        await _until("the call to park", lambda: "b" in PARKED)
        assert served.gate.in_flight == 1 and not served._tasks, "an inline call holds no task while it waits"
        PARKED["b"]({"ok": True})
        PARKED["b"]({"again": True})  # a second reply neither writes nor ends the call twice
        assert served.gate.in_flight == 0, "the reply wrote the answer and ended the call at once"
        assert (await asyncio.wait_for(waiting, WAIT_S))["ok"]
        parked = asyncio.create_task(client.call(address, "/park", {}))
        await _until("the ordinary call to start", lambda: served._tasks)  # an ordinary route runs as a task
        parked.cancel()
    finally:
        await client.close()


@pytest.fixture
async def connected(server):
    """A node's client with its stream to the server up, and the list its call_now answers go to."""
    address, _, runner = server
    client = RpcClient(request_timeout_ms=5000, peer_streams=True)
    answers: list[Any] = []
    assert not client.call_now(address, "/now", {"value": 1}, 1000, answers.append)  # no stream yet
    await client.call(address, "/now", {"value": 0})
    yield address, client, answers, runner
    await client.close()


async def test_call_now_needs_a_connected_stream_and_is_answered_from_the_read(connected) -> None:
    address, client, answers, _ = connected
    assert not RpcClient(peer_streams=False).call_now(address, "/now", {}, 1000, answers.append)
    assert client.call_now(address, "/now", {"value": 2}, 1000, answers.append)
    assert client.call_now(address, "/refuse", {}, 1000, answers.append)
    await _until("both answers", lambda: len(answers) == 2)
    assert answers[0] == {"echo": 2, "error_code": 0}
    # error bodies come back as bodies (raise_errors=False): the caller reads them
    assert answers[1]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert answers[1]["details"] == {"leader_id": 3}
    await asyncio.sleep(0.05)
    assert len(answers) == 2, "each call is answered once"


async def test_call_now_times_out_once_and_drops_a_silent_stream(connected) -> None:
    address, client, answers, _ = connected
    stream = client._streams[address]
    assert client.call_now(address, "/later", {"key": "c"}, 100, answers.append)
    await _until("the timeout", lambda: answers)
    assert isinstance(answers[0], KafkaError) and answers[0].code is ErrorCode.REQUEST_TIMED_OUT
    assert "/later to 127.0.0.1" in answers[0].message and "100 ms" in answers[0].message
    assert not stream.usable, "nothing came back on it since the call left: a dead connection is dropped"
    PARKED["c"]({"late": True})  # the server answers after all: nobody is told twice
    await asyncio.sleep(0.05)
    assert len(answers) == 1
    assert (await client.call(address, "/now", {"value": 5}))["echo"] == 5  # a new stream


async def test_call_now_is_told_when_the_stream_ends(connected) -> None:
    address, client, answers, runner = connected
    assert client.call_now(address, "/later", {"key": "d"}, 5000, answers.append)
    await _until("the call to park", lambda: "d" in PARKED)
    await asyncio.wait_for(runner.cleanup(), WAIT_S)
    await _until("the stream's end", lambda: answers)
    assert isinstance(answers[0], KafkaError) and answers[0].code is ErrorCode.NETWORK_EXCEPTION
    await asyncio.sleep(0.2)  # the call's timer was stopped with the answer: nothing more comes
    assert len(answers) == 1


async def test_inline_answers_to_a_peer_that_stops_reading_are_bounded_and_all_delivered(server) -> None:
    """A peer that sends calls and reads nothing: the inline answers fill the socket, then wait in
    the stream's answer queue (counted against stream_max_queued_answer_bytes, so the stream stops
    taking calls), and every one of them arrives once the peer reads."""
    address, app, _ = server
    calls = 120  # 30 MiB of answers: more than the socket buffers and the 16 MiB answer bound
    raw = await RawStream.open(*address)
    try:
        for n in range(calls):
            raw.send_call(n, "/big", {"n": n})
        (served,) = list(app[_STREAM_SOCKETS])
        await _until("the answers to back up", lambda: served.gate.queued_bytes > 0)
        await _until("the stream to stop taking calls", lambda: served.gate.paused > 0)
        assert served.gate.queued_bytes <= served.gate.max_queued_answer_bytes + 300 * 1024
        seen = set()
        for _ in range(calls):
            answer = await raw.receive(WAIT_S)
            assert answer is not None and answer["body"]["error_code"] == 0
            seen.add(answer["body"]["n"])
        assert seen == set(range(calls))
        await _until("the answer queue to drain", lambda: served.gate.queued_bytes == 0 and served.gate.in_flight == 0)
    finally:
        await raw.close()


async def _raw_stream_to(app: web.Application) -> tuple[web.AppRunner, RawStream]:
    """`app` served on loopback, and a raw stream to it (frames written and read by hand)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, await RawStream.open("127.0.0.1", site._server.sockets[0].getsockname()[1])


async def test_a_late_inline_answer_makes_room_for_the_calls_waiting_behind_it() -> None:
    """With every call slot of a stream held by parked inline calls, the next call waits and the
    stream stops reading; an answer made later, outside any read, frees a slot and starts it."""
    PARKED.clear()
    app = make_app(ROUTES, limits=ListenerLimits(stream_max_in_flight_calls=2))
    runner, raw = await _raw_stream_to(app)
    try:
        for call_id, key in enumerate(("x", "y", "z"), start=1):
            raw.send_call(call_id, "/later", {"key": key})
        await _until("two calls to park", lambda: len(PARKED) == 2)
        (served,) = list(app[_STREAM_SOCKETS])
        await asyncio.sleep(0.05)
        assert "z" not in PARKED and served._backlog, "the third call waits for a slot"
        PARKED["x"]({"done": "x"})  # from outside any read, as a parked fetch is answered by a later step
        assert await raw.receive(WAIT_S) == {"id": 1, "body": {"done": "x", "error_code": 0}}
        await _until("the third call to start", lambda: "z" in PARKED)
    finally:
        await raw.close()
        await runner.cleanup()


@pytest.mark.parametrize("behind", ["in the same read", "in later reads"])
async def test_a_large_frame_counted_off_the_loop_still_starts_before_the_frames_behind_it(behind: str) -> None:
    """A frame over INLINE_DECODE_BYTES is screened before it starts (its items counted, in a worker
    thread when there can be many), and the frames read behind it wait, so calls start in the order
    they arrived (a follower's requests, a producer's batches) whatever their sizes. Inline calls
    answered at once inside that late start must not start the ones behind them from inside it."""
    order: list[int] = []

    def record(body: dict, reply: Reply) -> None:
        order.append(body["n"])
        reply({})

    app = make_app({"/record": inline_handler(record)}, max_body_bytes=1024 * 1024)
    runner, raw = await _raw_stream_to(app)
    try:
        if behind == "in the same read":
            raw.send_call(1, "/record", {"n": 1, "pad": b"x" * (INLINE_DECODE_BYTES + 1)})
        else:
            # over max_body_items bytes of many items: counted in the worker thread for a while,
            # so the frames behind it arrive in reads of their own meanwhile
            items = list(range(150_000))
            assert len(cbor2.dumps(items)) > ListenerLimits().max_body_items
            raw.send_call(1, "/record", {"n": 1, "items": items})
            await asyncio.sleep(0.005)
        for n in (2, 3):
            raw.send_call(n, "/record", {"n": n})
        for _ in range(3):
            answer = await raw.receive(WAIT_S)
            assert answer is not None and answer["body"]["error_code"] == 0, answer
        assert order == [1, 2, 3]
    finally:
        await raw.close()
        await runner.cleanup()
