"""CBOR request/response over HTTP (aiohttp): the one transport every node API uses.

Server side: routes whose handlers take and return plain dicts.
Any KafkaError a handler raises becomes a body with `error_code`, `error` and
`message`; malformed CBOR, unknown paths, oversized bodies and unexpected
exceptions become typed error answers too, so a bad request never takes a node
down. Client side: one keep-alive connection pool per peer, request timeouts,
and errors in answers raised again as KafkaError on the caller's side.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import cbor2
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/cbor"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

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


def make_app(routes: Mapping[str, Handler], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> web.Application:
    """An aiohttp app serving `routes` (path -> handler) as POST with CBOR bodies."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[error_middleware])
    add_routes(app, routes)
    return app


def add_routes(app: web.Application, routes: Mapping[str, Handler]) -> None:
    for path, handler in routes.items():
        app.router.add_post(path, wrap_handler(handler))


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


class RpcClient:
    """Calls CBOR routes on peers. One aiohttp session; its connector keeps a
    keep-alive pool per peer. Every call has a timeout; every failure is a KafkaError."""

    def __init__(
        self,
        *,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 1_000,
        max_connections_per_peer: int = 8,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._max_per_peer = max_connections_per_peer
        self._session: aiohttp.ClientSession | None = None

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
        host, port = address
        url = f"http://{host}:{port}{path}"
        total_ms = timeout_ms if timeout_ms is not None else self.request_timeout_ms
        timeout = aiohttp.ClientTimeout(total=total_ms / 1000, sock_connect=self.connect_timeout_ms / 1000)
        try:
            async with self._get_session().post(
                url, data=encode(dict(body)), headers={"Content-Type": CONTENT_TYPE}, timeout=timeout
            ) as resp:
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

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
