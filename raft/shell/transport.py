"""The Raft routes a node serves: an HTTP request in, the core's answer out.

Design notes: docs/raft.md, section "raft/shell/transport.py".
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc_calls import Handler
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchSnapshotRequest, Message

log = logging.getLogger(__name__)

MAX_WAITERS = 4096  # answers owed at once; beyond that a peer is flooding us

WaiterKey = tuple[int, type, int]


class RaftRoutes:
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        deliver: Callable[[Message], None],
        request_timeout_ms: int,
        fetch_max_wait_ms: int,
        screen: Callable[[Message], KafkaError | None] = lambda message: None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._deliver = deliver
        self._screen = screen
        self._request_timeout_ms = request_timeout_ms
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._waiters: dict[WaiterKey, deque[asyncio.Future[Message]]] = {}
        self._count = 0
        self.open = False

    def routes(self) -> Mapping[str, Handler]:
        return {path: self._handler(path) for path in codec.REQUEST_BY_ROUTE}

    def _handler(self, path: str) -> Handler:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return await self._serve(path, body)

        handle.__name__ = "raft_" + path.rsplit("/", 1)[-1]
        return handle

    async def _serve(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if not self.open:
            raise KafkaError(f"node {self.node_id}: the Raft layer is not running", ErrorCode.BROKER_NOT_AVAILABLE)
        request = codec.decode_request(path, body)
        if request.cluster_id != self.cluster_id:
            raise KafkaError(
                f"node {self.node_id} belongs to cluster {self.cluster_id!r}, not {request.cluster_id!r}",
                ErrorCode.INCONSISTENT_CLUSTER_ID,
            )
        if request.dst != self.node_id:
            raise KafkaError(
                f"request for node {request.dst} reached node {self.node_id}: check controller_quorum_voters",
                ErrorCode.INVALID_REQUEST,
            )
        refused = self._screen(request)  # the core's own refusal, answered as an error here
        if refused is not None:
            raise refused
        if self._count >= MAX_WAITERS:
            raise KafkaError(f"node {self.node_id} owes {self._count} answers already", ErrorCode.REQUEST_TIMED_OUT)
        timeout_ms = self._request_timeout_ms
        if isinstance(request, FetchRequest):
            timeout_ms += min(request.max_wait_ms, self._fetch_max_wait_ms)
        if isinstance(request, FetchRequest | FetchSnapshotRequest):
            self._supersede(request.src)
        key: WaiterKey = (request.src, type(request), request.correlation_id)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, deque()).append(future)
        self._count += 1
        try:
            self._deliver(request)
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    response = await future
            except TimeoutError:
                raise KafkaError(
                    f"node {self.node_id} did not answer {type(request).__name__} within {timeout_ms} ms",
                    ErrorCode.REQUEST_TIMED_OUT,
                ) from None
        finally:
            self._forget(key, future)
        return codec.encode(response)

    def _forget(self, key: WaiterKey, future: asyncio.Future[Message]) -> None:
        queue = self._waiters.get(key)
        if queue is not None and future in queue:
            queue.remove(future)
            self._count -= 1
            if not queue:
                del self._waiters[key]

    def _supersede(self, src: int) -> None:
        for key, queue in list(self._waiters.items()):
            if key[0] == src and key[1] in (FetchRequest, FetchSnapshotRequest):
                for future in queue:
                    if not future.done():
                        future.set_exception(
                            KafkaError(f"superseded by a newer fetch from {src}", ErrorCode.REQUEST_TIMED_OUT)
                        )

    def answer(self, response: Message) -> bool:
        """Hand the core's answer to the route awaiting it; False if none is (timed out, superseded)."""
        request_type = codec.REQUEST_FOR_RESPONSE.get(type(response))
        if request_type is None:
            return False
        # every waiter removes itself when its route returns; here we only pick the oldest open one
        for future in self._waiters.get((response.dst, request_type, response.correlation_id), ()):
            if not future.done():
                future.set_result(response)
                return True
        return False

    def close(self) -> None:
        """Fail every owed answer: the component is stopping."""
        self.open = False
        for queue in self._waiters.values():
            for future in queue:
                if not future.done():
                    future.set_exception(KafkaError("the Raft layer is stopping", ErrorCode.BROKER_NOT_AVAILABLE))
