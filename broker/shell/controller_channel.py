"""Calls from the broker to the active controller, following NOT_CONTROLLER hints.

Kafka's NodeToControllerChannelManager in one function: ask the address the
broker currently believes is the active controller; when the answer is
NOT_CONTROLLER with a `details.leader_address` hint, ask that address once
more right away (the hint usually comes from a controller that just lost
the election). Everything else is the caller's to retry with its own
backoff; the provider will know the new controller once the metadata quorum
does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import Address, parse_address


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

    async def call(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The controller's answer (top-level error_code 0), or a KafkaError."""
        address = self.controller_address_provider()
        if address is None:
            raise KafkaError("the active controller is not known yet", ErrorCode.NOT_CONTROLLER)
        try:
            return await self.rpc.call(address, path, body, timeout_ms=self.request_timeout_ms)
        except KafkaError as exc:
            hint = parse_address(exc.details.get("leader_address")) if exc.code == ErrorCode.NOT_CONTROLLER else None
            if hint is None or hint == tuple(address):
                raise
        return await self.rpc.call(hint, path, body, timeout_ms=self.request_timeout_ms)
