"""Cluster control: broker registration, heartbeats, fencing and controlled shutdown.

Design notes: docs/metadata.md, section "metadata/controller/cluster_control.py".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.replication_control import (
    changes_for_offline_replicas,
    changes_for_unusable_broker,
    changes_for_usable_broker,
)
from kraftpy.metadata.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerResult,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import BrokerRegistration, MetadataImage
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    Listener,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
    """The broker's registration, or BROKER_ID_NOT_REGISTERED / STALE_BROKER_EPOCH (INVALID_REQUEST if not ints)."""
    # Strictly ints: True == 1 in Python, and a bool that matched would be written into a record that
    # no node can decode (found by test_controller_malformed).
    if type(broker_id) is not int or type(broker_epoch) is not int:
        raise KafkaError(
            f"broker id and epoch must be integers, got {broker_id!r} and {broker_epoch!r}", ErrorCode.INVALID_REQUEST
        )
    registration = image.broker(broker_id)
    if registration is None:
        raise KafkaError(f"Broker {broker_id} is not registered", ErrorCode.BROKER_ID_NOT_REGISTERED)
    if registration.broker_epoch != broker_epoch:
        raise KafkaError(
            f"Broker {broker_id} sent epoch {broker_epoch}, but its current epoch is {registration.broker_epoch}",
            ErrorCode.STALE_BROKER_EPOCH,
        )
    return registration


class RecordBatch:
    """Records of one decision, with the image they lead to (later steps decide on it)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.records: list[MetadataRecord] = []

    def add(self, *records: MetadataRecord) -> None:
        if records:
            self.records.extend(records)
            self.image = apply_records(self.image, records)

    def result(self, response: object = None) -> ControllerResult:
        return ControllerResult(tuple(self.records), response, self.image)


@dataclass
class BrokerHeartbeatManager:
    """Soft state of the active controller: last contact per broker and controlled-shutdown progress."""

    last_contact_ms: dict[int, int] = field(default_factory=dict)
    # Committed offset at which a broker in controlled shutdown was first seen leading nothing;
    # it may shut down once it has replayed the log that far.
    shutdown_offset: dict[int, int] = field(default_factory=dict)

    def reset(self, image: MetadataImage, now_ms: int) -> None:
        self.last_contact_ms = dict.fromkeys(image.brokers, now_ms)
        self.shutdown_offset.clear()

    def touch(self, broker_id: int, now_ms: int) -> None:
        self.last_contact_ms[broker_id] = now_ms

    def forget(self, broker_id: int) -> None:
        self.last_contact_ms.pop(broker_id, None)
        self.shutdown_offset.pop(broker_id, None)

    def deadline_ms(self, broker_id: int, now_ms: int, timeout_ms: int) -> int:
        return self.last_contact_ms.setdefault(broker_id, now_ms) + timeout_ms


class ClusterControlManager:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.min_isr = config.min_insync_replicas  # topics without their own min.insync.replicas
        self.heartbeats = BrokerHeartbeatManager()

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        self.heartbeats.reset(image, now_ms)

    # --- registration ------------------------------------------------------------------------
    def register_broker(
        self, image: MetadataImage, request: BrokerRegistrationRequest, now_ms: int
    ) -> ControllerResult:
        if request.cluster_id != self.config.cluster_id:
            raise KafkaError(
                f"Expected cluster ID {self.config.cluster_id}, but got cluster ID {request.cluster_id}",
                ErrorCode.INCONSISTENT_CLUSTER_ID,
            )
        broker_id = request.broker_id
        if not isinstance(broker_id, int) or isinstance(broker_id, bool) or broker_id < 0:
            raise KafkaError(f"Invalid broker id {broker_id!r}", ErrorCode.INVALID_REQUEST)
        if not isinstance(request.incarnation_id, str) or not request.incarnation_id:
            raise KafkaError("A registration needs a non-empty incarnation id", ErrorCode.INVALID_REQUEST)
        listeners = tuple(request.listeners)
        if not all(isinstance(x, Listener) for x in listeners) or len({x.name for x in listeners}) != len(listeners):
            raise KafkaError("Listeners must be distinct by name", ErrorCode.INVALID_REQUEST)
        existing = image.broker(broker_id)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            if existing.listeners != listeners or existing.rack != request.rack:
                raise KafkaError(
                    f"Broker {broker_id} incarnation {request.incarnation_id} is already registered with other "
                    "listeners or rack; a restarted broker must use a new incarnation id",
                    ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                )
            self.heartbeats.touch(broker_id, now_ms)
            return ControllerResult((), BrokerRegistrationResponse(existing.broker_epoch))
        epoch = image.cluster.next_broker_epoch
        batch = RecordBatch(image)
        if existing is not None:
            # The old incarnation is gone: fence it and move what it held *before* the new registration.
            # A large decision may span several Raft batches, and the restarted broker acts on no image
            # before the one holding its new registration, so every image that holds it must already
            # hold these moves. Unless the broker names its last epoch (its logs hold all it
            # acknowledged: KIP-966's PreviousBrokerEpoch), it may have lost unsynced tails, and it
            # leaves the eligible leader replicas too.
            clean = request.previous_broker_epoch == existing.broker_epoch
            if not existing.fenced:
                batch.add(FenceBrokerRecord(broker_id, existing.broker_epoch))
            batch.add(*changes_for_unusable_broker(batch.image, broker_id, self.min_isr, unclean_shutdown=not clean))
        batch.add(RegisterBrokerRecord(broker_id, request.incarnation_id, epoch, listeners, request.rack))
        self.heartbeats.forget(broker_id)
        self.heartbeats.touch(broker_id, now_ms)
        return batch.result(BrokerRegistrationResponse(epoch))

    def unregister_broker(self, image: MetadataImage, request: UnregisterBrokerRequest) -> ControllerResult:
        registration = image.broker(request.broker_id)
        if registration is None:
            raise KafkaError(f"Broker {request.broker_id} is not registered", ErrorCode.BROKER_ID_NOT_REGISTERED)
        batch = RecordBatch(image)
        batch.add(UnregisterBrokerRecord(registration.broker_id, registration.broker_epoch))
        batch.add(*changes_for_unusable_broker(batch.image, registration.broker_id, self.min_isr))
        self.heartbeats.forget(registration.broker_id)
        return batch.result(UnregisterBrokerResponse())

    # --- heartbeats ---------------------------------------------------------------------------
    def process_heartbeat(
        self, latest: MetadataImage, committed: MetadataImage, request: BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult:
        registration = check_broker_epoch(latest, request.broker_id, request.broker_epoch)
        broker_id = registration.broker_id
        self.heartbeats.touch(broker_id, now_ms)
        durable = committed.broker(broker_id)
        caught_up = (
            durable is not None
            and durable.broker_epoch == registration.broker_epoch
            and durable.registration_offset >= 0
            and request.current_metadata_offset >= durable.registration_offset
        )
        if request.want_shutdown or registration.in_controlled_shutdown:
            return self._controlled_shutdown(latest, committed, registration, request, caught_up)
        batch = RecordBatch(latest)
        fenced = registration.fenced
        if fenced and caught_up:
            batch.add(UnfenceBrokerRecord(broker_id, registration.broker_epoch))
            batch.add(*changes_for_usable_broker(batch.image, broker_id, self.min_isr))
            fenced = False
        if request.offline_replicas:
            # Every heartbeat repeats them until the broker repaired them: nothing to remember here.
            batch.add(*changes_for_offline_replicas(batch.image, broker_id, request.offline_replicas, self.min_isr))
        if batch.records:
            return batch.result(BrokerHeartbeatResponse(caught_up, fenced, False))
        return ControllerResult((), BrokerHeartbeatResponse(caught_up, fenced, False))

    def _controlled_shutdown(
        self,
        latest: MetadataImage,
        committed: MetadataImage,
        registration: BrokerRegistration,
        request: BrokerHeartbeatRequest,
        caught_up: bool,
    ) -> ControllerResult:
        broker_id, epoch = registration.broker_id, registration.broker_epoch
        if registration.fenced:
            return ControllerResult((), BrokerHeartbeatResponse(caught_up, True, True))
        batch = RecordBatch(latest)
        if not registration.in_controlled_shutdown:
            batch.add(BrokerRegistrationChangeRecord(broker_id, epoch, in_controlled_shutdown=True))
            batch.add(*changes_for_unusable_broker(batch.image, broker_id, self.min_isr))
            return batch.result(BrokerHeartbeatResponse(caught_up, False, False))
        durable = committed.broker(broker_id)
        if (
            durable is not None
            and durable.broker_epoch == epoch
            and durable.in_controlled_shutdown
            and not committed.leads_any(broker_id)
            and not latest.leads_any(broker_id)
        ):
            threshold = self.heartbeats.shutdown_offset.setdefault(broker_id, committed.offset)
            if request.current_metadata_offset >= threshold:
                batch.add(FenceBrokerRecord(broker_id, epoch))
                batch.add(*changes_for_unusable_broker(batch.image, broker_id, self.min_isr))
                return batch.result(BrokerHeartbeatResponse(caught_up, True, True))
        return ControllerResult((), BrokerHeartbeatResponse(caught_up, False, False))

    # --- session expiry -----------------------------------------------------------------------
    def fence_stale_brokers(self, image: MetadataImage, now_ms: int) -> RecordBatch:
        """FenceBroker plus leadership moves for every unfenced broker whose lease lapsed."""
        timeout = self.config.broker_session_timeout_ms
        batch = RecordBatch(image)
        for broker_id in sorted(image.brokers):
            registration = batch.image.broker(broker_id)
            if registration is None or registration.fenced:
                continue
            if now_ms >= self.heartbeats.deadline_ms(broker_id, now_ms, timeout):
                batch.add(FenceBrokerRecord(broker_id, registration.broker_epoch))
                batch.add(*changes_for_unusable_broker(batch.image, broker_id, self.min_isr))
        return batch

    def next_expiry_ms(self, image: MetadataImage, now_ms: int) -> int | None:
        timeout = self.config.broker_session_timeout_ms
        deadlines = [
            self.heartbeats.deadline_ms(b.broker_id, now_ms, timeout) for b in image.brokers.values() if not b.fenced
        ]
        return min(deadlines, default=None)
