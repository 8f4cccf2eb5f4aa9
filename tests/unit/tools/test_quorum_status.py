"""`kraftpy quorum status` asks the quorum leader over the nodes' RPC, following a NOT_CONTROLLER hint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import make_app
from kraftpy.tools.commands.quorum import DESCRIBE_QUORUM_PATH, RETRY_BACKOFF_MS, ask_quorum

QUORUM = {
    "leader_id": 2,
    "epoch": 4,
    "high_watermark": 17,
    "voters": [{"node_id": 2, "log_end_offset": 17, "lag": 0, "last_fetch_ms_ago": 0}],
    "observers": [],
}


async def serve(answer: Any) -> tuple[web.AppRunner, tuple[str, int]]:
    async def describe(body: dict[str, Any]) -> dict[str, Any]:
        return answer() if callable(answer) else answer

    runner = web.AppRunner(make_app({DESCRIBE_QUORUM_PATH: describe}), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, ("127.0.0.1", site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


@pytest.fixture
async def nodes() -> AsyncIterator[dict[str, tuple[str, int]]]:
    leader_runner, leader = await serve(QUORUM)

    def not_leader() -> dict[str, Any]:
        raise KafkaError("not the quorum leader", ErrorCode.NOT_CONTROLLER, leader_address=f"{leader[0]}:{leader[1]}")

    follower_runner, follower = await serve(not_leader)

    yield {"leader": leader, "follower": follower}
    for runner in (leader_runner, follower_runner):
        await runner.cleanup()


async def test_a_follower_points_at_the_leader_and_its_answer_is_read(nodes) -> None:
    info = await ask_quorum([nodes["follower"]], 5_000)
    assert (info.leader_id, info.epoch, info.high_watermark) == (2, 4, 17)
    assert [v.node_id for v in info.voters] == [2]


async def test_hints_that_lead_nowhere_end_in_a_timeout_asking_each_node_once_a_round(closed_port: str) -> None:
    """Two stale nodes naming each other (an election running): no ping-pong between them, a backoff each round."""
    addresses: list[tuple[str, int]] = []
    calls = [0, 0]

    def pointing_at(other: int) -> Any:
        def answer() -> dict[str, Any]:
            calls[1 - other] += 1
            raise KafkaError("stale", ErrorCode.NOT_CONTROLLER, leader_address="{}:{}".format(*addresses[other]))

        return answer

    runners = []
    for other in (1, 0):
        runner, address = await serve(pointing_at(other))
        runners.append(runner)
        addresses.append(address)
    host, port = closed_port.rsplit(":", 1)
    try:
        with pytest.raises(KafkaError) as raised:
            await ask_quorum([(host, int(port)), addresses[0]], 600)
    finally:
        for runner in runners:
            await runner.cleanup()
    assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT
    rounds = 600 // RETRY_BACKOFF_MS + 1  # at most one round per backoff: the bound, not a measurement
    assert 1 <= calls[0] <= rounds and 1 <= calls[1] <= rounds, calls
