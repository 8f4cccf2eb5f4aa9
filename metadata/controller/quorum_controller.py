"""QuorumController: the controller facade the node shell drives (sans-I/O).

Design notes: docs/metadata.md, section "metadata/controller/quorum_controller.py".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kraftpy.metadata.controller import (
    config_control,
    leader_balance,
    producer_ids,
    register_control,
    replication_control,
)
from kraftpy.metadata.controller.cluster_control import ClusterControlManager, RecordBatch, check_broker_epoch
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ControllerResult,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    RegisterWriteRequest,
    UnregisterBrokerRequest,
)
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import NoOpRecord, PartitionChangeRecord
from kraftpy.protocol.errors import ErrorCode, KafkaError


class QuorumController:
    def __init__(
        self, config: ControllerConfig, *, rng: random.Random, image: MetadataImage = MetadataImage.EMPTY
    ) -> None:
        self.config = config
        self._rng = rng
        self._committed = image
        self._latest = image
        self._epoch: int | None = None
        self._leader_id: int | None = None
        self._leader_address: str | None = None
        self._cluster = ClusterControlManager(config)
        self._next_rebalance_ms = 0
        self._next_noop_ms = 0
        self._preferred_due_ms: int | None = None  # when waiting preferred elections run
        self._handlers: dict[type, Callable[[Any, int], ControllerResult]] = {
            BrokerRegistrationRequest: self.register_broker,
            BrokerHeartbeatRequest: self.broker_heartbeat,
            UnregisterBrokerRequest: self.unregister_broker,
            CreateTopicsRequest: self.create_topics,
            DeleteTopicsRequest: self.delete_topics,
            CreatePartitionsRequest: self.create_partitions,
            IncrementalAlterConfigsRequest: self.incremental_alter_configs,
            AlterPartitionRequest: self.alter_partition,
            ElectLeadersRequest: self.elect_leaders,
            AllocateProducerIdsRequest: self.allocate_producer_ids,
            RegisterWriteRequest: self.write_register,
        }

    # --- state ---------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self._epoch is not None

    @property
    def epoch(self) -> int | None:
        """The Raft epoch this controller is active in, or None."""
        return self._epoch

    @property
    def committed_image(self) -> MetadataImage:
        return self._committed

    @property
    def latest_image(self) -> MetadataImage:
        """The committed image plus this controller's uncommitted records (equal when inactive)."""
        return self._latest

    # --- Raft events -----------------------------------------------------------------------------
    def handle_commit(self, image: MetadataImage) -> None:
        """The committed image advanced (the shell replayed a committed batch)."""
        self._committed = image
        if not self.is_active:
            self._latest = image

    def activate(self, epoch: int, now_ms: int) -> None:
        """Become the active controller for Raft `epoch`; the committed image must include every
        record written before this epoch (the shell waits until it has replayed that far)."""
        self._epoch = epoch
        self._leader_id = None
        self._leader_address = None
        self._latest = self._committed
        self._cluster.activate(self._committed, now_ms)
        self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
        self._next_noop_ms = now_ms + self.config.metadata_max_idle_interval_ms
        self._preferred_due_ms = None

    def deactivate(self, leader_id: int | None = None, leader_address: str | None = None) -> None:
        """Stop being active: drop uncommitted state; answer NOT_CONTROLLER with this hint from now on."""
        self._epoch = None
        self._leader_id = leader_id
        self._leader_address = leader_address
        self._latest = self._committed

    def not_controller_error(self, *, refused: bool = False) -> KafkaError:
        """NOT_CONTROLLER with the leader hint. `refused`: the request was turned away before any of it
        was appended, so it can never take effect, and the answer says so (`appended: false`). Without
        it (a write pending when this node renounced) the outcome is unknown: the new leader may
        still commit what was appended."""
        hint = f"; the active controller is {self._leader_id}" if self._leader_id is not None else ""
        details: dict[str, Any] = {"leader_id": self._leader_id, "leader_address": self._leader_address}
        if refused:
            details["appended"] = False
        return KafkaError(f"This node is not the active controller{hint}", ErrorCode.NOT_CONTROLLER, **details)

    # --- writes --------------------------------------------------------------------------------
    def handle(self, request: Any, now_ms: int) -> ControllerResult:
        """Any write request, dispatched by type; reads go to `describe_configs`."""
        if isinstance(request, DescribeConfigsRequest):
            return ControllerResult((), self.describe_configs(request))
        handler = self._handlers.get(type(request))
        if handler is None:
            return ControllerResult(
                (), KafkaError(f"The controller does not handle {type(request).__name__}", ErrorCode.INVALID_REQUEST)
            )
        return handler(request, now_ms)

    def _write(self, now_ms: int, decide: Callable[[], ControllerResult]) -> ControllerResult:
        if not self.is_active:
            return ControllerResult((), self.not_controller_error(refused=True))
        try:
            result = decide()
        except KafkaError as e:
            return ControllerResult((), e)
        except (TypeError, ValueError, AttributeError) as e:
            # A field of the wrong type that validation did not name: answer, never crash
            # (decisions change nothing before they return, so there is nothing to undo).
            return ControllerResult((), KafkaError(f"Malformed request: {e}", ErrorCode.INVALID_REQUEST))
        return self._commit_locally(result, now_ms)

    def _commit_locally(self, result: ControllerResult, now_ms: int) -> ControllerResult:
        """Make the decision's records part of the latest (uncommitted) image."""
        if result.records:
            image = result.image if result.image is not None else apply_records(self._latest, result.records)
            self._latest = image
            self._next_noop_ms = now_ms + self.config.metadata_max_idle_interval_ms
        return result

    def register_broker(self, request: BrokerRegistrationRequest, now_ms: int) -> ControllerResult:
        return self._write(now_ms, lambda: self._cluster.register_broker(self._latest, request, now_ms))

    def broker_heartbeat(self, request: BrokerHeartbeatRequest, now_ms: int) -> ControllerResult:
        return self._write(
            now_ms, lambda: self._cluster.process_heartbeat(self._latest, self._committed, request, now_ms)
        )

    def unregister_broker(self, request: UnregisterBrokerRequest, now_ms: int) -> ControllerResult:
        return self._write(now_ms, lambda: self._cluster.unregister_broker(self._latest, request))

    def create_topics(self, request: CreateTopicsRequest, now_ms: int) -> ControllerResult:
        return self._write(
            now_ms, lambda: replication_control.create_topics(self._latest, request, self.config, self._rng)
        )

    def delete_topics(self, request: DeleteTopicsRequest, now_ms: int) -> ControllerResult:
        return self._write(now_ms, lambda: replication_control.delete_topics(self._latest, request))

    def create_partitions(self, request: CreatePartitionsRequest, now_ms: int) -> ControllerResult:
        return self._write(
            now_ms, lambda: replication_control.create_partitions(self._latest, request, self.config, self._rng)
        )

    def incremental_alter_configs(self, request: IncrementalAlterConfigsRequest, now_ms: int) -> ControllerResult:
        def decide() -> ControllerResult:
            result = config_control.incremental_alter_configs(self._latest, request)
            if not any(getattr(r, "name", None) == "min_insync_replicas" for r in result.records):
                return result
            batch = RecordBatch(self._latest)
            batch.add(*result.records)
            batch.add(*replication_control.changes_for_min_isr(batch.image, self.config.min_insync_replicas))
            return batch.result(result.response)

        return self._write(now_ms, decide)

    def alter_partition(self, request: AlterPartitionRequest, now_ms: int) -> ControllerResult:
        def decide() -> ControllerResult:
            check_broker_epoch(self._latest, request.broker_id, request.broker_epoch)
            return replication_control.alter_partition(self._latest, request, self.config.min_insync_replicas)

        return self._write(now_ms, decide)

    def elect_leaders(self, request: ElectLeadersRequest, now_ms: int) -> ControllerResult:
        return self._write(
            now_ms, lambda: replication_control.elect_leaders(self._latest, request, self.config.min_insync_replicas)
        )

    def allocate_producer_ids(self, request: AllocateProducerIdsRequest, now_ms: int) -> ControllerResult:
        return self._write(now_ms, lambda: producer_ids.allocate_producer_ids(self._latest, request))

    def write_register(self, request: RegisterWriteRequest, now_ms: int) -> ControllerResult:
        return self._write(now_ms, lambda: register_control.write_register(self._latest, request))

    # --- reads ---------------------------------------------------------------------------------
    def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return config_control.describe_configs(self._committed, request)

    # --- timers --------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> ControllerResult:
        """Session expiry (fencing), automatic preferred-leader rebalance, idle NoOp records."""
        if not self.is_active:
            return ControllerResult()
        batch = self._cluster.fence_stale_brokers(self._latest, now_ms)
        min_isr = self.config.min_insync_replicas
        batch.add(*leader_balance.unclean_elections(batch.image, min_isr))
        if self.config.auto_leader_rebalance_enable:
            batch.add(*self._due_preferred_elections(batch.image, now_ms))
        if self.config.auto_leader_rebalance_enable and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
            percentage = self.config.leader_imbalance_per_broker_percentage
            batch.add(*replication_control.imbalanced_partitions(batch.image, percentage, min_isr))
        if not batch.records and self.config.metadata_max_idle_interval_ms > 0 and now_ms >= self._next_noop_ms:
            batch.add(NoOpRecord())
        return self._commit_locally(batch.result(), now_ms)

    def _due_preferred_elections(self, image: MetadataImage, now_ms: int) -> list[PartitionChangeRecord]:
        """Preferred elections once some have waited preferred_leader_election_delay_ms (then all at once)."""
        pending = leader_balance.preferred_elections(image, self.config.min_insync_replicas)
        if not pending:
            self._preferred_due_ms = None
            return []
        if self._preferred_due_ms is None:
            self._preferred_due_ms = now_ms + self.config.preferred_leader_election_delay_ms
        if now_ms < self._preferred_due_ms:
            return []
        self._preferred_due_ms = None
        return pending

    def next_deadline_ms(self, now_ms: int) -> int | None:
        """When `tick` next has something to do (None when inactive)."""
        if not self.is_active:
            return None
        deadlines = [self._cluster.next_expiry_ms(self._latest, now_ms)]
        if self.config.auto_leader_rebalance_enable:
            deadlines.append(self._next_rebalance_ms)
            deadlines.append(self._preferred_due_ms)
        if self.config.metadata_max_idle_interval_ms > 0:
            deadlines.append(self._next_noop_ms)
        return min((d for d in deadlines if d is not None), default=None)
