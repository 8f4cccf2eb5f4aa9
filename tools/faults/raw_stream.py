"""A hand-driven RPC stream client: any bytes as frames, answers read one at a time.

The hostile process sends garbage on it, and the stream's tests drive the server with it, where
the node's own client (protocol/shell/rpc_stream.py) would only ever send well-formed calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import cbor2

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.rpc import STREAM_PATH
from kraftpy.protocol.stream_frames import (
    EMPTY_FRAME,
    FRAME_HEADER_BYTES,
    MAX_RESPONSE_HEAD_BYTES,
    frame,
    split_response_head,
    upgrade_request,
)
from kraftpy.protocol.types import format_address


class UpgradeRefused(ConnectionError):
    """The server answered the upgrade with something other than 101."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the stream upgrade was answered {status}")
        self.status = status


class RawStream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]) -> None:
        self.reader = reader
        self.writer = writer
        self.headers = headers  # the 101 answer's, names lower-cased
        self.pings = 0  # pings the server sent (answered unless `answer_pings` is off)

    @classmethod
    async def open(
        cls, host: str, port: int, headers: Mapping[str, str] | None = None, *, timeout_s: float = 10.0
    ) -> RawStream:
        """Connect and upgrade within `timeout_s` (TimeoutError: a paused node accepts and never answers).

        ConnectionError for an answer that is not a 101 (UpgradeRefused) or not HTTP."""
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(upgrade_request(STREAM_PATH, {"Host": format_address(host, port), **(headers or {})}))
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                parsed = split_response_head(head[:MAX_RESPONSE_HEAD_BYTES])
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, KafkaError) as exc:
                writer.close()
                raise ConnectionError(f"no stream upgrade answer: {exc}") from None
            except BaseException:
                writer.close()
                raise
        assert parsed is not None
        status, answer_headers, _ = parsed
        if status != 101:
            writer.close()
            raise UpgradeRefused(status)
        return cls(reader, writer, answer_headers)

    def send_payload(self, payload: bytes) -> None:
        self.writer.write(frame(payload))

    def send_bytes(self, data: bytes) -> None:
        """Raw bytes, framed or not."""
        self.writer.write(data)

    def send_call(self, call_id: Any, path: Any, body: Any) -> None:
        self.send_payload(cbor2.dumps({"id": call_id, "path": path, "body": body}))

    async def receive(self, timeout_s: float, *, answer_pings: bool = True) -> dict[str, Any] | None:
        """The next answer (decoded), or None when the server closed the stream."""
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    size = int.from_bytes(await self.reader.readexactly(FRAME_HEADER_BYTES), "big")
                    payload = await self.reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return None
                if payload:
                    return cbor2.loads(payload)
                self.pings += 1
                if answer_pings:
                    self.writer.write(EMPTY_FRAME)

    async def close(self) -> None:
        """Close, and abort after a second if the bytes written cannot leave (an isolated node)."""
        self.writer.close()
        try:
            async with asyncio.timeout(1.0):
                await self.writer.wait_closed()
        except (TimeoutError, ConnectionError):
            self.writer.transport.abort()
