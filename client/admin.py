"""The asyncio AdminClient: topics, partitions, configs, leader elections, cluster and quorum.

Controller calls (`/controller/...`) go to the active controller and follow
NOT_CONTROLLER's leader hint; retriable failures are retried with backoff
until default_api_timeout_ms. Topic listings and descriptions come from
broker metadata. Batched calls return one result per item (an error does not
hide the others); `raise_for(what, results)` turns failures
into one exception when that is what the caller wants.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kraftpy.client import admin_protocol as proto
from kraftpy.client.admin_types import (
    AdminOperationError,
    AlterConfigOp,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreateTopicResult,
    NewTopic,
    OperationResult,
    PartitionDescription,
    QuorumInfo,
    TopicDescription,
)
from kraftpy.client.cluster_client import ClusterClient, monotonic_ms
from kraftpy.client.config import admin_config, parse_bootstrap_servers
from kraftpy.client.errors import KafkaTimeoutError, is_retriable
from kraftpy.client.metadata import Cluster, Metadata
from kraftpy.client.types import TopicPartition, as_topic_partition
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.rpc import Backoff

log = logging.getLogger(__name__)


def raise_for(what: str, results: Mapping[Any, OperationResult]) -> None:
    """Raise AdminOperationError when any item failed."""
    errors = {key: r.error for key, r in results.items() if r.error is not None}
    if errors:
        raise AdminOperationError(what, errors)


class AdminClient:
    def __init__(self, bootstrap_servers: Any, **config: Any) -> None:
        self.config = admin_config(config)
        cfg = self.config
        self._metadata = Metadata(
            parse_bootstrap_servers(bootstrap_servers),
            metadata_max_age_ms=cfg["metadata_max_age_ms"],
            refresh_backoff_ms=cfg["retry_backoff_ms"],
            refresh_backoff_max_ms=cfg["retry_backoff_max_ms"],
            all_topics=True,
        )
        self._locator = proto.ControllerLocator(self._metadata)
        self._cluster: ClusterClient | None = None

    async def start(self) -> None:
        if self._cluster is None:
            self._cluster = ClusterClient(self._metadata, request_timeout_ms=self.config["request_timeout_ms"])
            self._cluster.start()

    async def __aenter__(self) -> AdminClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._cluster is not None:
            await self._cluster.close()
            self._cluster = None

    # Plumbing --------------------------------------------------------------

    def _timeout(self, timeout_ms: float | None) -> float:
        return self.config["default_api_timeout_ms"] if timeout_ms is None else timeout_ms

    async def _controller_call(self, path: str, body: Mapping[str, Any], timeout_ms: float | None) -> dict[str, Any]:
        """Call the active controller, following leader hints and retrying until the timeout."""
        await self.start()
        assert self._cluster is not None
        timeout = self._timeout(timeout_ms)
        deadline = monotonic_ms() + timeout
        backoff = Backoff(self.config["retry_backoff_ms"], self.config["retry_backoff_max_ms"], rng=random.Random())
        if self._metadata.update_version == 0:
            # Give metadata a moment to name the controller, no more: controller-only nodes serve no
            # metadata, and any node answers NOT_CONTROLLER with the active controller's address.
            await self._cluster.wait_for_version(0, min(timeout, self.config["retry_backoff_max_ms"]))
        last: KafkaError | None = None
        while True:
            address = self._locator.target(monotonic_ms())
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{path} did not complete within {timeout} ms (last error: {last})")
            try:
                answer = await self._cluster.call(
                    address, path, body, timeout_ms=int(min(remaining, self.config["request_timeout_ms"]))
                )
            except KafkaError as exc:
                last = exc
                if proto.is_not_controller(exc):
                    if self._locator.on_not_controller(exc, address, monotonic_ms()):
                        continue
                elif exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    self._locator.on_unreachable(address, monotonic_ms())
                    self._cluster.wake()
                elif not is_retriable(exc.code):
                    raise
                await asyncio.sleep(min(backoff.next_ms(), max(0.0, deadline - monotonic_ms())) / 1000)
                continue
            self._locator.on_success(address)
            return answer

    async def _cluster_snapshot(self, timeout_ms: float | None) -> Cluster:
        await self.start()
        assert self._cluster is not None
        timeout = self._timeout(timeout_ms)
        if not await self._cluster.refresh_now(timeout):
            raise KafkaTimeoutError(
                f"no metadata within {timeout} ms (last error: {self._cluster.last_error or 'none'})"
            )
        return self._metadata.cluster

    # Topics ----------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool = False, timeout_ms: float | None = None
    ) -> dict[str, CreateTopicResult]:
        answer = await self._controller_call(
            proto.CONTROLLER + "create_topics", proto.create_topics_request(topics, validate_only), timeout_ms
        )
        results = proto.parse_create_topics(answer)
        if not validate_only:
            self._metadata.request_update()
        return results

    async def delete_topics(self, names: Iterable[str], timeout_ms: float | None = None) -> dict[str, OperationResult]:
        answer = await self._controller_call(
            proto.CONTROLLER + "delete_topics", {"topic_names": list(names)}, timeout_ms
        )
        self._metadata.request_update()
        return proto.parse_named_results(answer)

    async def create_partitions(
        self, new_counts: Mapping[str, int], validate_only: bool = False, timeout_ms: float | None = None
    ) -> dict[str, OperationResult]:
        """Grow topics to the given total partition counts."""
        body = {"topics": [{"name": n, "count": c} for n, c in new_counts.items()], "validate_only": validate_only}
        answer = await self._controller_call(proto.CONTROLLER + "create_partitions", body, timeout_ms)
        self._metadata.request_update()
        return proto.parse_named_results(answer)

    async def list_topics(self, timeout_ms: float | None = None) -> set[str]:
        cluster = await self._cluster_snapshot(timeout_ms)
        return cluster.topics | set(cluster.topic_errors)

    async def describe_topics(
        self, names: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, TopicDescription]:
        """Descriptions from metadata; a missing topic raises UNKNOWN_TOPIC_OR_PARTITION naming it."""
        cluster = await self._cluster_snapshot(timeout_ms)
        out = {}
        for name in names:
            partitions = cluster.partitions_for_topic(name)
            if not partitions:
                code = cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise KafkaError(f"topic {name!r} does not exist or has no partitions", code)
            out[name] = TopicDescription(
                name,
                cluster.topic_ids.get(name),
                tuple(
                    PartitionDescription(
                        p.partition, p.leader_id if p.has_leader else None, p.leader_epoch, p.replicas, p.isr
                    )
                    for p in partitions
                ),
            )
        return out

    async def describe_cluster(self, timeout_ms: float | None = None) -> ClusterDescription:
        cluster = await self._cluster_snapshot(timeout_ms)
        brokers = tuple(
            BrokerDescription(b.node_id, b.host, b.port, b.rack)
            for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)
        )
        return ClusterDescription(cluster.cluster_id, cluster.controller_id, brokers)

    # Configs ---------------------------------------------------------------

    async def describe_configs(
        self, resources: Sequence[ConfigResource], timeout_ms: float | None = None
    ) -> dict[ConfigResource, list[ConfigEntry] | KafkaError]:
        answer = await self._controller_call(
            proto.CONTROLLER + "describe_configs", proto.describe_configs_request(resources), timeout_ms
        )
        return proto.parse_describe_configs(answer, list(resources))

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        validate_only: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, OperationResult]:
        answer = await self._controller_call(
            proto.CONTROLLER + "incremental_alter_configs",
            proto.alter_configs_request(changes, validate_only),
            timeout_ms,
        )
        return proto.parse_alter_configs(answer, list(changes))

    alter_configs = incremental_alter_configs

    # Leaders and quorum ----------------------------------------------------

    async def elect_leaders(
        self,
        election_type: str = "preferred",
        partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OperationResult]:
        """Elect preferred (or, with data-loss risk, unclean) leaders; None means every partition."""
        wanted = None if partitions is None else [as_topic_partition(tp) for tp in partitions]
        answer = await self._controller_call(
            proto.CONTROLLER + "elect_leaders", proto.elect_leaders_request(election_type, wanted), timeout_ms
        )
        self._metadata.request_update()
        return proto.parse_elect_leaders(answer)

    async def describe_quorum(self, timeout_ms: float | None = None) -> QuorumInfo:
        answer = await self._controller_call(proto.CONTROLLER + "describe_quorum", {}, timeout_ms)
        return proto.parse_describe_quorum(answer)


__all__ = ["AdminClient", "AdminOperationError", "raise_for"]
