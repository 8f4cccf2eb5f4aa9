"""Outbound Raft lanes: failed fetches come back as error answers (after the peer's backoff), failed
votes are dropped, a newer fetch supersedes an older one, and answers are checked against requests."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchResponse, Message, VoteRequest, VoteResponse
from kraftpy.raft.shell.peer_client import PeerClient

C = "cluster-p"


def _client(port: int, delivered: list[Message], rpc: RpcClient, **settings: int) -> PeerClient:
    return PeerClient(
        node_id=1,
        rpc=rpc,
        addresses={1: ("127.0.0.1", 1), 2: ("127.0.0.1", port)},
        deliver=delivered.append,
        current_epoch=lambda: 7,
        **{"request_timeout_ms": 300, "backoff_initial_ms": 5, "backoff_max_ms": 10, **settings},
    )


async def _until(predicate, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


async def test_a_fetch_to_a_dead_peer_comes_back_as_an_error_answer(reserve_ports: Callable[[int], list[int]]) -> None:
    delivered: list[Message] = []
    rpc = RpcClient()
    peers = _client(reserve_ports(1)[0], delivered, rpc)  # nothing listens there
    try:
        peers.send(FetchRequest(C, 1, 2, 41, 7, 10, 3, 100))
        peers.send(VoteRequest(C, 1, 2, 42, 8, 3, 10, True))
        await _until(lambda: delivered)
        answer = delivered[0]
        assert isinstance(answer, FetchResponse)
        assert (answer.src, answer.dst, answer.correlation_id, answer.epoch) == (2, 1, 41, 7)
        assert answer.error is ErrorCode.NETWORK_EXCEPTION and answer.fetch_offset == 10
        await _until(lambda: peers.pending() == 0)
        assert len(delivered) == 1  # the failed vote is dropped: the core resends it on its timer
    finally:
        await peers.close()
        await rpc.close()


async def _ping(body: dict) -> dict:
    return {}


@pytest.mark.parametrize("transport", ["http", "stream"])
async def test_a_newer_fetch_supersedes_the_parked_one_and_bad_answers_become_errors(
    reserve_ports: Callable[[int], list[int]], transport: str
) -> None:
    """Over HTTP each fetch is a task; on a connected stream (`RpcClient.call_now`) none is, and its
    answer is handed to the core from inside the read: the same outcomes either way."""
    (port,) = reserve_ports(1)
    seen: list[int] = []

    async def fetch(body: dict) -> dict:
        request = codec.decode_request("/raft/fetch", body)
        seen.append(request.correlation_id)
        if request.correlation_id == 1:
            await asyncio.sleep(1.0)  # parked past the new fetch: its answer must never be delivered
        if request.correlation_id == 4:
            await asyncio.sleep(5.0)  # never answered in time
        if request.correlation_id == 5:
            raise KafkaError("the route refuses", ErrorCode.BROKER_NOT_AVAILABLE)
        answer = FetchResponse(C, 2, 1, request.correlation_id, 7, 2, ErrorCode.NONE, request.fetch_offset, 5)
        if request.correlation_id == 3:
            answer = dataclasses.replace(answer, correlation_id=99)  # does not answer the request
        return codec.encode(answer)

    runner = web.AppRunner(make_app({"/raft/fetch": fetch, "/ping": _ping}))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    delivered: list[Message] = []
    rpc = RpcClient(peer_streams=transport == "stream")
    peers = _client(port, delivered, rpc)
    try:
        await rpc.call(("127.0.0.1", port), "/ping", {})  # connects the stream, if any
        peers.send(FetchRequest(C, 1, 2, 1, 7, 10, 3, 100))
        assert (peers._peers[2].fetch_task is None) is (transport == "stream"), "no task on a stream"
        await _until(lambda: seen == [1])
        peers.send(FetchRequest(C, 1, 2, 2, 7, 10, 3, 100))  # the core gave up on fetch 1
        await _until(lambda: delivered)
        assert [m.correlation_id for m in delivered] == [2]  # the abandoned fetch never answers
        assert delivered[0].error is ErrorCode.NONE
        peers.send(FetchRequest(C, 1, 2, 3, 7, 10, 3, 100))
        await _until(lambda: len(delivered) == 2)
        assert delivered[1].correlation_id == 3 and delivered[1].error is ErrorCode.INVALID_REQUEST
        peers.send(FetchRequest(C, 1, 2, 4, 7, 10, 3, 100))  # 300 ms request timeout + 100 ms wait
        await _until(lambda: len(delivered) == 3)
        assert delivered[2].correlation_id == 4 and delivered[2].error is ErrorCode.REQUEST_TIMED_OUT
        peers.send(FetchRequest(C, 1, 2, 5, 7, 10, 3, 100))
        await _until(lambda: len(delivered) == 4)
        # the route's refusal reaches the core with its own code, not as an unreadable answer
        assert delivered[3].correlation_id == 5 and delivered[3].error is ErrorCode.BROKER_NOT_AVAILABLE
        await asyncio.sleep(0.1)
        assert len(delivered) == 4, "each fetch is answered once"
    finally:
        await peers.close()
        await rpc.close()
        await runner.cleanup()


async def test_the_control_lane_is_bounded_drops_the_oldest_and_stops_when_closed(
    reserve_ports: Callable[[int], list[int]],
) -> None:
    """Votes and the quorum-epoch requests: at most `control_concurrency` in flight, at most
    `control_queue_limit` waiting (the oldest dropped, counted), the queue pumped as calls end,
    `flush_control` saying whether everything queued left in time, nothing sent once closed."""
    (port,) = reserve_ports(1)
    release = asyncio.Event()
    seen: list[int] = []
    in_flight = [0, 0]  # now, most

    async def vote(body: dict) -> dict:
        request = codec.decode_request("/raft/vote", body)
        seen.append(request.correlation_id)
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.wait_for(release.wait(), 10)
        finally:
            in_flight[0] -= 1
        return codec.encode(VoteResponse(C, 2, 1, request.correlation_id, 8, None, True, False))

    runner = web.AppRunner(make_app({"/raft/vote": vote}))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    delivered: list[Message] = []
    rpc = RpcClient()
    peers = _client(port, delivered, rpc, request_timeout_ms=5000, control_queue_limit=3, control_concurrency=2)
    try:
        for correlation_id in range(1, 7):
            peers.send(VoteRequest(C, 1, 2, correlation_id, 8, 3, 10, False))
        await _until(lambda: len(seen) == 2)
        assert peers.stats() == {2: {"queued": 3, "dropped": 1}} and peers.pending() == 5
        assert not await peers.flush_control(50), "two votes parked, three queued: not delivered in time"
        release.set()
        assert await peers.flush_control(5000)
        assert sorted(seen) == [1, 2, 4, 5, 6], "the oldest queued vote was dropped for the newest"
        assert in_flight[1] == 2
        assert sorted(m.correlation_id for m in delivered) == [1, 2, 4, 5, 6]
        await peers.close()
        peers.send(VoteRequest(C, 1, 2, 7, 8, 3, 10, False))
        await asyncio.sleep(0.1)
        assert 7 not in seen and peers.pending() == 0
    finally:
        await peers.close()
        await rpc.close()
        await runner.cleanup()
