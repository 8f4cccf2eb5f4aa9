"""The client's calls by address over Kafka connections: one connection per broker, opened on demand.

`call(address, path, body)` takes a core's request (named `/kafka/<handler>`,
docs/handlers.md), builds the Kafka request at the version negotiated with that
broker, and returns the answer in the shape the core reads (client/wire/routes.py).
A failed connection is dialled again only after the reconnect backoff
(client/wire/reconnect.py). The cluster client's only transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping
from typing import Any

from kraftpy.client.shell.kafka_connection import KafkaConnection
from kraftpy.client.wire.reconnect import ReconnectBackoff
from kraftpy.client.wire.routes import route_for
from kraftpy.client.wire.versions import version_for
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import format_address

Address = tuple[str, int]


class KafkaTransport:
    def __init__(
        self,
        *,
        request_timeout_ms: int = 30_000,
        client_id: str | None = None,
        max_in_flight: int = 5,
        connect_timeout_ms: int = 10_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1_000,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect = ReconnectBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms, random.Random())
        self._connections: dict[Address, KafkaConnection] = {}
        self._connecting: dict[Address, asyncio.Task[KafkaConnection]] = {}
        self._closed = False

    async def connection(self, address: Address, timeout_ms: int) -> KafkaConnection:
        """The open connection to `address`, dialling it (once, for every caller waiting) if needed."""
        if self._closed:
            raise KafkaError("the client is closed", ErrorCode.NETWORK_EXCEPTION)
        conn = self._connections.get(address)
        if conn is not None and conn.usable:
            return conn
        task = self._connecting.get(address)
        if task is None:
            wait_ms = self.reconnect.wait_ms(address, monotonic_ms())
            if wait_ms > 0:
                raise KafkaError(
                    f"connection to {format_address(*address)} failed recently; next attempt in {wait_ms} ms",
                    ErrorCode.NETWORK_EXCEPTION,
                )
            task = asyncio.get_running_loop().create_task(self._open(address, timeout_ms))
            self._connecting[address] = task
            task.add_done_callback(lambda _t, a=address: self._connecting.pop(a, None))
        return await asyncio.shield(task)

    async def _open(self, address: Address, timeout_ms: int) -> KafkaConnection:
        old = self._connections.pop(address, None)
        if old is not None:
            await old.close()
        conn = KafkaConnection(
            address,
            client_id=self.client_id,
            max_in_flight=self.max_in_flight,
            connect_timeout_ms=self.connect_timeout_ms,
        )
        try:
            await conn.open(timeout_ms)
        except KafkaError:
            self.reconnect.failed(address, monotonic_ms())
            raise
        self.reconnect.connected(address)
        self._connections[address] = conn
        return conn

    async def api_versions(self, address: Address, timeout_ms: int | None = None) -> dict[int, int]:
        """{api_key: version} negotiated with `address` (dialling it if needed): which APIs it serves."""
        conn = await self.connection(address, self.request_timeout_ms if timeout_ms is None else timeout_ms)
        return dict(conn.versions)

    async def call(
        self,
        address: Address,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_ms: int | None = None,
        raise_errors: bool = True,
    ) -> dict[str, Any]:
        """One request to `address`; the answer in the core's shape. KafkaError on no answer.

        With `raise_errors`, an answer whose top-level error_code is not 0 raises it (as the RPC client did)."""
        answer = await self._exchange(address, path, body, timeout_ms, expect_response=True)
        assert answer is not None
        if raise_errors and answer.get("error_code", 0) != 0:
            raise KafkaError.from_dict(answer)
        return answer

    async def send(
        self, address: Address, path: str, body: Mapping[str, Any], *, timeout_ms: int | None = None
    ) -> None:
        """A request Kafka does not answer (Produce with acks=0): returns once it is written."""
        await self._exchange(address, path, body, timeout_ms, expect_response=False)

    async def _exchange(
        self, address: Address, path: str, body: Mapping[str, Any], timeout_ms: int | None, *, expect_response: bool
    ) -> dict[str, Any] | None:
        route = route_for(path)
        if route is None:
            raise KafkaError(f"{path} has no Kafka API", ErrorCode.UNSUPPORTED_VERSION)
        total_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = monotonic_ms() + total_ms
        conn = await self.connection(address, total_ms)
        version = version_for(conn.versions, route.api_key, conn.where)
        message = route.build(body, version)
        remaining = max(1, deadline - monotonic_ms())
        response = await conn.request(route.api_key, version, message, remaining, expect_response=expect_response)
        return None if response is None else route.read(response, version)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        connections, self._connections = self._connections, {}
        for conn in connections.values():
            await conn.close()
