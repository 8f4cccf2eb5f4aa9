"""The asyncio AdminClient: topics, partitions, configs, leader elections, cluster, quorum and consumer groups.

Controller calls (`/controller/...`) go to the active controller and follow
NOT_CONTROLLER's leader hint; retriable failures are retried with backoff
until default_api_timeout_ms. Group calls go to the group's coordinator,
found with FindCoordinator; NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
lost connections look it up again, COORDINATOR_LOAD_IN_PROGRESS waits, both
with backoff until default_api_timeout_ms. ListGroups asks every broker and
merges their answers, as Kafka. Topic listings come from broker metadata,
descriptions from DescribeTopicPartitions (with ELR) or else Metadata.
Batched calls return one result per item (an error does not hide the
others); `raise_for(what, results)` turns failures into one exception.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kraftpy.client.admin import describe_topics as describe
from kraftpy.client.admin import protocol as proto
from kraftpy.client.admin import transactions as txn_admin
from kraftpy.client.admin.types import (
    AdminOperationError,
    AlterConfigOp,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupDescription,
    CreateTopicResult,
    ListConsumerGroupsResult,
    NewTopic,
    OperationResult,
    TopicDescription,
)
from kraftpy.client.config import admin_config, parse_bootstrap_servers
from kraftpy.client.errors import KafkaTimeoutError, error_from, is_retriable
from kraftpy.client.group.commits import OffsetAndMetadata, commit_body, fetch_body, parse_fetch
from kraftpy.client.group.protocol import Node, find_coordinator_body, parse_find_coordinator
from kraftpy.client.metadata import Cluster, Metadata
from kraftpy.client.shell.cluster_client import ClusterClient
from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.types import TopicPartition, as_topic_partition

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
            self._cluster = ClusterClient(
                self._metadata,
                request_timeout_ms=self.config["request_timeout_ms"],
                client_id=self.config["client_id"],
            )
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

    def _backoff(self) -> Backoff:
        return Backoff(self.config["retry_backoff_ms"], self.config["retry_backoff_max_ms"], rng=random.Random())

    async def _controller_call(self, path: str, body: Mapping[str, Any], timeout_ms: float | None) -> dict[str, Any]:
        """Call the active controller, following leader hints and retrying until the timeout."""
        await self.start()
        assert self._cluster is not None
        timeout = self._timeout(timeout_ms)
        deadline = monotonic_ms() + timeout
        backoff = self._backoff()
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
                if (not_controller := proto.not_controller_in(answer)) is not None:
                    raise not_controller
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
        """Each topic's partitions, with their eligible leader replicas where the broker asked serves
        DescribeTopicPartitions (KIP-966), else from Metadata as before it; a missing topic raises
        UNKNOWN_TOPIC_OR_PARTITION naming it."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        await self.start()
        assert self._cluster is not None
        deadline, timeout = self._deadline(timeout_ms)
        backoff = self._backoff()
        last: KafkaError | None = None
        while True:
            use_metadata = False
            for address in self._metadata.candidates(monotonic_ms()):
                remaining = deadline - monotonic_ms()
                if remaining <= 0:
                    break
                try:
                    versions = await self._cluster.api_versions(
                        address, timeout_ms=int(min(remaining, self.config["request_timeout_ms"]))
                    )
                    if not describe.uses_describe_topic_partitions(versions):
                        use_metadata = True
                        break
                    return await self._describe_topic_partitions(address, wanted, deadline, timeout)
                except KafkaTimeoutError:
                    raise
                except KafkaError as exc:
                    if exc.code == ErrorCode.UNSUPPORTED_VERSION:  # it stopped serving the API since we connected
                        use_metadata = True
                        break
                    if exc.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                        raise
                    last = exc
                    self._metadata.node_failed(address, monotonic_ms())
            if use_metadata:
                return describe.from_metadata(await self._cluster_snapshot(max(1.0, deadline - monotonic_ms())), wanted)
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"describe_topics did not complete within {timeout} ms (last error: {last})")
            await asyncio.sleep(min(backoff.next_ms(), remaining) / 1000)

    async def _describe_topic_partitions(
        self, address: tuple[str, int], names: list[str], deadline: float, timeout: float
    ) -> dict[str, TopicDescription]:
        """Every page from one broker, so the pages follow one image's cursor."""
        assert self._cluster is not None
        paging = describe.TopicPartitionsPaging(names)
        while not paging.done:
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"describe_topics did not complete within {timeout} ms ({paging.pages} pages read)"
                )
            answer = await self._cluster.call(
                address,
                describe.DESCRIBE_TOPIC_PARTITIONS_PATH,
                paging.request(),
                timeout_ms=int(min(remaining, self.config["request_timeout_ms"])),
            )
            paging.on_answer(answer)
        self._metadata.node_succeeded(address)
        return paging.descriptions()

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

    # Consumer groups -------------------------------------------------------

    async def _find_coordinator(self, group_id: str, remaining_ms: float, key_type: int = 0) -> Node:
        assert self._cluster is not None
        answer = await self._cluster.call_any(
            proto.GROUP_ADMIN_PATHS["find_coordinator"],
            {**find_coordinator_body(group_id), "key_type": key_type},
            timeout_ms=int(min(remaining_ms, self.config["request_timeout_ms"])),
        )
        code, message, node = parse_find_coordinator(answer)
        if node is None:
            raise error_from(code, message)
        return node

    async def _group_call(
        self, group_id: str, api: str, body: Mapping[str, Any], deadline: float, timeout: float, key_type: int = 0
    ) -> tuple[dict[str, Any], int]:
        """Send `api` to the coordinator of `group_id`; the answer and the coordinator's node id.

        Coordinator errors (in the answer, or a lost connection) are retried with backoff until `deadline`;
        any other answer, errors included, is the caller's to read.
        """
        await self.start()
        assert self._cluster is not None
        backoff = self._backoff()
        coordinator: Node | None = None
        last: KafkaError | None = None
        while True:
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"{api} for group {group_id!r} did not complete within {timeout} ms (last error: {last})"
                )
            try:
                if coordinator is None:
                    coordinator = await self._find_coordinator(group_id, remaining, key_type)
                answer = await self._cluster.call(
                    coordinator.address,
                    proto.GROUP_ADMIN_PATHS.get(api, api),
                    body,
                    timeout_ms=int(min(max(1.0, deadline - monotonic_ms()), self.config["request_timeout_ms"])),
                    raise_errors=False,
                )
                error = proto.coordinator_error(answer) or proto.top_level_error(answer)
                if error is not None:
                    raise error
                return answer, coordinator.node_id
            except KafkaError as exc:
                last = exc
                if exc.code in proto.FIND_AGAIN:
                    coordinator = None
                elif exc.code not in proto.WAIT:
                    raise
                log.debug("%s for group %r: %s; retrying", api, group_id, exc)
            await asyncio.sleep(min(backoff.next_ms(), max(0.0, deadline - monotonic_ms())) / 1000)

    def _deadline(self, timeout_ms: float | None) -> tuple[float, float]:
        timeout = self._timeout(timeout_ms)
        return monotonic_ms() + timeout, timeout

    async def list_consumer_groups(
        self, states: Iterable[str] | None = None, timeout_ms: float | None = None
    ) -> ListConsumerGroupsResult:
        """Every broker's consumer groups (optionally only those in `states`, e.g. ["Stable"]), merged.

        A broker that cannot answer within the timeout is reported in `errors`; `.all()` raises then.
        """
        deadline, timeout = self._deadline(timeout_ms)
        cluster = await self._cluster_snapshot(timeout)
        assert self._cluster is not None
        body = proto.list_groups_request(states)

        async def ask(address: tuple[str, int]) -> list[Any]:
            backoff = self._backoff()
            last: KafkaError | None = None
            while True:
                assert self._cluster is not None
                remaining = deadline - monotonic_ms()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"list_groups did not complete within {timeout} ms (last error: {last})")
                try:
                    answer = await self._cluster.call(
                        address,
                        proto.GROUP_ADMIN_PATHS["list_groups"],
                        body,
                        timeout_ms=int(min(remaining, self.config["request_timeout_ms"])),
                        raise_errors=False,
                    )
                    error = proto.top_level_error(answer)
                    if error is None:
                        return proto.parse_list_groups(answer)
                    raise error
                except KafkaError as exc:
                    if not is_retriable(exc.code):
                        raise
                    last = exc
                await asyncio.sleep(min(backoff.next_ms(), max(0.0, deadline - monotonic_ms())) / 1000)

        brokers = sorted(cluster.brokers.values(), key=lambda b: b.node_id)
        answers = await asyncio.gather(*(ask(b.address) for b in brokers), return_exceptions=True)
        valid, errors = [], {}
        for broker, answer in zip(brokers, answers, strict=True):
            if isinstance(answer, KafkaError):
                errors[broker.node_id] = answer
            elif isinstance(answer, BaseException):
                raise answer
            else:
                valid.append(answer)
        return ListConsumerGroupsResult(proto.merge_group_listings(valid), errors)

    async def describe_consumer_groups(
        self, group_ids: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, ConsumerGroupDescription | KafkaError]:
        """Each group's state, assignor and members with their decoded assignments, from its coordinator.

        A group that does not exist is described with state "Dead" (Kafka's answer); a group whose
        coordinator cannot be reached in time gets its KafkaError.
        """
        deadline, timeout = self._deadline(timeout_ms)

        async def one(group_id: str) -> ConsumerGroupDescription | KafkaError:
            try:
                answer, node = await self._group_call(
                    group_id, "describe_groups", {"groups": [group_id]}, deadline, timeout
                )
            except KafkaError as exc:
                return exc
            return proto.parse_describe_group(answer, group_id, node)

        ids = list(dict.fromkeys(group_ids))
        return dict(zip(ids, await asyncio.gather(*(one(g) for g in ids)), strict=True))

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets: of `partitions` (None where there is none), or every committed one."""
        deadline, timeout = self._deadline(timeout_ms)
        wanted = () if partitions is None else tuple(sorted({as_topic_partition(tp) for tp in partitions}))
        body = {"group_id": group_id, "topics": None} if partitions is None else fetch_body(group_id, wanted)
        answer, _ = await self._group_call(group_id, "offset_fetch", body, deadline, timeout)
        code, message, offsets = parse_fetch(answer, wanted)
        if code is not ErrorCode.NONE:
            raise error_from(code, message)
        return offsets

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int],
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OperationResult]:
        """Commit `offsets` for a group with no active members (generation -1, no member id, as Kafka).

        The coordinator refuses a group with members: UNKNOWN_MEMBER_ID for every partition.
        """
        deadline, timeout = self._deadline(timeout_ms)
        wanted = {
            as_topic_partition(tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
            for tp, om in offsets.items()
        }
        body = commit_body(group_id, -1, "", None, wanted)
        answer, _ = await self._group_call(group_id, "offset_commit", body, deadline, timeout)
        return proto.parse_offset_commit_results(answer)

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, OperationResult]:
        """Delete groups with their offsets: only Empty ones (NON_EMPTY_GROUP), existing ones (GROUP_ID_NOT_FOUND)."""
        deadline, timeout = self._deadline(timeout_ms)

        async def one(group_id: str) -> OperationResult:
            try:
                answer, _ = await self._group_call(
                    group_id, "delete_groups", proto.delete_groups_request([group_id]), deadline, timeout
                )
            except KafkaError as exc:
                return OperationResult(group_id, exc)
            result = proto.parse_delete_groups(answer).get(group_id)
            if result is None:
                return OperationResult(group_id, KafkaError("no result in the answer", ErrorCode.CORRUPT_MESSAGE))
            return result

        ids = list(dict.fromkeys(group_ids))
        return dict(zip(ids, await asyncio.gather(*(one(g) for g in ids)), strict=True))

    # Transactions (kafka-transactions.sh's list and describe) -------------

    async def list_transactions(
        self,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        duration_filter_ms: int = -1,
        timeout_ms: float | None = None,
    ) -> list[txn_admin.TransactionListing]:
        """Every transactional id the coordinators know (filtered by state, producer id, or running longer
        than `duration_filter_ms`), from every broker, merged. A broker that does not answer in time is an error."""
        deadline, timeout = self._deadline(timeout_ms)
        cluster = await self._cluster_snapshot(timeout)
        body = txn_admin.list_transactions_body(states, producer_ids, duration_filter_ms)

        async def ask(node_id: int, address: tuple[str, int]) -> list[txn_admin.TransactionListing]:
            backoff = self._backoff()
            while True:
                assert self._cluster is not None
                remaining = deadline - monotonic_ms()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"list_transactions on node {node_id} did not complete within {timeout} ms")
                try:
                    answer = await self._cluster.call(
                        address,
                        txn_admin.LIST_TRANSACTIONS_PATH,
                        body,
                        timeout_ms=int(min(remaining, self.config["request_timeout_ms"])),
                        raise_errors=False,
                    )
                    return txn_admin.parse_list_transactions(answer, node_id)
                except KafkaError as exc:
                    if not is_retriable(exc.code):
                        raise
                await asyncio.sleep(min(backoff.next_ms(), max(0.0, deadline - monotonic_ms())) / 1000)

        brokers = sorted(cluster.brokers.values(), key=lambda b: b.node_id)
        answers = await asyncio.gather(*(ask(b.node_id, b.address) for b in brokers))
        return txn_admin.merge_listings(answers)

    async def describe_transactions(
        self, transactional_ids: Iterable[str], timeout_ms: float | None = None
    ) -> dict[str, txn_admin.TransactionDescription | KafkaError]:
        """Each id's state, producer id and epoch, timeout, start time and partitions, from its coordinator."""
        deadline, timeout = self._deadline(timeout_ms)

        async def one(txn_id: str) -> txn_admin.TransactionDescription | KafkaError:
            try:
                answer, node = await self._group_call(
                    txn_id,
                    txn_admin.DESCRIBE_TRANSACTIONS_PATH,
                    {"transactional_ids": [txn_id]},
                    deadline,
                    timeout,
                    key_type=txn_admin.TRANSACTION_KEY_TYPE,
                )
            except KafkaError as exc:
                return exc
            return txn_admin.parse_describe_transaction(answer, txn_id, node)

        ids = list(dict.fromkeys(transactional_ids))
        return dict(zip(ids, await asyncio.gather(*(one(t) for t in ids)), strict=True))


__all__ = ["AdminClient", "AdminOperationError", "raise_for"]
