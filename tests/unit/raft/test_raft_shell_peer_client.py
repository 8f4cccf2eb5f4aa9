"""Outbound Raft lanes: failed fetches come back as error answers (after the peer's backoff), failed
votes are dropped, a newer fetch supersedes an older one, and answers are checked against requests."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchResponse, Message, VoteRequest
from kraftpy.raft.shell.peer_client import PeerClient

C = "cluster-p"


def _client(port: int, delivered: list[Message], rpc: RpcClient) -> PeerClient:
    return PeerClient(
        node_id=1,
        rpc=rpc,
        addresses={1: ("127.0.0.1", 1), 2: ("127.0.0.1", port)},
        deliver=delivered.append,
        current_epoch=lambda: 7,
        request_timeout_ms=300,
        backoff_initial_ms=5,
        backoff_max_ms=10,
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
        await asyncio.sleep(0.1)
        assert len(delivered) == 3, "each fetch is answered once"
    finally:
        await peers.close()
        await rpc.close()
        await runner.cleanup()
