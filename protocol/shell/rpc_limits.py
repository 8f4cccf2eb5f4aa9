"""Resource bounds of a node's listener: connections, idle time, stream backlog, body decoding.

Design notes: docs/protocol.md, section "protocol/shell/rpc_limits.py".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError

# Below this size a body is counted and decoded inline: at most this many items, a few ms.
INLINE_DECODE_BYTES = 16 * 1024
# Descriptors kept for the node's own files (segments, indexes, LMDB, the quorum-state, peers).
RESERVED_FDS = 256

_COUNT_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rpc-body-count")


@dataclass(frozen=True)
class ListenerLimits:
    """Kafka's max.connections and connections.max.idle.ms, and the stream and body bounds."""

    max_connections: int = 1000
    connections_max_idle_ms: int = 600_000
    stream_max_in_flight_calls: int = 64
    stream_max_queued_answer_bytes: int = 16 * 1024 * 1024
    # A stream quiet this long is pinged, and closed when nothing comes back within half of it (half-open).
    stream_heartbeat_ms: int = 30_000
    max_body_items: int = 200_000
    # Bytes of large requests held at once over all connections (stream frames and HTTP bodies over
    # INLINE_DECODE_BYTES, from their size on): the Kafka listeners' queued.max.request.bytes.
    queued_max_request_bytes: int = 256 * 1024 * 1024
    # Listeners of the process that share its descriptors (this one and its Kafka listeners).
    listeners_sharing_fds: int = 1

    def effective_max_connections(self) -> int:
        """`max_connections`, capped so the open connections leave RESERVED_FDS descriptors free."""
        return fd_capped_connections(self.max_connections, self.listeners_sharing_fds)


def cap_connections(max_connections: int, listeners: int, soft_fd_limit: int) -> int:
    """`max_connections` per listener, so `listeners` listeners all full leave RESERVED_FDS descriptors free."""
    return max(1, min(max_connections, (soft_fd_limit - RESERVED_FDS) // max(1, listeners)))


def fd_capped_connections(max_connections: int, listeners: int = 1) -> int:
    """cap_connections under this process's open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return cap_connections(max_connections, listeners, soft)


# ---- body decoding ---------------------------------------------------------------------------


def count_items(data: bytes, limit: int) -> int:
    """The number of CBOR data items in `data` (headers in pre-order), or limit + 1 once over it.

    Only the headers are read and string payloads skipped, so the cost is one step per item
    and the count stops at the limit; cbor2 checks the encoding itself when it decodes.
    """
    view = memoryview(data)
    pos, count, end = 0, 0, len(view)
    while pos < end:
        initial = view[pos]
        pos += 1
        major, info = initial >> 5, initial & 0x1F
        if info < 24:
            value = info
        elif info == 31:
            value = 0  # an indefinite length or a break: the items that follow count on their own
        elif info <= 27:
            width = 1 << (info - 24)
            value = int.from_bytes(view[pos : pos + width], "big")
            pos += width
        else:
            where = f"reserved header at byte {pos - 1}"
            raise KafkaError(f"request body is not valid CBOR ({where})", ErrorCode.INVALID_REQUEST)
        if major in (2, 3) and info != 31:
            pos += value
        count += 1
        if count > limit:
            return count
    return count


async def check_body_items(data: bytes, limit: int, what: str = "request") -> None:
    """INVALID_REQUEST if `data` holds more than `limit` CBOR items; large bodies counted off the loop."""
    if len(data) <= limit:
        return  # every CBOR item takes at least one byte: nothing to count
    if len(data) <= INLINE_DECODE_BYTES:
        count = count_items(data, limit)
    else:
        count = await asyncio.get_running_loop().run_in_executor(_COUNT_POOL, count_items, data, limit)
    if count > limit:
        raise KafkaError(
            f"{what} body has more than {limit} CBOR items ({len(data)} bytes); not decoded",
            ErrorCode.INVALID_REQUEST,
        )


# ---- connections -----------------------------------------------------------------------------


class _Refused(asyncio.Protocol):
    """A connection over the limit: closed as soon as it is accepted, freeing its descriptor."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()


class ConnectionLimiter:
    """The protocol factory of a listening socket: aiohttp's handler while under the limit.

    aiohttp's server counts a connection once it is set up, so a burst accepted in one loop
    turn may pass the limit by at most the listen backlog before the count catches up.
    """

    def __init__(self, server: web.Server, max_connections: int) -> None:
        self.server = server
        self.max_connections = max_connections
        self.refused = 0

    @property
    def open_connections(self) -> int:
        return len(self.server.connections)

    def __call__(self) -> asyncio.BaseProtocol:
        if self.open_connections >= self.max_connections:
            self.refused += 1
            return _Refused()
        return self.server()


class LimitedTCPSite(web.TCPSite):
    """aiohttp's TCPSite with a connection limit (and the idle timeout set on its runner)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limits: ListenerLimits, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.limits = limits
        self.limiter: ConnectionLimiter | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self.limiter = ConnectionLimiter(server, self.limits.effective_max_connections())
        self._server = await asyncio.get_running_loop().create_server(
            self.limiter, self._host, self._port, backlog=self._backlog, reuse_address=self._reuse_address
        )

    def status(self) -> dict[str, Any]:
        limiter = self.limiter
        if limiter is None:
            return {}
        return {
            "open_connections": limiter.open_connections,
            "max_connections": limiter.max_connections,
            "refused_connections": limiter.refused,
        }


# ---- streams ---------------------------------------------------------------------------------


class IdleTimer:
    """Calls `on_idle` once nothing has touched it for `idle_s`: one timer, re-armed when it fires
    early, so a touch per frame costs a clock read, not a timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_s: float, on_idle: Callable[[], object]) -> None:
        self._loop = loop
        self._idle_s = idle_s
        self._on_idle = on_idle
        self.last_touch = loop.time()
        self._handle: asyncio.TimerHandle | None = loop.call_at(self.last_touch + idle_s, self._check)

    def touch(self) -> None:
        self.last_touch = self._loop.time()

    def _check(self) -> None:
        due = self.last_touch + self._idle_s
        if self._loop.time() >= due:
            self._handle = None
            self._on_idle()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class StreamGate:
    """One stream connection's backlog: calls in flight and answer bytes not yet written.

    The stream starts its next call only when `room()` is true, and stops reading until an
    answer finishes. Pure bookkeeping.
    """

    def __init__(self, max_in_flight_calls: int, max_queued_answer_bytes: int) -> None:
        self.max_in_flight_calls = max_in_flight_calls
        self.max_queued_answer_bytes = max_queued_answer_bytes
        self.in_flight = 0
        self.queued_bytes = 0
        self.paused = 0  # how many times the stream stopped reading (a peer not keeping up)

    def room(self) -> bool:
        return self.in_flight < self.max_in_flight_calls and self.queued_bytes <= self.max_queued_answer_bytes

    def call_started(self) -> None:
        self.in_flight += 1

    def call_finished(self) -> None:
        self.in_flight -= 1

    def answer_queued(self, size_bytes: int) -> None:
        self.queued_bytes += size_bytes

    def answer_written(self, size_bytes: int) -> None:
        self.queued_bytes -= size_bytes
