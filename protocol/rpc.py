"""CBOR request/response over HTTP (aiohttp): the one transport every node API uses.

Server side: routes whose handlers take and return plain dicts.
Any KafkaError a handler raises becomes a body with `error_code`, `error` and
`message`; malformed CBOR, unknown paths, oversized bodies and unexpected
exceptions become typed error answers too, so a bad request never takes a node
down. Client side: one keep-alive connection pool per peer, request timeouts,
and errors in answers raised again as KafkaError on the caller's side.

The same routes are also served over one websocket per peer (`STREAM_PATH`,
`RpcClient.call(..., stream=True)`): each call is a frame {id, path, body},
each answer a frame {id, body}, many calls in flight on one connection and
answered in any order. Same handlers, same errors, same timeouts; a frame costs
a fraction of an HTTP request (no headers, no request objects), which is what
a peer exchanging thousands of small messages a second (Raft) needs. A peer
that does not serve the stream is called over HTTP instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import cbor2
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:  # rpc_auth imports this module; RpcClient imports it when it is given a credential
    from kraftpy.protocol.credentials import Credential
    from kraftpy.protocol.rpc_auth import ServerAuth

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/cbor"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
STREAM_PATH = "/rpc/stream"
MAX_STREAM_CALLS = 4096  # calls in flight on one stream; beyond that the peer is flooding us

Handler = Callable[[dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
Address = tuple[str, int]

# The peer address of the request a handler is serving (handlers take only the body; the group
# coordinator records each member's host, as Kafka's clientHost).
_request_peer: contextvars.ContextVar[str | None] = contextvars.ContextVar("kraftpy_request_peer", default=None)


def request_peer() -> str | None:
    """The remote address of the request being handled, when known (called from inside a handler)."""
    return _request_peer.get()


def encode(obj: Any) -> bytes:
    return cbor2.dumps(obj)


def decode_map(data: bytes, what: str = "request") -> dict[str, Any]:
    """Decode a CBOR map from untrusted bytes, or raise INVALID_REQUEST saying why."""
    if not data:
        raise KafkaError(f"empty {what} body; expected a CBOR map", ErrorCode.INVALID_REQUEST)
    try:
        obj = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for garbage; all mean the same here
        raise KafkaError(f"{what} body is not valid CBOR: {exc}", ErrorCode.INVALID_REQUEST) from None
    if not isinstance(obj, dict):
        raise KafkaError(f"{what} body must be a CBOR map, got {type(obj).__name__}", ErrorCode.INVALID_REQUEST)
    return obj


def _response(body: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=encode(dict(body)), status=status, content_type=CONTENT_TYPE)


def error_response(err: KafkaError) -> web.Response:
    status = 400 if err.code in (ErrorCode.INVALID_REQUEST, ErrorCode.CORRUPT_MESSAGE) else 200
    return _response(err.to_dict(), status)


def wrap_handler(handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def route(request: web.Request) -> web.Response:
        token = _request_peer.set(request.remote)
        try:
            body = decode_map(await request.read())
            result = await handler(body)
        except KafkaError as err:
            return error_response(err)
        finally:
            _request_peer.reset(token)
        out = dict(result or {})
        out.setdefault("error_code", 0)
        return _response(out)

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
    except Exception as exc:
        log.exception("unexpected error serving %s", request.path)
        return _response(
            KafkaError(f"internal error: {type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR).to_dict(),
            500,
        )


_STREAM_ROUTES = web.AppKey("rpc_stream_routes", dict)
_STREAM_SOCKETS = web.AppKey("rpc_stream_sockets", weakref.WeakSet)
_STREAM_MAX_BYTES = web.AppKey("rpc_stream_max_bytes", int)
_AUTH = web.AppKey("rpc_auth", object)
STREAM_AUTH_HEADERS = web.RequestKey("rpc_stream_auth_headers", dict)  # set by rpc_auth: the upgrade's proof


def make_app(
    routes: Mapping[str, Handler], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, auth: ServerAuth | None = None
) -> web.Application:
    """An aiohttp app serving `routes` (path -> handler) as POST with CBOR bodies, and over the stream.

    With `auth`, routes that need a credential refuse callers without one (protocol/rpc_auth.py)."""
    middlewares: list[Any] = [error_middleware] if auth is None else [error_middleware, auth.middleware]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
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


async def _serve_stream(request: web.Request) -> web.WebSocketResponse:
    """One peer's stream: every binary frame is a call, answered by its own task."""
    app = request.app
    _request_peer.set(request.remote)  # for every call on the stream (their tasks copy this context)
    ws = web.WebSocketResponse(compress=False, max_msg_size=app[_STREAM_MAX_BYTES])
    ws.headers.update(request.get(STREAM_AUTH_HEADERS) or {})
    await ws.prepare(request)
    app[_STREAM_SOCKETS].add(ws)
    tasks: set[asyncio.Task[None]] = set()
    try:
        async for msg in ws:
            if msg.type is aiohttp.WSMsgType.ERROR:
                break
            if len(tasks) >= MAX_STREAM_CALLS:
                error = KafkaError(f"{len(tasks)} calls in flight on this stream", ErrorCode.REQUEST_TIMED_OUT)
                task = asyncio.create_task(_answer_frame(ws, app[_STREAM_ROUTES], msg.data, error))
            else:
                task = asyncio.create_task(_answer_frame(ws, app[_STREAM_ROUTES], msg.data))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        app[_STREAM_SOCKETS].discard(ws)
        for task in tasks:
            task.cancel()  # the caller is gone: nobody reads these answers
    return ws


async def _answer_frame(
    ws: web.WebSocketResponse, routes: Mapping[str, Handler], data: Any, refuse: KafkaError | None = None
) -> None:
    call_id = -1  # a frame too broken to name its call is answered under -1 (no caller waits on it)
    try:
        if not isinstance(data, bytes):
            raise KafkaError("stream frames must be binary CBOR", ErrorCode.INVALID_REQUEST)
        frame = decode_map(data, "stream frame")
        if isinstance(frame.get("id"), int):
            call_id = frame["id"]
        else:
            raise KafkaError("stream frame needs an integer id", ErrorCode.INVALID_REQUEST)
        if refuse is not None:
            raise refuse
        handler = routes.get(frame.get("path"))  # type: ignore[arg-type]
        if handler is None:
            raise KafkaError(f"unknown request {frame.get('path')!r}", ErrorCode.INVALID_REQUEST)
        body = frame.get("body")
        if not isinstance(body, dict):
            raise KafkaError("request body must be a CBOR map", ErrorCode.INVALID_REQUEST)
        out = dict(await handler(body) or {})
        out.setdefault("error_code", 0)
    except KafkaError as err:
        out = err.to_dict()
    except Exception as exc:
        log.exception("unexpected error serving a stream call")
        out = KafkaError(f"internal error: {type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR).to_dict()
    if not ws.closed:
        with contextlib.suppress(ConnectionError, RuntimeError):  # the caller went away meanwhile
            await ws.send_bytes(encode({"id": call_id, "body": out}))


async def _close_streams(app: web.Application) -> None:
    """On shutdown: a stream is a long-lived handler; closing it lets the server stop at once."""
    for ws in list(app[_STREAM_SOCKETS]):
        await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"server shutting down")


@dataclass
class Backoff:
    """Exponential backoff with jitter, as Kafka's retry_backoff_ms / retry_backoff_max_ms."""

    initial_ms: int = 100
    max_ms: int = 1000
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next_ms(self) -> float:
        base = min(self.max_ms, self.initial_ms * (2**self.attempts))
        self.attempts += 1
        return base * (1 + self.rng.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self.attempts = 0


class _Stream:
    """The client end of one peer's stream: calls in flight by id, one reader task."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, where: str) -> None:
        self.ws = ws
        self.where = where
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 0
        self.last_answer = time.monotonic()
        self.closed = False
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def call(self, path: str, body: Mapping[str, Any]) -> Any:
        self.next_id += 1
        call_id = self.next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = future
        try:
            await self.ws.send_bytes(encode({"id": call_id, "path": path, "body": dict(body)}))
            return await future
        finally:
            self.pending.pop(call_id, None)

    async def _read(self) -> None:
        reason = "closed by the peer"
        try:
            async for msg in self.ws:
                if msg.type is not aiohttp.WSMsgType.BINARY:
                    reason = f"unexpected {msg.type.name} frame"
                    break
                try:
                    frame = decode_map(msg.data, "stream answer")
                except KafkaError as err:
                    reason = str(err)
                    break
                self.last_answer = time.monotonic()
                future = self.pending.pop(frame.get("id"), None)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(frame.get("body"))
        except Exception as exc:  # a broken connection ends the stream like a close
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            self.closed = True
            error = KafkaError(f"stream to {self.where} ended: {reason}", ErrorCode.NETWORK_EXCEPTION)
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(error)
            self.pending.clear()
            await self.ws.close()

    async def close(self) -> None:
        self.closed = True
        await self.ws.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader


class RpcClient:
    """Calls CBOR routes on peers. One aiohttp session; its connector keeps a
    keep-alive pool per peer, and (for `stream=True` calls) one stream per peer.
    Every call has a timeout; every failure is a KafkaError."""

    def __init__(
        self,
        *,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 1_000,
        max_connections_per_peer: int = 8,
        credential: Credential | None = None,
    ) -> None:
        from kraftpy.protocol.rpc_auth import ClientAuth

        # With a credential every request is signed, and a stream must prove the peer holds the same key.
        self.auth = ClientAuth(credential) if credential is not None else None
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._max_per_peer = max_connections_per_peer
        self._session: aiohttp.ClientSession | None = None
        self._streams: dict[Address, _Stream] = {}
        self._connecting: dict[Address, asyncio.Task[_Stream | None]] = {}
        self._http_only: set[Address] = set()  # peers that do not serve the stream

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
        stream: bool = False,
    ) -> dict[str, Any]:
        """Call `path` on `address`; `stream` sends it over the peer's stream (HTTP if it has none)."""
        host, port = address
        total_ms = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        if stream and address not in self._http_only:
            answer = await self._stream_call(address, path, body, total_ms)
            if answer is not None:
                if not isinstance(answer, dict):
                    raise KafkaError("response body must be a CBOR map", ErrorCode.INVALID_REQUEST)
                if raise_errors and answer.get("error_code", 0) != 0:
                    raise KafkaError.from_dict(answer)
                return answer
        url = f"http://{host}:{port}{path}"
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
        except aiohttp.ClientError as exc:
            raise KafkaError(f"{path} to {host}:{port} failed: {exc}", ErrorCode.NETWORK_EXCEPTION) from None
        answer = decode_map(raw, "response")
        if raise_errors and answer.get("error_code", 0) != 0:
            raise KafkaError.from_dict(answer)
        return answer

    async def _stream_call(self, address: Address, path: str, body: Mapping[str, Any], total_ms: int) -> Any:
        """The answer body, or None if the peer serves no stream (the caller falls back to HTTP)."""
        where = f"{address[0]}:{address[1]}"
        started = time.monotonic()
        stream: _Stream | None = None
        try:
            async with asyncio.timeout(total_ms / 1000):
                stream = await self._get_stream(address)
                if stream is None:
                    return None
                return await stream.call(path, body)
        except TimeoutError:
            if stream is not None and stream.last_answer < started:
                await stream.close()  # nothing came back on it since this call left: a dead connection
            raise KafkaError(f"{path} to {where} timed out after {total_ms} ms", ErrorCode.REQUEST_TIMED_OUT) from None
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:  # the stream broke while sending
            raise KafkaError(f"{path} to {where} failed: {exc}", ErrorCode.NETWORK_EXCEPTION) from None

    async def _get_stream(self, address: Address) -> _Stream | None:
        stream = self._streams.get(address)
        if stream is not None and not stream.closed and not stream.ws.closed:
            return stream
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect_stream(address))
            self._connecting[address] = task
            task.add_done_callback(lambda t: self._connected(address, t))
        return await asyncio.shield(task)  # a caller that gives up does not cancel the others' connection

    def _connected(self, address: Address, task: asyncio.Task[_Stream | None]) -> None:
        self._connecting.pop(address, None)
        if not task.cancelled() and task.exception() is None and task.result() is not None:
            self._streams[address] = task.result()  # type: ignore[assignment]

    async def _connect_stream(self, address: Address) -> _Stream | None:
        host, port = address
        headers = self.auth.headers("GET", host, port, STREAM_PATH, b"") if self.auth is not None else {}
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                ws = await self._get_session().ws_connect(
                    f"http://{host}:{port}{STREAM_PATH}",
                    autoping=True,
                    max_msg_size=DEFAULT_MAX_BODY_BYTES,
                    headers=headers,
                )
            if self.auth is not None:
                try:
                    self.auth.check_stream_proof(headers, ws._response.headers, f"{host}:{port}")
                except KafkaError:
                    await ws.close()
                    raise
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:  # the peer refused our credential: say so, never fall back to HTTP
                raise KafkaError(
                    f"{host}:{port} refused the stream's credential; see its log", ErrorCode.SASL_AUTHENTICATION_FAILED
                ) from None
            self._http_only.add(address)  # serves its routes but no stream
            return None
        except TimeoutError:
            raise KafkaError(
                f"connecting to {host}:{port} timed out after {self.connect_timeout_ms} ms", ErrorCode.NETWORK_EXCEPTION
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise KafkaError(f"connecting to {host}:{port} failed: {exc}", ErrorCode.NETWORK_EXCEPTION) from None
        return _Stream(ws, f"{host}:{port}")

    async def close(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
        for stream in list(self._streams.values()):
            await stream.close()
        self._streams.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
