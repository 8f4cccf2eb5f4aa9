"""EMFILE is never fatal to Raft (issue 11, section 6): a real single-voter Raft component whose
process runs out of file descriptors while it must persist its vote stalls, reports it, and
carries on once descriptors are free again. Real files, a real RLIMIT_NOFILE."""

from __future__ import annotations

import asyncio
import errno
import os
import resource
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.quorum_state import Role
from kraftpy.raft.shell.component import RaftComponent

WAIT_S = 10


def hog_descriptors() -> list[int]:
    """Open /dev/null until the process has no descriptor left."""
    held: list[int] = []
    while True:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
            return held


async def test_running_out_of_descriptors_stalls_raft_and_it_recovers(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    (port,) = reserve_ports(1)
    # The first election must come after the descriptors run out; under a loaded suite (two workers,
    # node processes) start() can take long enough for a 200-400 ms election to come first (seen twice
    # in session 24), so the window is 1-2 s.
    config = RaftConfig(election_timeout_ms=1000, fetch_timeout_ms=2000, request_timeout_ms=500)
    rpc = RpcClient(request_timeout_ms=500)
    stops: list[bool] = []
    component = RaftComponent(
        node_id=1,
        cluster_id="c",
        data_dir=tmp_path,
        voters={1: ("127.0.0.1", port)},
        config=config,
        rpc=rpc,
        on_fatal=lambda: stops.append(True),
    )
    runner = web.AppRunner(make_app(component.routes()))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        await component.start()
        # Out of descriptors before the first election (1-2 s away): its vote cannot be persisted.
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
        held = hog_descriptors()
        assert component.status()["epoch"] == 0, "the first election came before the descriptors ran out"
        async with asyncio.timeout(WAIT_S):
            while not stops and not component.status().get("storage", {}).get("stalled"):
                await asyncio.sleep(0.01)
        assert not stops, "EMFILE stopped the Raft layer"
        status = component.status()
        assert "Too many open files" in status["storage"]["error"] and status["state"] != "failed"
        with pytest.raises(KafkaError) as info:  # nothing is proposed on top of an unpersisted step
            await component.append_and_wait([b"during"], timeout_ms=1000)
        assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
        await asyncio.sleep(0.5)  # several retries, all failing: still not fatal
        assert not stops and component.status()["state"] != "failed"

        for fd in held:
            os.close(fd)
        held = []
        async with asyncio.timeout(WAIT_S):
            while component.status()["storage"]["stalled"] or not component.is_leader:
                await asyncio.sleep(0.01)
        assert component.status()["storage"] == {"stalled": False, "error": None, "stalls": 1}
        assert await component.append_and_wait([b"after"], timeout_ms=5000) >= 0
        assert component.status()["state"] == Role.LEADER.value and not stops
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        await component.stop(graceful=False)
        await runner.cleanup()
        await rpc.close()
