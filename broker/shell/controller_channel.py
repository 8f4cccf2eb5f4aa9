"""Calls from the broker to the active controller: Kafka's NodeToControllerChannelManager.

`call` asks the controller the broker knows, following one NOT_CONTROLLER hint;
the broker's own calls (AlterPartition, producer id blocks) retry on their own.
`forward` carries a client's admin request (CreateTopics, ...) across a
controller failover until the request's deadline, as Kafka's forwarding does.

Design notes: docs/broker.md, section "ISR changes and the controller".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import Address, parse_address

# What a forwarded request waits out: the controller is gone or not known yet. A request that reached a
# controller and failed there (an invalid topic, an attempt timed out) is answered as it is.
FORWARD_RETRIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_CONTROLLER})


class ControllerChannel:
    def __init__(
        self,
        rpc: RpcClient,
        controller_address_provider: Callable[[], Address | None],
        *,
        request_timeout_ms: int,
    ) -> None:
        self.rpc = rpc
        self.controller_address_provider = controller_address_provider
        self.request_timeout_ms = request_timeout_ms

    async def call(self, path: str, body: Mapping[str, Any], timeout_ms: int | None = None) -> dict[str, Any]:
        """The controller's answer (top-level error_code 0), or a KafkaError; each attempt bounded by
        `timeout_ms` (default: the channel's request timeout)."""
        attempt_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        address = self.controller_address_provider()
        if address is None:
            raise KafkaError("the active controller is not known yet", ErrorCode.NOT_CONTROLLER)
        try:
            return await self.rpc.call(address, path, body, timeout_ms=attempt_ms)
        except KafkaError as exc:
            hint = parse_address(exc.details.get("leader_address")) if exc.code == ErrorCode.NOT_CONTROLLER else None
            if hint is None or hint == tuple(address):
                raise
        return await self.rpc.call(hint, path, body, timeout_ms=attempt_ms)

    async def forward(self, path: str, body: Mapping[str, Any], timeout_ms: int) -> dict[str, Any]:
        """`call`, tried again with backoff while the controller is gone or unknown, for `timeout_ms` at most.

        Past the deadline: REQUEST_TIMED_OUT naming the last error (the request may still have been
        applied, as in Kafka). `timeout_ms` 0: one `call`, nothing waited out."""
        if timeout_ms <= 0:
            return await self.call(path, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        backoff = Backoff(100, 1_000)
        while True:
            attempt_ms = max(1, int(min((deadline - loop.time()) * 1000, self.request_timeout_ms)))
            try:
                return await self.call(path, body, attempt_ms)
            except KafkaError as exc:
                # An attempt that the deadline cut short timed out because the request's time ran out,
                # however little was left for it: that is the request's timeout, not the attempt's.
                cut_short = exc.code == ErrorCode.REQUEST_TIMED_OUT and attempt_ms < self.request_timeout_ms
                if exc.code not in FORWARD_RETRIABLE and not cut_short:
                    raise
                remaining_ms = (deadline - loop.time()) * 1000
                if remaining_ms <= 0 or cut_short:
                    raise KafkaError(
                        f"the controller did not answer within {timeout_ms} ms (last: {exc.message})",
                        ErrorCode.REQUEST_TIMED_OUT,
                    ) from None
                await asyncio.sleep(min(backoff.next_ms(), remaining_ms) / 1000)
