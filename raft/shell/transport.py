"""The Raft routes a node serves: a request in, the core's answer out, with no task per call.

Design notes: docs/raft.md, section "raft/shell/transport.py".
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc_calls import Handler, Reply, inline_handler
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchSnapshotRequest, Message

log = logging.getLogger(__name__)

MAX_WAITERS = 4096  # answers owed at once; beyond that a peer is flooding us

WaiterKey = tuple[int, type, int]


class _Owed:
    """One answer owed to a peer: where it goes, and the timer that gives up on it."""

    __slots__ = ("key", "reply", "timer")

    def __init__(self, key: WaiterKey, reply: Reply) -> None:
        self.key = key
        self.reply = reply
        self.timer: asyncio.TimerHandle | None = None


class RaftRoutes:
    """Each request is checked, handed to the core, and its answer written from inside the step
    that makes it (`answer`, via the route's Reply): on the RPC stream no task is woken between
    the core and the wire, on either end of a commit's messages (docs/perf-raft.md)."""

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
        self._waiters: dict[WaiterKey, deque[_Owed]] = {}
        self._count = 0
        self.open = False

    def routes(self) -> Mapping[str, Handler]:
        return {path: self._handler(path) for path in codec.REQUEST_BY_ROUTE}

    def _handler(self, path: str) -> Handler:
        def serve(body: dict[str, Any], reply: Reply) -> None:
            self._serve(path, body, reply)

        serve.__name__ = "raft_" + path.rsplit("/", 1)[-1]
        return inline_handler(serve)

    def _serve(self, path: str, body: dict[str, Any], reply: Reply) -> None:
        """Check the request and hand it to the core; `reply` gets the core's answer, or an error
        once the wait is over. A request refused here raises (the stream answers the error)."""
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
        owed = _Owed((request.src, type(request), request.correlation_id), reply)
        # registered before the core sees the request: it may answer inside this very step
        self._waiters.setdefault(owed.key, deque()).append(owed)
        self._count += 1
        owed.timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._expire, owed, request, timeout_ms)
        try:
            self._deliver(request)
        except KafkaError as err:
            self._settle(owed, err)

    def _expire(self, owed: _Owed, request: Message, timeout_ms: int) -> None:
        self._settle(
            owed,
            KafkaError(
                f"node {self.node_id} did not answer {type(request).__name__} within {timeout_ms} ms",
                ErrorCode.REQUEST_TIMED_OUT,
            ),
        )

    def _settle(self, owed: _Owed, out: Message | KafkaError) -> None:
        """The one way an owed answer ends: forgotten here, its timer stopped, its reply sent. An
        answer is owed while it is registered, so it ends once."""
        queue = self._waiters.get(owed.key)
        if queue is None or owed not in queue:
            return
        queue.remove(owed)
        self._count -= 1
        if not queue:
            del self._waiters[owed.key]
        if owed.timer is not None:
            owed.timer.cancel()  # else it would hold the request for the whole timeout
        owed.reply(out if isinstance(out, KafkaError) else codec.encode(out))

    def _supersede(self, src: int) -> None:
        superseded = [
            owed
            for key, queue in self._waiters.items()
            if key[0] == src and key[1] in (FetchRequest, FetchSnapshotRequest)
            for owed in queue
        ]
        for owed in superseded:
            self._settle(owed, KafkaError(f"superseded by a newer fetch from {src}", ErrorCode.REQUEST_TIMED_OUT))

    def answer(self, response: Message) -> bool:
        """Send the core's answer to the oldest request still owed it; False if none is (timed out,
        superseded)."""
        request_type = codec.REQUEST_FOR_RESPONSE.get(type(response))
        if request_type is None:
            return False
        queue = self._waiters.get((response.dst, request_type, response.correlation_id))
        if not queue:
            return False
        self._settle(queue[0], response)
        return True

    def close(self) -> None:
        """Fail every owed answer: the component is stopping."""
        self.open = False
        for owed in [owed for queue in self._waiters.values() for owed in queue]:
            self._settle(owed, KafkaError("the Raft layer is stopping", ErrorCode.BROKER_NOT_AVAILABLE))
