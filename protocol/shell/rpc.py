"""The internal RPC: CBOR routes served over HTTP (aiohttp) and the per-peer stream, and `RpcClient`.

The stream's two ends are in rpc_stream.py, a call's codec and server pipeline in rpc_calls.py.

Design notes: docs/protocol.md, section "protocol/shell/rpc.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from kraftpy.protocol.auth import PROOF_HEADER
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.byte_budget import ByteBudget, budgeted_bytes
from kraftpy.protocol.shell.rpc_calls import (
    Handler,
    decode_body,
    decode_map,
    encode,
    error_status,
    internal_error,
    run_handler,
)
from kraftpy.protocol.shell.rpc_limits import ListenerLimits
from kraftpy.protocol.shell.rpc_stream import ServedStream, StreamConnection
from kraftpy.protocol.stream_frames import UPGRADE
from kraftpy.protocol.types import Address, format_address

if TYPE_CHECKING:  # rpc_auth imports this module; RpcClient imports it when it is given a credential
    from kraftpy.protocol.credentials import Credential
    from kraftpy.protocol.shell.rpc_auth import ServerAuth

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/cbor"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
STREAM_PATH = "/rpc/stream"


def _response(body: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=encode(dict(body)), status=status, content_type=CONTENT_TYPE)


def error_response(err: KafkaError) -> web.Response:
    return _response(err.to_dict(), error_status(err))


def wrap_handler(handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def route(request: web.Request) -> web.Response:
        # A large body holds its size in the listener's budget before it is read (chunked: the most
        # it may be), so connections sending large bodies slowly cannot take the node's memory.
        size = request.content_length if request.content_length is not None else request.app[_STREAM_MAX_BYTES]
        held = budgeted_bytes(size) if request.can_read_body else 0
        budget = request.app[_BUDGET]
        if held:
            await budget.acquire(held)
        try:
            data = await request.read()  # too large: aiohttp raises, error_middleware answers
            try:
                body = await decode_body(data, request.app[_LIMITS].max_body_items)
            except KafkaError as err:
                return error_response(err)
            out, status = await run_handler(handler, body, request.path)
            return _response(out, status)
        finally:
            if held:
                budget.release(held)

    route.__name__ = getattr(handler, "__name__", "route")
    return route


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn routing errors and crashes into typed CBOR answers; the node keeps serving."""
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(KafkaError(f"request body too large: {exc.text}", ErrorCode.INVALID_REQUEST))
    except web.HTTPException as exc:
        if exc.status in (404, 405):
            return error_response(
                KafkaError(f"unknown request {request.method} {request.path}", ErrorCode.INVALID_REQUEST)
            )
        raise
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except ConnectionResetError:
        # The caller left mid-request (a peer cut off by a partition, a client gone): nothing to answer,
        # and no error of ours, which a traceback at ERROR would bury real ones under.
        log.info("%s: the caller's connection was lost before its request was read", request.path)
        return error_response(KafkaError("connection lost", ErrorCode.NETWORK_EXCEPTION))
    except Exception as exc:
        log.exception("unexpected error serving %s", request.path)
        return _response(internal_error(exc).to_dict(), 500)


_STREAM_ROUTES = web.AppKey("rpc_stream_routes", dict)
_STREAM_SOCKETS = web.AppKey("rpc_stream_sockets", weakref.WeakSet)
_STREAM_MAX_BYTES = web.AppKey("rpc_stream_max_bytes", int)
_LIMITS = web.AppKey("rpc_listener_limits", ListenerLimits)
_BUDGET = web.AppKey("rpc_request_bytes", ByteBudget)
_AUTH = web.AppKey("rpc_auth", object)
STREAM_AUTH_HEADERS = web.RequestKey("rpc_stream_auth_headers", dict)  # set by rpc_auth: the upgrade's proof


def make_app(
    routes: Mapping[str, Handler],
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    limits: ListenerLimits | None = None,
    auth: ServerAuth | None = None,
) -> web.Application:
    """An aiohttp app serving `routes` (path -> handler) as POST with CBOR bodies, and over the stream.

    With `auth`, routes that need a credential refuse callers without one (protocol/shell/rpc_auth.py)."""
    middlewares: list[Any] = [error_middleware] if auth is None else [error_middleware, auth.middleware]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[_LIMITS] = limits or ListenerLimits()
    app[_BUDGET] = ByteBudget(app[_LIMITS].queued_max_request_bytes)
    if auth is not None:
        app[_AUTH] = auth
    app[_STREAM_ROUTES] = {}
    app[_STREAM_SOCKETS] = weakref.WeakSet()
    app[_STREAM_MAX_BYTES] = max_body_bytes
    app.router.add_get(STREAM_PATH, _serve_stream)
    app.on_shutdown.append(_close_streams)
    add_routes(app, routes)
    return app


def add_routes(app: web.Application, routes: Mapping[str, Handler]) -> None:
    for path, handler in routes.items():
        if _AUTH in app:
            handler = app[_AUTH].guard(path, handler)  # type: ignore[attr-defined]
        app.router.add_post(path, wrap_handler(handler))
        if _STREAM_ROUTES in app:
            app[_STREAM_ROUTES][path] = handler


async def _serve_stream(request: web.Request) -> web.StreamResponse:
    """One peer's stream: a 101 answer, then the connection's bytes go to a ServedStream (rpc_stream.py).

    Auth's middleware has checked the upgrade's signature by now and put its proof in the answer's
    headers; the calls of the stream run as the caller it verified."""
    if request.headers.get("Upgrade", "").strip().lower() != UPGRADE:
        return error_response(
            KafkaError(
                f"GET {STREAM_PATH} opens the RPC stream: send Connection: Upgrade and Upgrade: {UPGRADE}",
                ErrorCode.INVALID_REQUEST,
            )
        )
    app = request.app
    transport = request.transport
    if transport is None:
        return web.Response(status=499)  # the peer left before its upgrade was answered
    response = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": UPGRADE})
    response.headers.update(request.get(STREAM_AUTH_HEADERS) or {})
    request.protocol.keep_alive(False)
    stream = ServedStream(
        transport,  # type: ignore[arg-type]
        request.protocol,
        request.writer,
        app[_STREAM_ROUTES],
        app[_LIMITS],
        app[_STREAM_MAX_BYTES],
        contextvars.copy_context(),
        app[_BUDGET],
    )
    # Before the 101 leaves: every byte after it is the stream's, never the HTTP parser's.
    request.protocol.set_parser(stream)  # type: ignore[arg-type]
    await response.prepare(request)
    app[_STREAM_SOCKETS].add(stream)
    try:
        await stream.ended
    finally:
        app[_STREAM_SOCKETS].discard(stream)
    return response


async def _close_streams(app: web.Application) -> None:
    """On shutdown: a stream is a long-lived handler; closing it lets the server stop at once."""
    for stream in list(app[_STREAM_SOCKETS]):
        stream.close("server shutting down")


class SendTurns:
    """First come, first written: the order in which calls to one peer write their frames.

    A call takes its turn when it is made, before any await, and writes only
    after every call made before it has written or given up. Without this, a
    call that waited for the stream to connect resumed a loop iteration after
    the stream became visible, and a call made in that iteration was written
    first: a producer's second batch then reached the leader before its first
    (issue 11, the producer stall). Kafka gets the same order from its one
    connection per broker; the server answers a stream's frames in parallel,
    but starts handling them in the order they arrive.
    """

    def __init__(self) -> None:
        self._queue: deque[asyncio.Future[None]] = deque()

    def take(self) -> asyncio.Future[None]:
        """This call's turn: a future done when it may write (at once when nobody is ahead)."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._queue:
            turn.set_result(None)
        self._queue.append(turn)
        return turn

    def idle(self) -> bool:
        """Nobody waits to write: a call made now may write at once and keep the order."""
        return not self._queue

    def release(self, turn: asyncio.Future[None]) -> None:
        """The call wrote its frame or gave up (timeout, cancellation, error): the next one may write."""
        head = bool(self._queue) and self._queue[0] is turn
        with contextlib.suppress(ValueError):
            self._queue.remove(turn)
        if head and self._queue and not self._queue[0].done():
            self._queue[0].set_result(None)


def _time_out(answer: asyncio.Future[Any]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


class RpcClient:
    """Calls CBOR routes on peers. Every call has a timeout; every failure is a KafkaError.

    The transport is chosen per peer, not per call: with `peer_streams` (a node's clients of the
    other nodes) every call to a peer travels on that peer's one stream, and over HTTP only to a
    peer that serves no stream; without it (the CLI's one-shot calls, where a stream's handshake
    costs more than it saves) every call is an HTTP request on a keep-alive pool per peer.
    """

    def __init__(
        self,
        *,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 1_000,
        max_connections_per_peer: int = 8,
        credential: Credential | None = None,
        peer_streams: bool = False,
    ) -> None:
        from kraftpy.protocol.shell.rpc_auth import ClientAuth

        # With a credential every request is signed, and a stream must prove the peer holds the same key.
        self.auth = ClientAuth(credential) if credential is not None else None
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.peer_streams = peer_streams
        self._max_per_peer = max_connections_per_peer
        self._session: aiohttp.ClientSession | None = None
        self._streams: dict[Address, StreamConnection] = {}
        self._connecting: dict[Address, asyncio.Task[StreamConnection | None]] = {}
        self._http_only: set[Address] = set()  # peers that do not serve the stream
        self._turns: dict[Address, SendTurns] = {}

    @property
    def credential(self) -> Credential | None:
        """What this client signs with (another client of the same process, e.g. replication's, uses it too)."""
        return self.auth.credential if self.auth is not None else None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._max_per_peer, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def call(
        self,
        address: Address,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_ms: int | None = None,
        raise_errors: bool = True,
    ) -> dict[str, Any]:
        """Call `path` on `address`, over the peer's stream or HTTP (see the class)."""
        host, port = address
        total_ms = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        if self.peer_streams and address not in self._http_only:
            answer = await self._stream_call(address, path, body, total_ms)
            if answer is not None:
                if not isinstance(answer, dict):
                    raise KafkaError("response body must be a CBOR map", ErrorCode.INVALID_REQUEST)
                if raise_errors and answer.get("error_code", 0) != 0:
                    raise KafkaError.from_dict(answer)
                return answer
        url = f"http://{format_address(host, port)}{path}"
        timeout = aiohttp.ClientTimeout(total=total_ms / 1000, sock_connect=self.connect_timeout_ms / 1000)
        data = encode(dict(body))
        headers = {"Content-Type": CONTENT_TYPE}
        if self.auth is not None:
            headers.update(self.auth.headers("POST", host, port, path, data))
        try:
            async with self._get_session().post(url, data=data, headers=headers, timeout=timeout) as resp:
                raw = await resp.read()
        except TimeoutError:
            raise KafkaError(
                f"{path} to {host}:{port} timed out after {total_ms} ms", ErrorCode.REQUEST_TIMED_OUT
            ) from None
        except aiohttp.ClientConnectorError as exc:  # no connection: the request never left
            raise KafkaError(
                f"{path} to {host}:{port} failed: {exc}", ErrorCode.NETWORK_EXCEPTION, sent=False
            ) from None
        except aiohttp.ClientError as exc:
            raise KafkaError(f"{path} to {host}:{port} failed: {exc}", ErrorCode.NETWORK_EXCEPTION) from None
        answer = decode_map(raw, "response")
        if raise_errors and answer.get("error_code", 0) != 0:
            raise KafkaError.from_dict(answer)
        return answer

    async def _stream_call(self, address: Address, path: str, body: Mapping[str, Any], total_ms: int) -> Any:
        """The answer body, or None if the peer serves no stream (then HTTP).

        On a connected stream that nobody waits to write on, the frame is written at once, so calls
        still leave in the order they were made. Otherwise the call takes its turn first (taken
        before any await, so turns follow the order the calls were made) and waits for the stream
        to connect. Either way one timer bounds the wait for the answer, to `total_ms` in all."""
        body = body if type(body) is dict else dict(body)
        where = f"{address[0]}:{address[1]}"
        started = time.monotonic()
        turns = self._turns.setdefault(address, SendTurns())
        stream = self._streams.get(address)
        call_id = -1
        timer: asyncio.TimerHandle | None = None
        try:
            if stream is not None and stream.usable and turns.idle():
                call_id, answer = await stream.send(path, body)
            else:
                stream = None
                turn = turns.take()
                try:
                    async with asyncio.timeout(total_ms / 1000):
                        await turn
                        stream = await self._get_stream(address)
                        if stream is None:
                            return None
                        call_id, answer = await stream.send(path, body)
                finally:
                    turns.release(turn)
            left_s = total_ms / 1000 - (time.monotonic() - started)
            timer = asyncio.get_running_loop().call_later(max(0.0, left_s), _time_out, answer)
            return await answer
        except TimeoutError:
            if stream is not None and stream.last_answer < started:
                await stream.close()  # nothing came back on it since this call left: a dead connection
            raise KafkaError(f"{path} to {where} timed out after {total_ms} ms", ErrorCode.REQUEST_TIMED_OUT) from None
        except ConnectionError as exc:  # the stream broke while sending
            raise KafkaError(f"{path} to {where} failed: {exc}", ErrorCode.NETWORK_EXCEPTION) from None
        finally:
            if timer is not None:
                timer.cancel()
            if stream is not None:
                stream.forget(call_id)

    def call_now(
        self,
        address: Address,
        path: str,
        body: Mapping[str, Any],
        timeout_ms: int,
        on_answer: Callable[[dict[str, Any] | KafkaError], None],
    ) -> bool:
        """`call` with no task: the frame is written at once on the peer's connected stream and
        `on_answer` is called exactly once, from inside the read that brings the answer, with its
        body (error bodies included, as `raise_errors=False`) or with the KafkaError that ended the
        call (timeout, a broken stream, an answer that is no map). False, and nothing sent, when
        the call cannot leave now in its order (no stream yet, calls waiting to write, the peer
        not reading): then `call` does it."""
        if not self.peer_streams or address in self._http_only:
            return False
        stream = self._streams.get(address)
        turns = self._turns.get(address)
        if stream is None or (turns is not None and not turns.idle()):
            return False
        started = time.monotonic()
        timer: asyncio.TimerHandle | None = None

        def answered(answer: Any) -> None:
            if timer is not None:
                timer.cancel()
            if not isinstance(answer, dict | KafkaError):
                answer = KafkaError("response body must be a CBOR map", ErrorCode.INVALID_REQUEST)
            on_answer(answer)

        call_id = stream.send_now(path, body if type(body) is dict else dict(body), answered)
        if call_id is None:
            return False

        def expired() -> None:
            stream.forget(call_id)
            if stream.last_answer < started:
                stream.abort("no answer since a call that timed out")  # a dead connection
            on_answer(
                KafkaError(
                    f"{path} to {address[0]}:{address[1]} timed out after {timeout_ms} ms", ErrorCode.REQUEST_TIMED_OUT
                )
            )

        timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, expired)
        return True

    async def _get_stream(self, address: Address) -> StreamConnection | None:
        stream = self._streams.get(address)
        if stream is not None and stream.usable:
            return stream
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect_stream(address))
            self._connecting[address] = task
            task.add_done_callback(lambda t: self._connected(address, t))
        return await asyncio.shield(task)  # a caller that gives up does not cancel the others' connection

    def _connected(self, address: Address, task: asyncio.Task[StreamConnection | None]) -> None:
        self._connecting.pop(address, None)
        if not task.cancelled() and task.exception() is None and task.result() is not None:
            self._streams[address] = task.result()  # type: ignore[assignment]

    async def _connect_stream(self, address: Address) -> StreamConnection | None:
        host, port = address
        where = f"{host}:{port}"
        target = format_address(host, port)
        headers = self.auth.headers("GET", host, port, STREAM_PATH, b"") if self.auth is not None else {"Host": target}
        loop = asyncio.get_running_loop()
        stream: StreamConnection | None = None
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                _, stream = await loop.create_connection(
                    lambda: StreamConnection(where, DEFAULT_MAX_BODY_BYTES), host, port
                )
                stream.open(STREAM_PATH, headers)
                status, answer_headers = await stream.opened
        except TimeoutError:
            if stream is not None:
                await stream.close()
            raise KafkaError(
                f"connecting to {where} timed out after {self.connect_timeout_ms} ms",
                ErrorCode.NETWORK_EXCEPTION,
                sent=False,
            ) from None
        except OSError as exc:
            # No connection, so no request left: a caller keeping a history may count it a definite failure.
            raise KafkaError(f"connecting to {where} failed: {exc}", ErrorCode.NETWORK_EXCEPTION, sent=False) from None
        if status != 101:
            await stream.close()
            if status == 401:  # the peer refused our credential: say so, never fall back to HTTP
                raise KafkaError(
                    f"{where} refused the stream's credential; see its log", ErrorCode.SASL_AUTHENTICATION_FAILED
                )
            self._http_only.add(address)  # serves its routes but no stream (a node of an older version)
            log.warning("%s answered the stream's upgrade with %d; calling it over HTTP from now on", where, status)
            return None
        if self.auth is not None:
            try:
                self.auth.check_stream_proof(headers, answer_headers.get(PROOF_HEADER.lower()), where)
            except KafkaError:
                await stream.close()
                raise
        return stream

    async def close(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
        for stream in list(self._streams.values()):
            await stream.close()
        self._streams.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
