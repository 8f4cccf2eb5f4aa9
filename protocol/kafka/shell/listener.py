"""A Kafka listener: size-prefixed request frames in, answers out in request order (plain asyncio streams).

One connection's requests are decoded as they arrive and handled side by
side, up to `max_in_flight_requests`; their answers are written in the order
the requests came. Frames are bounded (`socket_request_max_bytes`), so is the
memory all connections' unanswered frames hold (`queued_max_request_bytes`),
the memory their large answers hold until written (`queued_max_response_bytes`),
the number of connections and their idle time, reading or writing. A frame that does not decode
closes its connection (as Kafka does) and nothing else, unless the KafkaApis
answers it (KIP-511's too-new ApiVersions). Answers ready together go out in
one send. Notes: docs/kafka-listener.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, encode_response
from kraftpy.protocol.kafka.limits import KafkaListenerLimits, check_frame_size
from kraftpy.protocol.kafka.produce_shape import is_light_produce
from kraftpy.protocol.shell.answer_budget import AnswerAllowance, AnswerBudget
from kraftpy.protocol.shell.byte_budget import ByteBudget, budgeted_bytes
from kraftpy.protocol.shell.rpc_limits import fd_capped_connections

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# A handler's answer that closes the connection instead (Kafka's answer to a request it cannot serve).
CLOSE_CONNECTION: Any = object()


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows of a request besides its body: its header, the listener and the client."""

    header: RequestHeader
    listener_name: str
    client_host: str
    client_port: int
    # For the APIs in one_at_a_time_api_keys: the share of the listener's queued_max_response_bytes
    # the answer may hold (a Fetch reads no more than it grants). None for the others.
    answer_allowance: AnswerAllowance | None = None


class KafkaApis(Protocol):
    """The listener's one collaborator: answers decoded requests and the ones that did not decode."""

    # API keys whose answers may be large (Fetch: up to 32 MiB of records; Metadata of every topic).
    # A connection runs one request of each such API at a time: the next starts once the previous
    # one's answer is written to the socket.
    one_at_a_time_api_keys: frozenset[int]

    async def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        """The response to `request`: None when none is sent (Produce with acks=0), CLOSE_CONNECTION."""
        ...

    def answer_undecodable(self, error: KafkaError) -> tuple[RequestHeader, Any] | None:
        """A request that did not decode: its answer (the connection then goes on), or None to close it.

        Kafka answers only a too-new ApiVersions (KIP-511) and closes the connection on any other.
        """
        ...


class KafkaListener:
    """One listener (`PLAINTEXT://host:port`) serving `apis` until stopped."""

    def __init__(self, name: str, host: str, port: int, apis: KafkaApis, limits: KafkaListenerLimits) -> None:
        self.name = name
        self.host = host
        self.port = port  # the bound port once started (0 asks the kernel for one)
        self.apis = apis
        self.limits = limits
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._budget = ByteBudget(limits.queued_max_request_bytes)
        self.answer_budget = AnswerBudget(limits.queued_max_response_bytes)
        self._stopping = False
        # Decoding costs per element, about 6-25 µs each in kafka-python's decoders: a 100 MiB frame of
        # Metadata topics is half a minute of CPU. Frames over SMALL_FRAME_BYTES are decoded on this
        # thread, one at a time for the listener, so no request can stop the event loop (Raft,
        # replication, every other client) for longer than a small frame's decode. Produce requests of
        # a few partitions stay inline (produce_shape.py): the hop cost them a fifth of their rate.
        self._decoder: ThreadPoolExecutor | None = None
        self.frames_decoded_off_loop = 0
        self.max_connections = fd_capped_connections(limits.max_connections, limits.listeners_sharing_fds)
        self.connections_refused = 0
        self.connections_idle_closed = 0  # closed after connections_max_idle_ms with nothing in flight
        self.connections_unread_closed = 0  # closed after an answer waited connections_max_idle_ms to be read
        self.frames_refused = 0

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_address=True, limit=64 * 1024, start_serving=False
        )
        # Set on the bound socket before it listens: every accepted connection inherits both (and a
        # receive buffer set after the handshake would not change the window scale agreed in it).
        for sock in self._server.sockets:
            for option, size in (
                (socket.SO_SNDBUF, self.limits.socket_send_buffer_bytes),
                (socket.SO_RCVBUF, self.limits.socket_receive_buffer_bytes),
            ):
                if size != -1:
                    sock.setsockopt(socket.SOL_SOCKET, option, size)
        await self._server.start_serving()
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Kafka listener %s://%s:%d started", self.name, self.host, self.port)

    async def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._decoder is not None:
            self._decoder.shutdown(wait=False, cancel_futures=True)
            self._decoder = None

    async def decode(self, frame: bytes) -> tuple[RequestHeader, Any]:
        """A frame's header and request: small ones, and Produce requests of a few partitions however
        large their batches, here; the rest on the listener's decoder thread."""
        if not budgeted_bytes(len(frame)) or is_light_produce(frame):
            return decode_request(frame)
        if self._decoder is None:
            self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kafka-decode-{self.name}")
        self.frames_decoded_off_loop += 1
        return await asyncio.get_running_loop().run_in_executor(self._decoder, decode_request, frame)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            self.connections_refused += 1
            log.warning("Kafka listener %s: refusing a connection, %d open", self.name, len(self._connections))
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection = _Connection(self, reader, writer)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass
        finally:
            # Counted, and its answer's bytes held, until the socket is really closed.
            await self._close(writer, linger=not connection.unread)
            for slot in connection.large.values():
                slot.allowance.hold(0)
            self._connections.discard(task)

    async def _close(self, writer: asyncio.StreamWriter, linger: bool) -> None:
        """Close a connection. Answers still buffered go out if the client reads them within
        connections_max_idle_ms (`linger`); then, at once if not lingering or when the listener stops,
        the connection is aborted: a client that does not read holds neither it nor its answer."""
        try:
            writer.close()
            if linger and not self._stopping and writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.limits.connections_max_idle_ms / 1000):
                    await writer.wait_closed()
        except (Exception, asyncio.CancelledError):
            pass  # a timeout, a reset, or stop(): the connection is aborted
        finally:
            writer.transport.abort()  # after a finished close, a no-op


class _Connection:
    def __init__(self, listener: KafkaListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.listener = listener
        self.limits = listener.limits
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("", 0)
        self.client_host, self.client_port = str(peer[0]), int(peer[1])
        # Taken before a frame is read, given back once its answer is written (or dropped): at most
        # max_in_flight_requests requests of this connection are between reading and answering, and
        # the rest wait unread in the socket (backpressure on the client).
        self.slots = asyncio.Semaphore(self.limits.max_in_flight_requests)
        self.unanswered = 0
        # Requests in arrival order, each (header, its handler's answer to come, frame bytes held);
        # None marks the end. A deque and an event rather than an asyncio.Queue: the writer looks at
        # the head to write every answer already there in one send.
        self.answers: deque[tuple[RequestHeader, asyncio.Future[Any], int] | None] = deque()
        self.answers_added = asyncio.Event()
        # Kafka reads one request of a connection at a time, so a client holds at most one answer in
        # the broker's memory. Here requests run side by side, and a client that pipelined Fetch (or
        # all-topics Metadata) requests and never read would make the broker hold up to
        # max_in_flight_requests such answers. Clients do not pipeline those on one connection, so
        # each such API runs one at a time per connection, in a slot of its own (a Metadata request
        # never waits for a Fetch long poll) with what its answer holds of queued_max_response_bytes.
        self.large = {
            key: _LargeAnswerSlot(listener.answer_budget.allowance()) for key in listener.apis.one_at_a_time_api_keys
        }
        self._large_in_out: list[_LargeAnswerSlot] = []
        self.unread = False  # an answer waited connections_max_idle_ms to be read: the connection ends

    async def serve(self) -> None:
        reading = asyncio.create_task(self._read_loop())
        writing = asyncio.create_task(self._write_loop())
        try:
            done, _ = await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
            if reading in done and not writing.done() and reading.exception() is None:
                # Requests read before the client left, or before a bad frame, are still answered in
                # order (an acks=0 produce has nobody waiting, but its records count), within a bound.
                self._put(None)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.limits.connections_max_idle_ms / 1000):
                        await asyncio.wait({writing})
        finally:
            for task in (reading, writing):
                task.cancel()
            outcomes = await asyncio.gather(reading, writing, return_exceptions=True)
            while self.answers:
                item = self.answers.popleft()
                if item is not None:
                    _header, pending, size = item
                    if isinstance(pending, asyncio.Future):
                        pending.cancel()
                    if size:
                        self.listener._budget.release(size)
            for outcome in outcomes:
                # A client that went away is no news; anything else is a bug in a handler or here.
                if isinstance(outcome, Exception) and not isinstance(outcome, ConnectionError):
                    log.error(
                        "Kafka listener %s: closing the connection from %s:%d after an unexpected error",
                        self.listener.name,
                        self.client_host,
                        self.client_port,
                        exc_info=outcome,
                    )

    async def _read_loop(self) -> None:
        idle_s = self.limits.connections_max_idle_ms / 1000
        while True:
            await self.slots.acquire()
            try:
                head = await self._read_head(idle_s)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if head is None:
                self.listener.connections_idle_closed += 1
                log.debug("closing idle Kafka connection from %s:%d", self.client_host, self.client_port)
                return
            (size,) = _SIZE.unpack(head)
            try:
                check_frame_size(size, self.limits.socket_request_max_bytes)
            except KafkaError as exc:
                self._refuse(exc)
                return
            held = budgeted_bytes(size)
            if held:
                await self.listener._budget.acquire(held)
            handed_on = False  # the frame's bytes now travel with its request, freed once it is answered
            try:
                try:
                    async with asyncio.timeout(idle_s):
                        frame = await self.reader.readexactly(size)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                try:
                    header, request = await self.listener.decode(frame)
                except KafkaError as exc:
                    answer = self.listener.apis.answer_undecodable(exc)
                    if answer is None:
                        self._refuse(exc)
                        return
                    # Answered (KIP-511's ApiVersions fallback): the frame was whole, the connection goes on.
                    self._enqueue(answer[0], _ready(answer[1]), 0)
                    continue
                del frame
                slot = self.large.get(header.api_key)
                if slot is not None:
                    # Bounded: the answer before it is written within connections_max_idle_ms or the
                    # connection ends (_flush).
                    await slot.done.wait()
                    slot.done.clear()
                ctx = RequestContext(
                    header,
                    self.listener.name,
                    self.client_host,
                    self.client_port,
                    slot.allowance if slot is not None else None,
                )
                # Created in arrival order, the handlers start in arrival order: a producer's batches reach
                # the log in the order it sent them.
                self._enqueue(header, asyncio.ensure_future(self.listener.apis.handle(ctx, request)), held)
                handed_on = True
            finally:
                if held and not handed_on:
                    self.listener._budget.release(held)

    async def _read_head(self, idle_s: float) -> bytes | None:
        """The next size prefix; None when the connection was idle for idle_s with nothing in flight."""
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    return await self.reader.readexactly(_SIZE.size)
            except TimeoutError:
                if not self.unanswered:
                    return None
                # A long poll or a join is in flight: the connection is not idle.

    def _enqueue(self, header: RequestHeader, pending: asyncio.Future[Any], size: int) -> None:
        self.unanswered += 1
        self._put((header, pending, size))

    def _put(self, item: tuple[RequestHeader, asyncio.Future[Any], int] | None) -> None:
        self.answers.append(item)
        self.answers_added.set()

    async def _next_answer(self) -> tuple[RequestHeader, asyncio.Future[Any], int] | None:
        while not self.answers:
            self.answers_added.clear()
            await self.answers_added.wait()
        return self.answers.popleft()

    def _head_ready(self) -> bool:
        """True when the next answer can be had without waiting (so it may share a send)."""
        return bool(self.answers) and (self.answers[0] is None or self.answers[0][1].done())

    def _refuse(self, error: KafkaError) -> None:
        self.listener.frames_refused += 1
        log.info(
            "Kafka listener %s: closing the connection from %s:%d: %s (%s)",
            self.listener.name,
            self.client_host,
            self.client_port,
            error.message,
            error.code.name,
        )

    async def _write_loop(self) -> None:
        # Answers already there when one is written go out with it in one send (a pipelining client
        # gets several per syscall); one still being worked on never holds back those before it.
        out: list[bytes] = []
        try:
            while True:
                if out and not self._head_ready():
                    await self._flush(out)
                item = await self._next_answer()
                if item is None:
                    return
                header, pending, size = item
                try:
                    try:
                        response = await pending
                    finally:
                        if size:
                            self.listener._budget.release(size)
                    if response is CLOSE_CONNECTION:
                        return
                    slot = self.large.get(header.api_key)
                    if response is not None:  # None: Produce with acks=0, Kafka sends nothing
                        frame = encode_response(header, response)
                        out.append(frame)
                        if slot is not None:
                            self._large_in_out.append(slot)
                            slot.allowance.hold(len(frame))  # the frame is what stays until written
                    elif slot is not None:
                        slot.written()
                finally:
                    self.unanswered -= 1
                    self.slots.release()
        finally:
            if out and not self.writer.is_closing():
                # What was answered before the end (or a CLOSE_CONNECTION) is still sent: buffered,
                # and written out by the transport as it closes (no drain: a client that does not
                # read must not hold the connection's end).
                self.writer.write(b"".join(out))

    async def _flush(self, out: list[bytes]) -> None:
        self.writer.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
        try:
            if not self.writer.transport.get_write_buffer_size():
                await self.writer.drain()  # all in the kernel already: it waits for nothing
            else:
                # A client that reads nothing for connections_max_idle_ms is gone as far as Kafka is
                # concerned (its idle clock counts writes too); here it would hold its answer for good.
                async with asyncio.timeout(self.limits.connections_max_idle_ms / 1000):
                    await self.writer.drain()
        except TimeoutError:
            self.unread = True
            self.listener.connections_unread_closed += 1
            log.info(
                "Kafka listener %s: closing the connection from %s:%d: it read no answer for %d ms",
                self.listener.name,
                self.client_host,
                self.client_port,
                self.limits.connections_max_idle_ms,
            )
            raise ConnectionAbortedError("the client reads no answers") from None
        # Drained: what is left in memory is under the transport's high-water mark; the next may start.
        for slot in self._large_in_out:
            slot.written()
        self._large_in_out.clear()


class _LargeAnswerSlot:
    """A connection's one request of an API in one_at_a_time_api_keys: `done` is set while none is
    between its start and its answer in the socket; `allowance` is what that answer holds."""

    __slots__ = ("allowance", "done")

    def __init__(self, allowance: AnswerAllowance) -> None:
        self.allowance = allowance
        self.done = asyncio.Event()
        self.done.set()

    def written(self) -> None:
        self.allowance.hold(0)
        self.done.set()


def _ready(value: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


Dispatch = Callable[[RequestContext, Any], Awaitable[Any]]
