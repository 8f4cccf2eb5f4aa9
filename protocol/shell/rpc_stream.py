"""The RPC stream's two ends: a peer's one connection, size-prefixed CBOR frames after an HTTP upgrade.

Design notes: docs/protocol.md, section "protocol/shell/rpc_stream.py".
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.byte_budget import ByteBudget, budgeted_bytes
from kraftpy.protocol.shell.rpc_calls import (
    Handler,
    InlineHandler,
    answer_body,
    decode_map,
    encode,
    internal_error,
    run_handler,
)
from kraftpy.protocol.shell.rpc_limits import (
    INLINE_DECODE_BYTES,
    IdleTimer,
    ListenerLimits,
    StreamGate,
    check_body_items,
)
from kraftpy.protocol.stream_frames import EMPTY_FRAME, FrameSplitter, frame, split_response_head, upgrade_request

log = logging.getLogger(__name__)


Call = tuple[Handler, dict[str, Any]]


def _read_call(routes: Mapping[str, Handler], data: bytes | KafkaError) -> tuple[int, Call | KafkaError]:
    """A frame's call id and its handler and body, or the error to answer it with. A frame too
    broken to name its call is answered under -1 (no caller waits on it). Small frames need no
    item count: every CBOR item takes a byte, so they hold fewer items than max_body_items."""
    if isinstance(data, KafkaError):
        return -1, data
    try:
        call = decode_map(data, "stream frame")
    except KafkaError as err:
        return -1, err
    call_id = call.get("id")
    if not isinstance(call_id, int):
        return -1, KafkaError("stream frame needs an integer id", ErrorCode.INVALID_REQUEST)
    handler = routes.get(call.get("path"))  # type: ignore[arg-type]
    if handler is None:
        return call_id, KafkaError(f"unknown request {call.get('path')!r}", ErrorCode.INVALID_REQUEST)
    body = call.get("body")
    if not isinstance(body, dict):
        return call_id, KafkaError("request body must be a CBOR map", ErrorCode.INVALID_REQUEST)
    return call_id, (handler, body)


class ServedStream:
    """The server end of one peer's stream, fed the connection's bytes after the upgrade.

    It is the aiohttp connection's payload parser (`feed_data`, `feed_eof`), so frames are cut and
    their calls started as the bytes are read, in the order they arrive. A frame over
    INLINE_DECODE_BYTES has its CBOR items counted off the loop first, and the frames behind it
    wait (reading stops meanwhile). Bounded (StreamGate): while the calls in flight or the answer
    bytes not yet written are over their bounds, no call starts and nothing is read (TCP
    backpressure slows the peer). A stream without a call for connections_max_idle_ms is closed,
    and so is one quiet for stream_heartbeat_ms that answers no ping within half of it.

    A frame over SMALL_FRAME_BYTES holds its size in the listener's ByteBudget from the moment
    its header is read until its call ends; when the budget is spent, the connection reads nothing
    more until bytes are freed, so many connections each sending part of a large frame hold at
    most queued_max_request_bytes between them.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        protocol: Any,
        writer: Any,
        routes: Mapping[str, Handler],
        limits: ListenerLimits,
        max_frame_bytes: int,
        context: contextvars.Context,
        budget: ByteBudget,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._protocol = protocol  # aiohttp's: told when the transport's write buffer is over its mark
        self._writer = writer  # aiohttp's: drain() waits until it is below
        self._routes = routes
        self._max_body_items = limits.max_body_items
        self._context = context  # the upgrade's (rpc_auth's caller); each call task runs in a copy
        self._splitter = FrameSplitter(max_frame_bytes)
        self._budget = budget  # the listener's, for frames over SMALL_FRAME_BYTES (queued_max_request_bytes)
        self._pending_held = 0  # bytes held for the frame being read, from its header on
        self._awaiting_budget = False  # that frame waits for bytes to be freed: nothing is read meanwhile
        self.gate = StreamGate(limits.stream_max_in_flight_calls, limits.stream_max_queued_answer_bytes)
        self._idle = IdleTimer(self._loop, limits.connections_max_idle_ms / 1000, lambda: self.close("idle stream"))
        self._backlog: deque[bytes] = deque()  # frames read, not yet started
        self._counting = False  # a large frame's items are being counted off the loop
        self._reading_paused = False
        self._starting = False  # inside _start_calls: an inline answer leaves the room check to it
        self._draining = False  # a task waits for the transport to drain inline answers
        self._undrained_bytes = 0  # inline answers written while the transport was over its mark
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_frame_s = self._loop.time()
        self._ping_sent_s: float | None = None
        self._heartbeat_s = limits.stream_heartbeat_ms / 1000
        self._heartbeat = self._loop.call_later(self._heartbeat_s / 2, self._check_heartbeat)
        self.closed = False
        self.ended: asyncio.Future[None] = self._loop.create_future()

    # aiohttp's payload parser interface -----------------------------------------------------------

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        try:
            payloads = self._splitter.feed(data)
        except KafkaError as err:
            self._refuse(err)
            return False, b""
        if payloads:
            self._last_frame_s = self._loop.time()
            for i, payload in enumerate(payloads):
                if budgeted_bytes(len(payload)):
                    if i == 0 and self._pending_held:
                        self._pending_held = 0  # the frame held from its header on: its call holds it now
                    else:
                        self._budget.add(len(payload))  # arrived whole in one read: already in memory
            self._backlog.extend(payloads)
        self._hold_pending()
        if payloads:
            self._start_calls()
        return False, b""

    def _hold_pending(self) -> None:
        """Hold the budget for a large frame whose header has come, or stop reading until it can."""
        pending = self._splitter.pending_frame_bytes
        if pending is None or not budgeted_bytes(pending) or self._pending_held or self._awaiting_budget:
            return
        if self._budget.try_acquire(pending):
            self._pending_held = pending
            return
        self._awaiting_budget = True
        self._pause_reading()
        self._spawn(self._wait_for_budget(pending))

    async def _wait_for_budget(self, size: int) -> None:
        await self._budget.acquire(size)
        self._awaiting_budget = False
        if self.closed:
            self._budget.release(size)
            return
        self._pending_held = size
        self._start_calls()  # reads on unless calls wait for room

    def feed_eof(self) -> None:
        """The connection is gone: calls already read still start (a handler changes state before its
        first await: a marker write appends before it waits for acks, as Kafka handles the requests
        it read before a disconnect); what they wait for after that is cancelled."""
        if self.closed and self.ended.done():
            return
        self.closed = True
        self._idle.cancel()
        self._heartbeat.cancel()
        if self._pending_held:
            self._budget.release(self._pending_held)  # the frame will never be whole
            self._pending_held = 0
        self._start_calls()
        if not self._counting:
            self._loop.call_soon(self._cancel_calls)

    # calls ----------------------------------------------------------------------------------------

    def _start_calls(self) -> None:
        """Start the backlog's calls in order while there is room (all of them once the peer is gone);
        read on only when nothing read waits to start."""
        backlog = self._backlog
        starting, self._starting = self._starting, True
        try:
            self._start_backlog()
        finally:
            self._starting = starting
        if self.closed:
            return
        if backlog or self._counting:
            self._pause_reading()
        else:
            self._resume_reading()

    def _start_backlog(self) -> None:
        backlog = self._backlog
        while backlog and not self._counting:
            if not self.closed and not self.gate.room():
                break
            payload = backlog.popleft()
            if not payload:
                continue  # a pong (or a client's ping, which needs no answer): the stream is alive
            self._idle.touch()
            if len(payload) > INLINE_DECODE_BYTES:
                self._counting = True
                self._spawn(self._count_then_start(payload))
                break
            self._start(payload, 0)

    async def _count_then_start(self, payload: bytes) -> None:
        data: bytes | KafkaError = payload
        try:
            await check_body_items(payload, self._max_body_items, "stream frame")  # off the loop
        except KafkaError as err:
            data = err
        except BaseException:
            self._budget.release(len(payload))  # never handed to a call
            raise
        finally:
            self._counting = False
        self._start(data, len(payload))
        self._start_calls()
        if self.closed and not self._counting:
            self._loop.call_soon(self._cancel_calls)

    def _start(self, data: bytes | KafkaError, held_bytes: int) -> None:
        self.gate.call_started()
        call_id, call = _read_call(self._routes, data)
        inline = None if isinstance(call, KafkaError) else getattr(call[0], "inline", None)
        if inline is None:
            self._spawn(self._answer(call_id, call, held_bytes))
            return
        # An answer made while the handler runs leaves the backlog to whoever called _start: started
        # from there, the next inline call would enter this stream's context a second time.
        starting, self._starting = self._starting, True
        try:
            self._context.run(self._start_inline, inline, call_id, call[1], held_bytes)  # type: ignore[index]
        finally:
            self._starting = starting

    def _start_inline(self, inline: InlineHandler, call_id: int, body: dict[str, Any], held_bytes: int) -> None:
        """Run an inline handler now, in this read; its Reply writes the answer whenever it comes."""
        replied = False

        def reply(out: Mapping[str, Any] | KafkaError) -> None:
            nonlocal replied
            if replied:
                return
            replied = True
            try:
                self._write_now(encode({"id": call_id, "body": answer_body(out)}))
            finally:
                if held_bytes:
                    self._budget.release(held_bytes)
                self.gate.call_finished()
                if not self._starting:
                    self._room_changed()

        try:
            inline(body, reply)
        except KafkaError as err:
            reply(err)
        except Exception as exc:
            log.exception("unexpected error serving a stream call")
            reply(internal_error(exc))

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro, context=self._context.copy())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, call_id: int, call: Call | KafkaError, held_bytes: int) -> None:
        """Run one call and write its answer (or its error) on the stream; then free its frame's bytes."""
        try:
            if isinstance(call, KafkaError):
                out = call.to_dict()
            else:
                out, _status = await run_handler(*call, "a stream call")
            await self._write(encode({"id": call_id, "body": out}))
        finally:
            if held_bytes:
                self._budget.release(held_bytes)
            self.gate.call_finished()
            self._room_changed()

    async def _write(self, payload: bytes) -> None:
        if self.closed or self._transport.is_closing():
            return  # the caller went away meanwhile
        data = frame(payload)
        self.gate.answer_queued(len(data))
        try:
            self._transport.write(data)
            if self._protocol.writing_paused:
                await self._writer.drain()
        except ConnectionError:
            pass
        finally:
            self.gate.answer_written(len(data))

    def _write_now(self, payload: bytes) -> None:
        """`_write` for an inline answer: handed to the transport at once. While the peer reads
        slower than we answer, the bytes count against the stream's answer bound from this moment
        (so the call after it may not start) until the transport's buffer drains."""
        if self.closed or self._transport.is_closing():
            return
        data = frame(payload)
        self._transport.write(data)
        if self._protocol.writing_paused:
            self.gate.answer_queued(len(data))
            self._undrained_bytes += len(data)
            if not self._draining:
                self._draining = True
                self._spawn(self._drain_inline_answers())

    async def _drain_inline_answers(self) -> None:
        try:
            while self._protocol.writing_paused and not self._transport.is_closing():
                await self._writer.drain()
        except ConnectionError:
            pass
        finally:
            self._draining = False
            self.gate.answer_written(self._undrained_bytes)
            self._undrained_bytes = 0
            self._room_changed()

    def _room_changed(self) -> None:
        if self._backlog or self._reading_paused:
            self._start_calls()

    def _cancel_calls(self) -> None:
        for task in self._tasks:
            task.cancel()  # the caller is gone: nobody reads these answers
        if not self.ended.done():
            self.ended.set_result(None)

    # the connection -------------------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self._reading_paused:
            self._reading_paused = True
            self.gate.paused += 1
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and not self._awaiting_budget and not self._transport.is_closing():
            self._reading_paused = False
            self._transport.resume_reading()

    def _refuse(self, err: KafkaError) -> None:
        """A frame the stream cannot cut (over the size bound): say why under id -1, then close."""
        log.warning("closing an RPC stream: %s", err.message)
        if not self._transport.is_closing():
            self._transport.write(frame(encode({"id": -1, "body": err.to_dict()})))
        self.close(err.message)

    def _check_heartbeat(self) -> None:
        now_s = self._loop.time()
        if self._ping_sent_s is not None:
            if self._last_frame_s < self._ping_sent_s:
                self.close(f"no answer to a ping in {self._heartbeat_s / 2:g} s")
                return
            self._ping_sent_s = None
        if now_s - self._last_frame_s >= self._heartbeat_s and not self._transport.is_closing():
            self._transport.write(EMPTY_FRAME)
            self._ping_sent_s = now_s
        self._heartbeat = self._loop.call_later(self._heartbeat_s / 2, self._check_heartbeat)

    def close(self, why: str) -> None:
        log.debug("closing an RPC stream: %s", why)
        self._transport.close()  # connection_lost then feeds the end of the stream


# Told a call's answer body, or the KafkaError that ended the call first.
AnswerCallback = Callable[[Any], None]


class StreamClosed(ConnectionError):
    """A call written on a stream that had already ended."""


class StreamConnection(asyncio.Protocol):
    """The client end of one peer's stream: calls in flight by id, answers read as they arrive.

    `opened` completes with the upgrade answer's status and headers; after a 101, every frame is
    an answer {id, body}, or the server's ping (no bytes), answered at once."""

    def __init__(self, where: str, max_frame_bytes: int) -> None:
        self.where = where
        # a call's future, or for `send_now` its callback (run as the answer is read)
        self.pending: dict[int, asyncio.Future[Any] | AnswerCallback] = {}
        self.next_id = 0
        self.last_answer = time.monotonic()
        self.closed = False
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[tuple[int, dict[str, str]]] = loop.create_future()
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._head: bytearray | None = bytearray()
        self._splitter = FrameSplitter(max_frame_bytes)
        self._reason = "closed by the peer"
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None

    def open(self, path: str, headers: Mapping[str, str]) -> None:
        """Send the upgrade request (the caller awaits `opened`)."""
        assert self._transport is not None
        self._transport.write(upgrade_request(path, headers))

    async def send(self, path: str, body: Mapping[str, Any]) -> tuple[int, asyncio.Future[Any]]:
        """Write one call's frame; its id and the future its answer completes (`forget` the id when done)."""
        if not self.usable:
            raise StreamClosed(f"stream to {self.where} ended: {self._reason}")
        self.next_id += 1
        call_id = self.next_id
        future: asyncio.Future[Any] = self._loop.create_future()
        self.pending[call_id] = future
        self._transport.write(frame(encode({"id": call_id, "path": path, "body": body})))  # type: ignore[union-attr]
        if self._write_paused:
            try:
                await self._wait_drained()
            except BaseException:
                self.pending.pop(call_id, None)
                raise
        return call_id, future

    def send_now(self, path: str, body: Mapping[str, Any], on_answer: AnswerCallback) -> int | None:
        """Write one call's frame now, its answer to go to `on_answer` from inside the read that
        brings it (or a KafkaError when the stream ends first); its id, or None when the stream
        cannot take it now (ended, or the peer reads slower than we write: `send` waits then)."""
        if not self.usable or self._write_paused:
            return None
        self.next_id += 1
        call_id = self.next_id
        self.pending[call_id] = on_answer
        self._transport.write(frame(encode({"id": call_id, "path": path, "body": body})))  # type: ignore[union-attr]
        return call_id

    @property
    def usable(self) -> bool:
        """Neither end has closed it: calls may be written on it."""
        return not self.closed and self._transport is not None and not self._transport.is_closing()

    def forget(self, call_id: int) -> None:
        self.pending.pop(call_id, None)

    def abort(self, reason: str) -> None:
        """Close the connection now, failing every call still waiting on it with `reason`."""
        self.closed = True
        self._fail(reason)

    async def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._head is not None:
            data = self._read_head(data)
            if not data:
                return
        try:
            payloads = self._splitter.feed(data)
        except KafkaError as err:
            self._fail(str(err))
            return
        for payload in payloads:
            if not payload:
                self._transport.write(EMPTY_FRAME)  # type: ignore[union-attr]  # the server's ping
                continue
            try:
                answer = decode_map(payload, "stream answer")
            except KafkaError as err:
                self._fail(str(err))
                return
            self.last_answer = time.monotonic()
            call_id = answer.get("id")
            waiter = self.pending.pop(call_id, None)  # type: ignore[arg-type]
            if waiter is not None:
                self._tell(waiter, answer.get("body"))
            elif call_id == -1 and isinstance(answer.get("body"), dict):
                self._reason = f"the peer refused a frame: {answer['body'].get('message')}"

    def _tell(self, waiter: asyncio.Future[Any] | AnswerCallback, outcome: Any) -> None:
        """A call's answer body, or the KafkaError that ended it, to whoever waits for it."""
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                if isinstance(outcome, KafkaError):
                    waiter.set_exception(outcome)
                else:
                    waiter.set_result(outcome)
            return
        try:
            waiter(outcome)
        except Exception:
            log.exception("an answer's callback failed on the stream to %s", self.where)

    def _read_head(self, data: bytes) -> bytes:
        """Collect the upgrade answer's head; the bytes after it (frames, after a 101)."""
        assert self._head is not None
        self._head += data
        try:
            parsed = split_response_head(bytes(self._head))
        except KafkaError as err:
            self._fail(err.message)
            if not self.opened.done():
                self.opened.set_exception(err)
            return b""
        if parsed is None:
            return b""
        status, headers, rest = parsed
        self._head = None
        if status != 101:
            self.closed = True  # an answer but not a stream: the caller reads its status and closes
        if not self.opened.done():
            self.opened.set_result((status, headers))
        return rest if status == 101 else b""

    def _fail(self, reason: str) -> None:
        self._reason = reason
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._reason = f"{type(exc).__name__}: {exc}"
        self.closed = True
        error = KafkaError(f"stream to {self.where} ended: {self._reason}", ErrorCode.NETWORK_EXCEPTION)
        if not self.opened.done():
            self.opened.set_exception(error)
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            self._tell(waiter, error)
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(StreamClosed(error.message))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def _wait_drained(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()
        await asyncio.shield(self._drained)  # many senders may wait on one drain
