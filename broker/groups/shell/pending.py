"""Requests waiting for a coordinator core's answer: one future per request id, each wait bounded.

The group and transaction coordinator shells both hand a request to their core
with a fresh id and wait for the core's Respond action carrying that id; this
is that bookkeeping, once. Notes: docs/groups.md, section "Notes from the code".
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError


class PendingAnswers:
    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._waiting)

    async def ask(self, start: Callable[[int], None], backstop_ms: int, timeout_message: str) -> dict[str, Any]:
        """Call `start` with a fresh request id, then wait at most `backstop_ms` for its answer."""
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            start(request_id)
            async with asyncio.timeout(backstop_ms / 1000):
                return await future
        except TimeoutError:
            raise KafkaError(timeout_message, ErrorCode.REQUEST_TIMED_OUT) from None
        finally:
            self._waiting.pop(request_id, None)

    def respond(self, request_id: Hashable, body: dict[str, Any]) -> None:
        """The core's answer; one for a request no longer waiting (timed out, failed) is dropped."""
        future = self._waiting.get(request_id)  # type: ignore[arg-type]
        if future is not None and not future.done():
            future.set_result(body)

    def fail_all(self, error: KafkaError) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
