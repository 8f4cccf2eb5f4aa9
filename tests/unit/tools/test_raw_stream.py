"""The hostile process's hand-driven stream client (tools/faults/raw_stream.py) never hangs a fault
run: a node that accepts and never answers (SIGSTOP) times out, one that answers something else is a
ConnectionError, which the hostile loop counts and moves past."""

from __future__ import annotations

import asyncio
import time

import pytest

from kraftpy.tools.faults.raw_stream import RawStream, UpgradeRefused


async def _server(answer: bytes | None) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if answer is None:
            await asyncio.sleep(30)  # a paused node: the kernel accepted, nobody answers
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_node_that_never_answers_the_upgrade_times_out() -> None:
    server, port = await _server(None)
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await RawStream.open("127.0.0.1", port, timeout_s=0.3)
        assert time.monotonic() - started < 5
    finally:
        server.close()


@pytest.mark.parametrize(
    ("answer", "error", "says"),
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", UpgradeRefused, "answered 400"),
        (b"SSH-2.0-OpenSSH_9\r\n\r\n", ConnectionError, "is not HTTP"),
        (b"HTTP/1.1 101", ConnectionError, "no stream upgrade answer"),  # closed mid-head
    ],
)
async def test_an_answer_that_is_not_a_stream_is_a_connection_error(answer, error, says) -> None:
    server, port = await _server(answer)
    try:
        with pytest.raises(error, match=says):
            await RawStream.open("127.0.0.1", port, timeout_s=5)
    finally:
        server.close()
