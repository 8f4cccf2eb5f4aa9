"""Outbound Raft requests: per-peer lanes over the node's shared RpcClient.

Design notes: docs/raft.md, section "raft/shell/peer_client.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import Address
from kraftpy.raft import codec
from kraftpy.raft.messages import FetchRequest, FetchSnapshotRequest, Message

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 10.0


class _Peer:
    def __init__(self, node_id: int, address: Address, backoff: Backoff, queue_limit: int) -> None:
        self.node_id = node_id
        self.address = address
        self.backoff = backoff
        self.fetch_task: asyncio.Task[None] | None = None
        self.fetches = 0  # fetches sent: an inline fetch's answer counts only while it is the latest
        self.control: deque[Message] = deque(maxlen=queue_limit)
        self.control_tasks: set[asyncio.Task[None]] = set()
        self.dropped = 0
        self.last_warning = 0.0


class PeerClient:
    def __init__(
        self,
        *,
        node_id: int,
        rpc: RpcClient,
        addresses: dict[int, Address],
        deliver: Callable[[Message], None],
        current_epoch: Callable[[], int],
        request_timeout_ms: int,
        backoff_initial_ms: int = 50,
        backoff_max_ms: int = 250,
        control_queue_limit: int = 64,
        control_concurrency: int = 4,
    ) -> None:
        self.node_id = node_id
        self._rpc = rpc
        self._deliver = deliver
        self._current_epoch = current_epoch
        self._request_timeout_ms = request_timeout_ms
        self._concurrency = control_concurrency
        self._closed = False
        rng = random.Random()
        self._peers = {
            peer: _Peer(peer, address, Backoff(backoff_initial_ms, backoff_max_ms, rng=rng), control_queue_limit)
            for peer, address in addresses.items()
            if peer != node_id
        }

    def send(self, request: Message) -> None:
        """Queue a request for its peer (never blocks)."""
        if self._closed:
            return
        peer = self._peers.get(request.dst)
        if peer is None:
            log.warning("no address for node %d; dropping %s", request.dst, type(request).__name__)
            return
        if isinstance(request, FetchRequest | FetchSnapshotRequest):
            # a new fetch abandons the one before: its answer would be ignored by the core
            if peer.fetch_task is not None and not peer.fetch_task.done():
                peer.fetch_task.cancel()
            peer.fetch_task = None
            peer.fetches += 1
            if not self._call_now(peer, request):
                peer.fetch_task = asyncio.get_running_loop().create_task(self._call(peer, request))
            return
        if len(peer.control) == peer.control.maxlen:
            peer.dropped += 1  # deque(maxlen) drops the oldest; the core resends what matters
        peer.control.append(request)
        self._pump(peer)

    def _pump(self, peer: _Peer) -> None:
        loop = asyncio.get_running_loop()
        while peer.control and len(peer.control_tasks) < self._concurrency and not self._closed:
            task = loop.create_task(self._call(peer, peer.control.popleft()))
            peer.control_tasks.add(task)
            task.add_done_callback(lambda t, p=peer: self._control_done(p, t))

    def _control_done(self, peer: _Peer, task: asyncio.Task[None]) -> None:
        peer.control_tasks.discard(task)
        if not self._closed:
            self._pump(peer)

    def _timeout_ms(self, request: Message) -> int:
        if isinstance(request, FetchRequest):
            return self._request_timeout_ms + request.max_wait_ms
        return self._request_timeout_ms

    def _call_now(self, peer: _Peer, request: Message) -> bool:
        """A fetch written at once on the peer's stream, its answer handed to the core from inside
        the read that brings it: the commit's path has no task to wake on this end (docs/perf-raft.md).
        False when the stream cannot take it now; then a task calls."""
        sent_as = peer.fetches

        def on_answer(answer: dict[str, Any] | KafkaError) -> None:
            if self._closed or peer.fetches != sent_as:
                return  # closed, or abandoned for a newer fetch
            try:
                response = self._response(request, answer)
            except KafkaError as err:
                peer.fetch_task = asyncio.get_running_loop().create_task(self._failed(peer, request, err))
                return
            peer.backoff.reset()
            self._deliver(response)

        return self._rpc.call_now(
            peer.address, codec.route_of(request), codec.encode(request), self._timeout_ms(request), on_answer
        )

    @staticmethod
    def _response(request: Message, answer: dict[str, Any] | KafkaError) -> Message:
        """The core's response from an answer body; KafkaError when the call or the route failed."""
        if isinstance(answer, KafkaError):
            raise answer
        if answer.get("error_code", 0) != 0 and "type" not in answer:
            raise KafkaError.from_dict(answer)  # the route refused the request
        return codec.decode_response(request, answer)

    async def _call(self, peer: _Peer, request: Message) -> None:
        try:
            body = await self._rpc.call(
                peer.address,
                codec.route_of(request),
                codec.encode(request),
                timeout_ms=self._timeout_ms(request),
                raise_errors=False,
            )
            response = self._response(request, body)
        except KafkaError as err:
            await self._failed(peer, request, err)
            return
        peer.backoff.reset()
        self._deliver(response)

    async def _failed(self, peer: _Peer, request: Message, err: KafkaError) -> None:
        now = time.monotonic()
        if err.code in (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INVALID_REQUEST):
            # a misconfiguration (another cluster, a wrong address) or a bug: always worth a warning
            log.warning("%s to node %d refused: %s", type(request).__name__, peer.node_id, err)
        elif now - peer.last_warning >= WARN_INTERVAL_S:
            # a peer that is down or starting: normal around restarts, so once in a while and mildly
            peer.last_warning = now
            log.info("%s to node %d failed: %s", type(request).__name__, peer.node_id, err)
        else:
            log.debug("%s to node %d failed: %s", type(request).__name__, peer.node_id, err)
        answer = codec.failure_response(request, self._current_epoch(), err.code)
        if answer is None or self._closed:
            return
        await asyncio.sleep(peer.backoff.next_ms() / 1000)
        if not self._closed:
            self._deliver(answer)

    def pending(self) -> int:
        """Control requests queued or in flight (resign waits for its EndQuorumEpoch to leave)."""
        return sum(len(p.control) + len(p.control_tasks) for p in self._peers.values())

    async def flush_control(self, timeout_ms: int) -> bool:
        """Wait (bounded) until every queued vote / quorum-epoch request has been answered or failed."""
        deadline = time.monotonic() + timeout_ms / 1000
        while self.pending() and time.monotonic() < deadline:
            tasks = [t for p in self._peers.values() for t in p.control_tasks]
            if not tasks:
                await asyncio.sleep(0.001)
                continue
            await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        return self.pending() == 0

    def stats(self) -> dict[int, dict[str, int]]:
        return {p.node_id: {"queued": len(p.control), "dropped": p.dropped} for p in self._peers.values()}

    async def close(self) -> None:
        self._closed = True
        tasks = []
        for peer in self._peers.values():
            peer.control.clear()
            if peer.fetch_task is not None:
                tasks.append(peer.fetch_task)
            tasks.extend(peer.control_tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
