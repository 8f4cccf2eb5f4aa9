"""The Raft routes (raft/shell/transport.py), driven through their inline form as the RPC stream
calls them: each request is checked, handed to the core, and answered exactly once, by the core's
answer (even one made inside the step that received the request), by a newer fetch superseding it,
by its timeout, or by the routes closing; what they owe stays bounded and nothing is left behind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchResponse, Message, VoteRequest, VoteResponse
from kraftpy.raft.shell import transport
from kraftpy.raft.shell.transport import RaftRoutes

C = "cluster-t"


class Core:
    """Stands in for the shell: records what it is handed; answers at once when told to."""

    def __init__(self) -> None:
        self.routes: RaftRoutes | None = None
        self.handed: list[Message] = []
        self.answer_at_once = False

    def deliver(self, message: Message) -> None:
        self.handed.append(message)
        if self.answer_at_once and isinstance(message, VoteRequest):
            assert self.routes is not None
            self.routes.answer(VoteResponse(C, 1, message.src, message.correlation_id, 5, None, True, False))


def make(request_timeout_ms: int = 5000, fetch_max_wait_ms: int = 500) -> tuple[RaftRoutes, Core]:
    core = Core()
    routes = RaftRoutes(
        node_id=1,
        cluster_id=C,
        deliver=core.deliver,
        request_timeout_ms=request_timeout_ms,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
    routes.open = True
    core.routes = routes
    return routes, core


def call(routes: RaftRoutes, request: Message) -> list[Any]:
    """Call the route as the stream does; the list gets what its Reply is given."""
    replies: list[Any] = []
    routes.routes()[codec.route_of(request)].inline(codec.encode(request), replies.append)  # type: ignore[attr-defined]
    return replies


def fetch(src: int, correlation_id: int, max_wait_ms: int = 100) -> FetchRequest:
    return FetchRequest(C, src, 1, correlation_id, 5, 10, 4, max_wait_ms)


def owed(routes: RaftRoutes) -> int:
    return sum(len(queue) for queue in routes._waiters.values())


async def test_the_core_answer_goes_to_its_request_once_even_from_inside_the_step() -> None:
    routes, core = make()
    core.answer_at_once = True  # the core answers while it handles the request (a vote, say)
    replies = call(routes, VoteRequest(C, 2, 1, 9, 5, 4, 10, False))
    assert len(replies) == 1 and replies[0]["type"] == "VoteResponse" and replies[0]["correlation_id"] == 9
    first = call(routes, fetch(2, 11))
    second = call(routes, fetch(3, 11))  # same correlation id, another peer
    assert first == [] and second == [] and owed(routes) == 2
    (waiting,) = routes._waiters[(3, FetchRequest, 11)]
    response = FetchResponse(C, 1, 3, 11, 5, 1, ErrorCode.NONE, 10, 9)
    assert routes.answer(response)
    assert second == [codec.encode(response)] and first == []
    assert waiting.timer is not None and waiting.timer.cancelled(), "an answered request's timer is stopped"
    assert not routes.answer(response), "answered already: nobody waits for it"
    assert not routes.answer(fetch(2, 11)), "a request is not an answer"
    assert owed(routes) == 1 and routes._count == 1


async def test_a_newer_fetch_from_a_peer_supersedes_its_parked_one_only() -> None:
    routes, _ = make()
    old = call(routes, fetch(2, 1))
    other = call(routes, fetch(3, 1))
    new = call(routes, fetch(2, 2))
    assert len(old) == 1 and isinstance(old[0], KafkaError) and old[0].code is ErrorCode.REQUEST_TIMED_OUT
    assert "superseded by a newer fetch from 2" in old[0].message
    assert other == [] and new == [] and owed(routes) == 2


async def test_an_unanswered_request_times_out_after_the_request_timeout_and_its_wait() -> None:
    routes, _ = make(request_timeout_ms=30, fetch_max_wait_ms=20)
    replies = call(routes, fetch(2, 1, max_wait_ms=10_000))  # the wait counts up to fetch_max_wait_ms
    await asyncio.sleep(0.02)
    assert replies == []
    async with asyncio.timeout(5):
        while not replies:
            await asyncio.sleep(0.005)
    assert isinstance(replies[0], KafkaError) and replies[0].code is ErrorCode.REQUEST_TIMED_OUT
    assert "did not answer FetchRequest within 50 ms" in replies[0].message
    assert owed(routes) == 0 and routes._count == 0 and not routes._waiters


async def test_requests_are_checked_before_the_core_sees_them() -> None:
    routes, core = make()
    cases = [
        (FetchRequest("other", 2, 1, 1, 5, 10, 4, 100), ErrorCode.INCONSISTENT_CLUSTER_ID),
        (FetchRequest(C, 2, 3, 1, 5, 10, 4, 100), ErrorCode.INVALID_REQUEST),  # meant for node 3
    ]
    for request, code in cases:
        with pytest.raises(KafkaError) as info:
            call(routes, request)
        assert info.value.code is code
    with pytest.raises(KafkaError) as info:
        routes.routes()["/raft/fetch"].inline({"type": "VoteRequest"}, lambda out: None)  # type: ignore[attr-defined]
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert core.handed == [] and owed(routes) == 0


async def test_what_is_owed_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "MAX_WAITERS", 3)
    routes, _ = make()
    for peer in (2, 3, 4):
        call(routes, fetch(peer, 1))
    with pytest.raises(KafkaError) as info:
        call(routes, fetch(5, 1))
    assert info.value.code is ErrorCode.REQUEST_TIMED_OUT and "owes 3 answers already" in info.value.message


async def test_closing_fails_every_owed_answer_and_refuses_new_requests() -> None:
    routes, core = make()
    pending = [call(routes, fetch(peer, 1)) for peer in (2, 3)]
    routes.close()
    for replies in pending:
        assert len(replies) == 1 and replies[0].code is ErrorCode.BROKER_NOT_AVAILABLE
    assert owed(routes) == 0 and routes._count == 0
    with pytest.raises(KafkaError) as info:
        call(routes, fetch(2, 2))
    assert info.value.code is ErrorCode.BROKER_NOT_AVAILABLE and len(core.handed) == 2


async def test_over_http_the_same_route_awaits_its_answer() -> None:
    routes, _ = make()
    handler = routes.routes()["/raft/fetch"]
    waiting = asyncio.ensure_future(handler(codec.encode(fetch(2, 7))))
    await asyncio.sleep(0)
    response = FetchResponse(C, 1, 2, 7, 5, 1, ErrorCode.NONE, 10, 9)
    assert routes.answer(response)
    assert await asyncio.wait_for(waiting, 5) == codec.encode(response)
