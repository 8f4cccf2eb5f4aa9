"""The broker's Kafka request dispatcher (Kafka's KafkaApis): each decoded request to its API's handler.

A handler is an `ApiHandler` from one of the API-family modules listed in
`FAMILIES`; it gets the `BrokerApis` (the broker's replica manager, its request handlers,
the metadata image, the channel to the controller) and the request, and
returns the response object. A KafkaError or a bug in a handler becomes that
API's error response (the error for every item, as Kafka's getErrorResponse),
so one bad request costs its client an error and nobody else anything.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kraftpy.broker.kafka.api_versions import api_versions_answer, unsupported_version_answer
from kraftpy.broker.kafka.shell.api_handler import ApiHandler
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import (
    API_VERSIONS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_TOPIC_PARTITIONS,
    FETCH,
    LIST_GROUPS,
    LIST_TRANSACTIONS,
    METADATA,
    OFFSET_FETCH,
    SUPPORTED_APIS,
)
from kraftpy.protocol.kafka.codec import RequestHeader
from kraftpy.protocol.kafka.shell.listener import CLOSE_CONNECTION, RequestContext

log = logging.getLogger(__name__)


# The modules that each export HANDLERS: dict[api_key, ApiHandler].
FAMILIES = (
    "kraftpy.broker.kafka.shell.cluster_apis",
    "kraftpy.broker.kafka.shell.data_apis",
    "kraftpy.broker.kafka.shell.group_apis",
    "kraftpy.broker.kafka.shell.admin_apis",
    "kraftpy.broker.kafka.shell.txn_apis",
    "kraftpy.broker.kafka.shell.txn_marker_apis",
)


def load_handlers(families: tuple[str, ...] = FAMILIES) -> dict[int, ApiHandler]:
    handlers: dict[int, ApiHandler] = {}
    for name in families:
        module = importlib.import_module(name)
        for api_key, handler in module.HANDLERS.items():
            if api_key in handlers:
                raise RuntimeError(f"API key {api_key} is handled twice ({name})")
            handlers[api_key] = handler
    return handlers


class BrokerApis:
    """What a handler may use of its broker; the listener's KafkaApis."""

    def __init__(self, broker: Any, handlers: Mapping[int, ApiHandler] | None = None) -> None:
        self.broker = broker
        self.node = broker.node
        self.config = broker.node.config
        self.broker_id: int = broker.node.config.node_id
        self.cluster_id: str = broker.node.cluster_id
        self.handlers = dict(handlers) if handlers is not None else load_handlers()
        # One at a time per API per connection (the listener's bound on answers a client leaves unread):
        # Fetch answers carry up to 32 MiB of records, and these others grow with the cluster (every
        # topic, every partition a group committed, every group or transaction; DescribeTopicPartitions
        # up to its 2000-partition page), not with the request.
        self.one_at_a_time_api_keys = frozenset(
            {
                FETCH,
                METADATA,
                OFFSET_FETCH,
                LIST_GROUPS,
                DESCRIBE_LOG_DIRS,
                LIST_TRANSACTIONS,
                DESCRIBE_TOPIC_PARTITIONS,
            }
        )
        self.served = frozenset({API_VERSIONS, *self.handlers})
        self.requests_by_api: dict[int, int] = {}
        self.errors_by_api: dict[int, int] = {}

    # --- what handlers use ------------------------------------------------------------------------
    @property
    def replica_manager(self) -> Any:
        rm = self.broker.replica_manager
        if rm is None:
            raise KafkaError("this broker serves no data", ErrorCode.BROKER_NOT_AVAILABLE)
        return rm

    def image(self) -> Any:
        return self.broker.metadata.image

    def handler(self, name: str) -> Callable[[dict[str, Any]], Awaitable[Mapping[str, Any] | None]]:
        """The broker's request handler `name` (`produce`, `join_group`, ...; ReplicaManager.handlers)."""
        return self.replica_manager.handlers()[name]

    async def call_controller(self, path: str, body: Mapping[str, Any], timeout_ms: int = 0) -> dict[str, Any]:
        """Forward to the active controller (Kafka brokers forward admin requests in KRaft), waiting out a
        controller failover for the request's `timeout_ms` (0: the broker's controller_forward_timeout_ms)."""
        rm = self.replica_manager
        deadline_ms = timeout_ms if timeout_ms > 0 else rm.settings.controller_forward_timeout_ms
        return await rm.controller_channel.forward(path, body, deadline_ms)

    # --- KafkaApis ------------------------------------------------------------------------------
    async def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        api_key, version = ctx.header.api_key, ctx.header.api_version
        self.requests_by_api[api_key] = self.requests_by_api.get(api_key, 0) + 1
        if api_key == API_VERSIONS:
            return api_versions_answer(request, version, self.served)
        handler = self.handlers.get(api_key)
        if handler is None:  # decodable but not advertised (no handler in this build): as an unknown API
            log.info("closing %s:%d: %s is not served", ctx.client_host, ctx.client_port, SUPPORTED_APIS[api_key].name)
            return CLOSE_CONNECTION
        try:
            return await handler.handle(self, ctx, request)
        except KafkaError as exc:
            self.errors_by_api[api_key] = self.errors_by_api.get(api_key, 0) + 1
            return handler.error_response(request, version, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: the client gets UNKNOWN_SERVER_ERROR, the broker goes on
            log.exception("%s v%d from %s failed", SUPPORTED_APIS[api_key].name, version, ctx.client_host)
            self.errors_by_api[api_key] = self.errors_by_api.get(api_key, 0) + 1
            error = KafkaError(f"{type(exc).__name__}: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR)
            return handler.error_response(request, version, error)

    def answer_undecodable(self, error: KafkaError) -> tuple[RequestHeader, Any] | None:
        if error.details.get("api_key") == API_VERSIONS and error.code == ErrorCode.UNSUPPORTED_VERSION:
            return unsupported_version_answer(int(error.details["correlation_id"]), self.served)
        return None

    def status(self) -> dict[str, Any]:
        names = {k: r.name for k, r in SUPPORTED_APIS.items()}
        return {
            "requests": {names.get(k, str(k)): n for k, n in sorted(self.requests_by_api.items())},
            "errors": {names.get(k, str(k)): n for k, n in sorted(self.errors_by_api.items())},
        }
