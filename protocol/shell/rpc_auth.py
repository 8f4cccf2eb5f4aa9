"""Authentication on the RPC transport: the server's check and the client's signature (aiohttp glue).

Design notes: docs/security.md, section "protocol/shell/rpc_auth.py".
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from kraftpy.protocol import access
from kraftpy.protocol.auth import (
    HEADER,
    PROOF_HEADER,
    Principal,
    Verifier,
    auth_failed,
    check_proof,
    server_proof,
    sign,
)
from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.protocol.shell.rpc import STREAM_AUTH_HEADERS, STREAM_PATH, error_response
from kraftpy.protocol.shell.rpc_calls import Handler, InlineHandler, Reply
from kraftpy.protocol.types import format_address

log = logging.getLogger(__name__)


class _HttpCaller:
    """The caller of one HTTP request, verified on first use."""

    __slots__ = ("auth", "request", "result")

    def __init__(self, auth: ServerAuth, request: web.Request) -> None:
        self.auth = auth
        self.request = request
        self.result: Principal | KafkaError | None = None

    async def principal(self) -> Principal | None:
        if self.result is None:
            header = self.request.headers.get(HEADER)
            if header is None:
                return None
            try:
                self.result = self.auth.verify(self.request, header, await self.request.read())[0]
            except KafkaError as err:
                self.result = err
        if isinstance(self.result, KafkaError):
            raise self.result
        return self.result


# The caller of the request being handled: a _HttpCaller, a stream's Principal, or None (anonymous).
_caller: contextvars.ContextVar[_HttpCaller | Principal | None] = contextvars.ContextVar("kraftpy_caller", default=None)


class ServerAuth:
    def __init__(self, verifier: Verifier, clock: Callable[[], int] = wall_ms) -> None:
        self.verifier = verifier
        self.clock = clock
        self.refused = 0  # calls refused (unauthenticated or unauthorized), for status

    def verify(self, request: web.Request, header: str, body: bytes) -> tuple[Principal, Any]:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local_port = sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else None
        return self.verifier.verify(
            header, request.method, request.host, request.path, body, self.clock(), local_port=local_port
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == STREAM_PATH and request.method == "GET":
            principal: Principal | None = None
            header = request.headers.get(HEADER)
            if header is not None:
                try:
                    principal, signature = self.verify(request, header, b"")
                except KafkaError as err:
                    self.refused += 1
                    log.warning("refused a stream from %s: %s", request.remote, err.message)
                    response = error_response(err)
                    response.set_status(401)
                    return response
                proof = server_proof(self.verifier.credential(principal.name), signature.mac)
                request[STREAM_AUTH_HEADERS] = {PROOF_HEADER: proof}
            _caller.set(principal)  # the stream's call tasks copy this context
            return await handler(request)
        token = _caller.set(_HttpCaller(self, request))
        try:
            return await handler(request)
        finally:
            _caller.reset(token)

    def guard(self, path: str, handler: Handler) -> Handler:
        """`handler`, refusing callers that `path` does not admit (open routes come back unwrapped)."""
        requirement = access.required(path)
        if requirement is None:
            return handler

        async def guarded(body: dict[str, Any]) -> Mapping[str, Any] | None:
            await self.authorize(path, requirement)
            return await handler(body)

        guarded.__name__ = getattr(handler, "__name__", "route")
        inline: InlineHandler | None = getattr(handler, "inline", None)
        if inline is not None:

            def guarded_inline(body: dict[str, Any], reply: Reply) -> None:
                self.authorize_stream_call(path, requirement)
                inline(body, reply)

            guarded.inline = guarded_inline  # type: ignore[attr-defined]
        return guarded

    def authorize_stream_call(self, path: str, requirement: access.Requirement) -> None:
        """`authorize` for an inline call on a stream, whose caller was verified at the upgrade."""
        caller = _caller.get()
        self._admit(path, requirement, caller if isinstance(caller, Principal) else None)

    async def authorize(self, path: str, requirement: access.Requirement) -> None:
        caller = _caller.get()
        try:
            principal = await caller.principal() if isinstance(caller, _HttpCaller) else caller
        except KafkaError:
            self.refused += 1
            raise
        self._admit(path, requirement, principal)

    def _admit(self, path: str, requirement: access.Requirement, principal: Principal | None) -> None:
        if principal is None or principal.role not in requirement.roles:
            self.refused += 1
            raise requirement.refuse(path, principal.name if principal else None)


class ClientAuth:
    def __init__(self, credential: Credential, clock: Callable[[], int] = wall_ms) -> None:
        self.credential = credential
        self.clock = clock

    def headers(self, method: str, host: str, port: int, path: str, body: bytes) -> dict[str, str]:
        """Host and Authorization headers for one request (the Host is signed, so it is set explicitly)."""
        target = format_address(host, port)
        return {"Host": target, HEADER: sign(self.credential, method, target, path, body, self.clock())}

    def check_stream_proof(self, sent: Mapping[str, str], proof: str | None, where: str) -> None:
        """SASL_AUTHENTICATION_FAILED unless the server's `proof` (its upgrade answer's PROOF_HEADER)
        shows it holds our key."""
        if not check_proof(self.credential, sent[HEADER], proof):
            raise auth_failed(f"{where} did not prove it belongs to this cluster (no valid {PROOF_HEADER})")
