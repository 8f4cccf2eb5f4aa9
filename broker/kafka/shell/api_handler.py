"""What an API-family module exports: one ApiHandler per Kafka API key it serves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """One Kafka API: its handler, and its error response (request, version, error) -> response.

    The error response carries the error for every item of the request, as
    Kafka's getErrorResponse; the dispatcher sends it when the handler raises.
    """

    handle: Callable[[BrokerApis, RequestContext, Any], Awaitable[Any]]
    error_response: Callable[[Any, int, KafkaError], Any]


def through_handler(
    name: str, to_body: Callable[[Any, int], dict[str, Any]], to_response: Callable[[int, Any], Any]
) -> Callable[[BrokerApis, RequestContext, Any], Awaitable[Any]]:
    """A handle that translates the request, calls the broker's handler `name` and translates its answer."""

    async def handle(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
        version = ctx.header.api_version
        return to_response(version, await apis.handler(name)(to_body(request, version)) or {})

    return handle
