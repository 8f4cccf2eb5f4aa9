"""One Kafka connection to one broker: size-prefixed frames, correlation ids, pipelined requests.

On open, ApiVersions (v3, or the version a KIP-511 answer names) learns the
broker's ranges and `versions` keeps, per API, the highest version both sides
speak (client/wire/versions.py decides). Up to `max_in_flight` requests wait
for answers at once (max.in.flight.requests.per.connection); Kafka answers a
connection's requests in order, and each answer is matched by its correlation
id. A request that gets no answer within its timeout closes the connection,
as Kafka's NetworkClient does, failing every request still on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import struct
from typing import Any

from kraftpy.client.wire.versions import (
    API_VERSIONS_FIRST,
    negotiate,
    retry_api_versions_at,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import API_VERSIONS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_request, message_classes
from kraftpy.protocol.types import format_address

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
CLIENT_SOFTWARE_NAME = "kraftpy"
CLIENT_SOFTWARE_VERSION = "0.1"
# The largest answer frame read: a fetch answer is bounded by fetch_max_bytes (50 MiB by default);
# this leaves room for the partitions' headers and for a fetch of several max-size batches.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class KafkaConnection:
    def __init__(
        self,
        address: tuple[str, int],
        *,
        client_id: str | None,
        max_in_flight: int = 5,
        connect_timeout_ms: int = 10_000,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.address = address
        self.where = format_address(*address)
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self.max_response_bytes = max_response_bytes
        self.versions: dict[int, int] = {}
        self._free_slots = max_in_flight
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[RequestHeader, asyncio.Future[Any]]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self.closed_error: KafkaError | None = None

    @property
    def usable(self) -> bool:
        return self._writer is not None and self.closed_error is None

    async def open(self, timeout_ms: int) -> None:
        """Connect and negotiate versions; KafkaError NETWORK_EXCEPTION (or the broker's) on failure."""
        host, port = self.address
        try:
            async with asyncio.timeout(min(timeout_ms, self.connect_timeout_ms) / 1000):
                self._reader, self._writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise KafkaError(
                f"connection to {self.where} failed: {exc or 'timed out'}", ErrorCode.NETWORK_EXCEPTION
            ) from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"kafka-read-{self.where}")
        try:
            await self._negotiate(timeout_ms)
        except BaseException:
            await self.close()
            raise

    async def _negotiate(self, timeout_ms: int) -> None:
        request_cls = message_classes(API_VERSIONS)[0]
        version = API_VERSIONS_FIRST
        for _ in range(2):
            request = request_cls(
                client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
            )
            response = await self.request(API_VERSIONS, version, request, timeout_ms)
            entries = [(a.api_key, a.min_version, a.max_version) for a in response.api_keys or []]
            if response.error_code == 0:
                self.versions = negotiate(entries)
                return
            retry = retry_api_versions_at(response.error_code, entries)
            if retry is None or retry >= version:
                break
            version = retry
        raise KafkaError(
            f"{self.where} refused ApiVersions (error {response.error_code})", ErrorCode.UNSUPPORTED_VERSION
        )

    async def request(
        self, api_key: int, version: int, message: Any, timeout_ms: int, *, expect_response: bool = True
    ) -> Any:
        """Send one request and wait (at most `timeout_ms`) for its answer; None when none is expected."""
        if not self.usable:
            raise self.closed_error or KafkaError(f"connection to {self.where} is closed", ErrorCode.NETWORK_EXCEPTION)
        header = RequestHeader(api_key, version, next(self._ids) & 0x7FFFFFFF, self.client_id)
        frame = encode_request(header, message)
        await self._take_slot(timeout_ms)
        future: asyncio.Future[Any] | None = None
        written = False
        try:
            if not self.usable:
                raise self.closed_error or KafkaError(
                    f"connection to {self.where} is closed", ErrorCode.NETWORK_EXCEPTION
                )
            if expect_response:
                future = asyncio.get_running_loop().create_future()
                self._pending[header.correlation_id] = (header, future)
            assert self._writer is not None
            self._writer.write(frame)
            written = True
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    await self._writer.drain()
                    if future is None:
                        return None
                    return await future
            except TimeoutError:
                error = KafkaError(
                    f"request to {self.where} timed out after {timeout_ms} ms", ErrorCode.REQUEST_TIMED_OUT
                )
                self._fail(
                    KafkaError(f"connection to {self.where} closed: {error.message}", ErrorCode.NETWORK_EXCEPTION)
                )
                raise error from None
            except (ConnectionError, OSError) as exc:
                error = KafkaError(f"connection to {self.where} failed: {exc}", ErrorCode.NETWORK_EXCEPTION)
                self._fail(error)
                raise error from None
        finally:
            # A written request's entry stays until its answer is read (or the connection fails):
            # a caller that gave up (cancelled) must not leave an answer the reader cannot place.
            if not written:
                self._pending.pop(header.correlation_id, None)
            self._give_slot()

    async def _take_slot(self, timeout_ms: int) -> None:
        """An in-flight slot, strictly first come first served: requests are written in call order
        (an idempotent producer's batches must reach the broker in sequence order)."""
        if self._free_slots > 0 and not self._slot_waiters:
            self._free_slots -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(turn)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():
                self._give_slot()  # handed a slot just as we gave up: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._slot_waiters.remove(turn)
            if isinstance(exc, TimeoutError):
                raise KafkaError(
                    f"request to {self.where} waited {timeout_ms} ms for a free in-flight slot",
                    ErrorCode.REQUEST_TIMED_OUT,
                ) from None
            raise

    def _give_slot(self) -> None:
        """Hand the slot to the first waiter (a newcomer cannot overtake it), else free it."""
        while self._slot_waiters:
            turn = self._slot_waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free_slots += 1

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))
                if not 0 < size <= self.max_response_bytes:
                    raise KafkaError(f"{self.where} sent a frame of {size} bytes", ErrorCode.CORRUPT_MESSAGE)
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    raise KafkaError(
                        f"{self.where} answered correlation id {correlation_id}, which no request has",
                        ErrorCode.CORRUPT_MESSAGE,
                    )
                header, future = entry
                if future.done():
                    continue
                try:
                    _, body = decode_response(header, frame)
                except KafkaError as exc:
                    future.set_exception(exc)
                    continue
                future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(KafkaError(f"connection to {self.where} lost: {exc!r}", ErrorCode.NETWORK_EXCEPTION))
        except KafkaError as exc:
            log.warning("closing the connection to %s: %s", self.where, exc.message)
            self._fail(KafkaError(f"connection to {self.where} closed: {exc.message}", ErrorCode.NETWORK_EXCEPTION))

    def _fail(self, error: KafkaError) -> None:
        """Close the connection and fail every request waiting on it with `error`."""
        if self.closed_error is None:
            self.closed_error = error
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()

    async def close(self) -> None:
        self._fail(KafkaError(f"connection to {self.where} closed", ErrorCode.NETWORK_EXCEPTION))
        if self._read_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
