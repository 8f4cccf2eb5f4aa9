"""The asyncio side of the metadata cache: one transport, a refresh task, and calls by address.

The transport is Kafka's protocol (client/shell/kafka_transport.py).
The Metadata core decides when a refresh is due and whom to ask; this shell
does the asking (Metadata to the first candidate that answers),
wakes up early when someone calls `request_update`, and lets callers wait
for the next snapshot. Producer, consumer and admin client each own one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.client.errors import malformed
from kraftpy.client.metadata import Address, Metadata
from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms

log = logging.getLogger(__name__)

METADATA_PATH = "/kafka/metadata"


async def wait_event(event: asyncio.Event, timeout_ms: float | None) -> bool:
    """Wait for `event` at most `timeout_ms` (None: no bound); False on timeout.

    asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
    cancellation that arrives as the inner wait completes, and a background
    loop that misses its cancellation never stops.
    """
    try:
        async with asyncio.timeout(None if timeout_ms is None else max(0.0, timeout_ms) / 1000):
            await event.wait()
    except TimeoutError:
        return False
    return True


class ClusterClient:
    def __init__(
        self,
        metadata: Metadata,
        *,
        request_timeout_ms: int = 30_000,
        client_id: str | None = None,
        max_in_flight: int = 5,
    ) -> None:
        self.metadata = metadata
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.rpc = KafkaTransport(
            request_timeout_ms=request_timeout_ms, client_id=client_id, max_in_flight=max_in_flight
        )
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._failing = False
        self.last_error: KafkaError | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="kraftpy-metadata")

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called after every successful refresh (the sender wakes up to use new leaders)."""
        self._listeners.append(listener)

    def request_update(self) -> int:
        version = self.metadata.request_update()
        self._wake.set()
        return version

    def wake(self) -> None:
        """A core may have asked for a refresh (metadata.request_update); look at it now."""
        self._wake.set()

    async def wait_for_version(self, version: int, timeout_ms: float) -> bool:
        """Wait until a snapshot newer than `version` is in place; False on timeout."""
        deadline = monotonic_ms() + timeout_ms
        while self.metadata.update_version <= version:
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                return False
            if not await wait_event(self._changed, remaining):
                return False
        return True

    async def refresh_now(self, timeout_ms: float | None = None) -> bool:
        version = self.request_update()
        return await self.wait_for_version(version, self.request_timeout_ms if timeout_ms is None else timeout_ms)

    async def _refresh_loop(self) -> None:
        while not self._closing:
            self._wake.clear()
            delay = self.metadata.time_to_next_update(monotonic_ms())
            if delay > 0:
                await wait_event(self._wake, delay)
                continue
            await self._refresh_once()

    async def _refresh_once(self) -> None:
        body = self.metadata.request_body()
        for address in self.metadata.candidates(monotonic_ms()):
            try:
                answer = await self.rpc.call(address, METADATA_PATH, body, timeout_ms=self.request_timeout_ms)
                try:
                    self.metadata.update(answer, monotonic_ms())
                except (TypeError, ValueError, AttributeError) as exc:  # a malformed answer: ask someone else
                    raise malformed("metadata", repr(exc)) from None
            except KafkaError as exc:
                log.debug("metadata from %s:%d failed: %s", *address, exc)
                self.metadata.node_failed(address, monotonic_ms())
                self.last_error = exc
                continue
            self.metadata.node_succeeded(address)
            self.last_error = None
            self._failing = False
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()
            for listener in self._listeners:
                listener()
            return
        # Warn once per outage; the retries that follow (with backoff) log at debug.
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "no server answered a metadata request (last error: %s)", self.last_error)
        self._failing = True
        self.metadata.failed_update(monotonic_ms())

    async def call(
        self,
        address: Address,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_ms: int | None = None,
        raise_errors: bool = True,
    ) -> dict[str, Any]:
        return await self.rpc.call(address, path, body, timeout_ms=timeout_ms, raise_errors=raise_errors)

    async def api_versions(self, address: Address, *, timeout_ms: int | None = None) -> dict[int, int]:
        """The API versions negotiated with `address` (ApiVersions on connecting): what it serves."""
        return await self.rpc.api_versions(address, timeout_ms)

    async def exchange(
        self,
        address: Address | None,
        path: str,
        body: Mapping[str, Any],
        on_response: Callable[[dict[str, Any], int], None],
        on_failure: Callable[[KafkaError, int], None],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """One request whose outcome a core takes (with `now_ms`): the answer, or the error if none came.

        An answer the core cannot read (TypeError, ValueError, AttributeError) counts as none: a hostile or
        broken broker costs a retry, never the task. `address` None: the first candidate that answers."""
        try:
            if address is None:
                answer = await self.call_any(path, body, timeout_ms=timeout_ms)
            else:
                answer = await self.call(address, path, body, timeout_ms=timeout_ms, raise_errors=False)
        except KafkaError as exc:
            on_failure(exc, monotonic_ms())
            return
        try:
            on_response(answer, monotonic_ms())
        except (TypeError, ValueError, AttributeError) as exc:
            log.warning("malformed %s answer from %s: %r", path, address or "a bootstrap server", exc)
            on_failure(malformed(path, repr(exc)), monotonic_ms())

    async def send(
        self, address: Address, path: str, body: Mapping[str, Any], *, timeout_ms: int | None = None
    ) -> None:
        """Write a call whose answer nobody waits for (acks=0); returns once it is written."""
        await self.rpc.send(address, path, body, timeout_ms=timeout_ms)

    async def call_any(self, path: str, body: Mapping[str, Any], *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Call the first candidate that answers (known brokers, then bootstrap servers)."""
        last: KafkaError | None = None
        for address in self.metadata.candidates(monotonic_ms()):
            try:
                answer = await self.rpc.call(address, path, body, timeout_ms=timeout_ms)
            except KafkaError as exc:
                if exc.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    raise
                self.metadata.node_failed(address, monotonic_ms())
                last = exc
                continue
            self.metadata.node_succeeded(address)
            return answer
        raise last or KafkaError("no server to call", ErrorCode.NETWORK_EXCEPTION)

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.rpc.close()
