"""One RPC call's body and its server pipeline: the CBOR codec and `run_handler`, for both transports.

Design notes: docs/protocol.md, section "protocol/shell/rpc.py".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc_limits import check_body_items

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
# An answer, or the error to answer with; an inline handler calls its Reply exactly once.
Reply = Callable[["Mapping[str, Any] | KafkaError"], None]
InlineHandler = Callable[[dict[str, Any], Reply], None]


def inline_handler(inline: InlineHandler) -> Handler:
    """A route whose handler answers through a callback, with no task of its own.

    On the RPC stream, `inline` runs as the frame is read and its Reply writes the answer when it
    is called (the Raft routes: the core answers a parked fetch inside the step that makes the
    answer, with no task to wake). Everywhere else (HTTP) the returned coroutine function is the
    route, awaiting the same Reply. The inline handler bounds its own wait: it calls its Reply
    exactly once, sooner or later, or raises KafkaError before it returns."""

    async def handle(body: dict[str, Any]) -> Mapping[str, Any] | None:
        answer: asyncio.Future[Mapping[str, Any] | KafkaError] = asyncio.get_running_loop().create_future()

        def reply(out: Mapping[str, Any] | KafkaError) -> None:
            if not answer.done():
                answer.set_result(out)

        inline(body, reply)
        out = await answer
        if isinstance(out, KafkaError):
            raise out
        return out

    handle.inline = inline  # type: ignore[attr-defined]
    handle.__name__ = getattr(inline, "__name__", "route")
    return handle


def answer_body(out: Mapping[str, Any] | KafkaError) -> dict[str, Any]:
    """The body an answer or an error travels as, on either transport, from a route or a Reply."""
    if isinstance(out, KafkaError):
        return out.to_dict()
    body = dict(out)
    body.setdefault("error_code", 0)
    return body


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


def error_status(err: KafkaError) -> int:
    """The HTTP status of an error answer: 400 for a request that cannot be read, else 200."""
    return 400 if err.code in (ErrorCode.INVALID_REQUEST, ErrorCode.CORRUPT_MESSAGE) else 200


def internal_error(exc: Exception) -> KafkaError:
    return KafkaError(f"internal error: {type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)


async def decode_body(data: bytes, max_body_items: int | None, what: str = "request") -> dict[str, Any]:
    """Screen untrusted bytes (item count, off the loop when large) and decode them to a CBOR map."""
    if max_body_items is not None:
        await check_body_items(data, max_body_items, what)
    return decode_map(data, what)


async def run_handler(handler: Handler, body: dict[str, Any], where: str) -> tuple[dict[str, Any], int]:
    """The one server pipeline of a decoded call, for both transports (auth is in the handler:
    rpc_auth's guard): its answer, or its error as a typed body, with the HTTP status it gets
    (a crash: 500)."""
    try:
        return answer_body(await handler(body) or {}), 200
    except KafkaError as err:
        return answer_body(err), error_status(err)
    except Exception as exc:
        log.exception("unexpected error serving %s", where)
        return answer_body(internal_error(exc)), 500
