"""BrokerLifecycle: registration, heartbeats and controlled shutdown of one broker (sans-I/O).

Design notes: docs/broker.md, section "broker/lifecycle.py".
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.requests import BrokerHeartbeatRequest, BrokerRegistrationRequest
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import Address, parse_address

REGISTRATION = "/controller/broker_registration"
HEARTBEAT = "/controller/broker_heartbeat"
INITIAL_BACKOFF_MS = 100


class BrokerState(enum.Enum):
    STARTING = "starting"  # not registered
    RECOVERY = "recovery"  # registered, fenced, catching up with the metadata log
    RUNNING = "running"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"  # the controller released us (or we gave up waiting)


@dataclass(frozen=True)
class Outgoing:
    address: Address
    path: str
    body: dict[str, Any]


class BrokerLifecycle:
    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        incarnation_id: str,
        listeners: tuple[Listener, ...],
        rack: str | None,
        voters: Mapping[int, Address],
        heartbeat_interval_ms: int,
        previous_broker_epoch: int = -1,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.listeners = listeners
        self.rack = rack
        self.voters = dict(voters)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # KIP-966: decided once at start (broker/clean_restart.py) and sent with every registration of this
        # process, as Kafka does: a re-registration in the same process lost nothing since that start.
        self.previous_broker_epoch = previous_broker_epoch
        self.state = BrokerState.STARTING
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.want_shutdown = False
        self.hint: Address | None = None
        self.in_flight = False
        self.next_send_ms = 0
        self.failures = 0
        self.last_error: KafkaError | None = None
        self.shutdown_released = False
        # Replicas this broker cannot serve (the replica manager's offline partitions), in every heartbeat.
        self.offline_replicas: tuple[tuple[uuid.UUID, int], ...] = ()
        self.partition_roles_allowed = False
        # Metadata offset of the first image that held this incarnation's registration (for status).
        self.roles_from_offset = -1
        # When the controller last answered a heartbeat: a broker without one for a session is fenced soon.
        self.heartbeat_answered_ms: int | None = None

    # --- properties ----------------------------------------------------------------------------------
    @property
    def registered(self) -> bool:
        return self.broker_epoch >= 0

    def may_take_partition_roles(self, image: MetadataImage) -> bool:
        """Whether the broker may lead, follow and serve partitions as `image` assigns them.

        Yes once `image` holds this incarnation's own registration (see the module docstring); the
        answer then stays yes, as later images only move forward.
        """
        if self.partition_roles_allowed:
            return True
        if not self.registered:
            return False
        own = image.broker(self.broker_id)
        if own is None or own.broker_epoch != self.broker_epoch or own.incarnation_id != self.incarnation_id:
            return False
        self.partition_roles_allowed = True
        self.roles_from_offset = image.offset
        return True

    def controller_address(self, raft_leader_id: int | None) -> Address | None:
        if self.hint is not None:
            return self.hint
        return self.voters.get(raft_leader_id) if raft_leader_id is not None else None

    # --- what to send --------------------------------------------------------------------------------
    def next_request(self, now_ms: int, metadata_offset: int, raft_leader_id: int | None) -> Outgoing | None:
        if self.in_flight or now_ms < self.next_send_ms or self.state is BrokerState.SHUTTING_DOWN:
            return None
        address = self.controller_address(raft_leader_id)
        if address is None:
            # No controller known (an election): look again later; a leader change wakes the shell sooner.
            self.next_send_ms = now_ms + INITIAL_BACKOFF_MS
            return None
        self.in_flight = True
        if not self.registered:
            request = BrokerRegistrationRequest(
                self.broker_id,
                self.cluster_id,
                self.incarnation_id,
                self.listeners,
                self.rack,
                previous_broker_epoch=self.previous_broker_epoch,
            )
            return Outgoing(address, REGISTRATION, wire.broker_registration_body(request))
        heartbeat = BrokerHeartbeatRequest(
            self.broker_id, self.broker_epoch, metadata_offset, self.want_shutdown, self.offline_replicas
        )
        return Outgoing(address, HEARTBEAT, wire.broker_heartbeat_body(heartbeat))

    def set_offline_replicas(self, replicas: tuple[tuple[uuid.UUID, int], ...], now_ms: int) -> None:
        """A replica newly offline is reported at once: its leadership must move before clients give up."""
        if set(replicas) - set(self.offline_replicas) and self.registered:
            self.next_send_ms = min(self.next_send_ms, now_ms)
        self.offline_replicas = replicas

    def next_deadline_ms(self) -> int | None:
        if self.in_flight or self.state is BrokerState.SHUTTING_DOWN:
            return None
        return self.next_send_ms

    # --- outcomes ------------------------------------------------------------------------------------
    def on_answer(self, sent: Outgoing, body: Mapping[str, Any], now_ms: int) -> None:
        self.in_flight = False
        self.hint = sent.address  # it answered as the active controller: keep using it
        self.failures = 0
        self.last_error = None
        if sent.path == REGISTRATION:
            self.broker_epoch = wire.parse_registration_answer(body).broker_epoch
            self.fenced = True
            if self.state is BrokerState.STARTING:
                self.state = BrokerState.RECOVERY
            self.next_send_ms = now_ms  # heartbeat at once: it may unfence us
            return
        answer = wire.parse_heartbeat_answer(body)
        self.heartbeat_answered_ms = now_ms
        self.caught_up = answer.is_caught_up
        self.fenced = answer.is_fenced
        self.next_send_ms = now_ms + self.heartbeat_interval_ms
        if self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if answer.should_shut_down:
                self.state = BrokerState.SHUTTING_DOWN
                self.shutdown_released = True
            else:
                # Leaderships are moving; ask again soon rather than a full interval later.
                self.next_send_ms = now_ms + min(self.heartbeat_interval_ms, 200)
            return
        if not answer.is_fenced:
            self.state = BrokerState.RUNNING
        elif self.state is BrokerState.RUNNING:
            self.state = BrokerState.RECOVERY  # the lease lapsed (a pause, a partition); catch up again

    def on_error(self, sent: Outgoing, error: KafkaError, now_ms: int) -> None:
        self.in_flight = False
        self.last_error = error
        if error.code == ErrorCode.NOT_CONTROLLER:
            hint = parse_address(error.details.get("leader_address"))
            if hint is not None and hint != sent.address:
                self.hint = hint
                self.next_send_ms = now_ms  # a new target: go at once
                return
            self.hint = None
        elif error.code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            # Our registration is gone or superseded (e.g. the controller lost uncommitted state):
            # register again with the same incarnation, as Kafka's broker does.
            self.broker_epoch = -1
            self.fenced = True
            if self.state in (BrokerState.RUNNING, BrokerState.RECOVERY):
                self.state = BrokerState.STARTING
            self.next_send_ms = now_ms
            return
        elif error.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT) and self.hint == sent.address:
            self.hint = None
        self.failures += 1
        backoff = min(self.heartbeat_interval_ms, INITIAL_BACKOFF_MS * 2 ** min(self.failures - 1, 10))
        self.next_send_ms = now_ms + backoff

    # --- controlled shutdown -------------------------------------------------------------------------
    def begin_controlled_shutdown(self, now_ms: int) -> None:
        """Ask the controller to move our leaderships; SHUTTING_DOWN once it releases us."""
        if self.state is BrokerState.SHUTTING_DOWN:
            return
        if not self.registered or self.fenced:
            # Not registered or fenced: we lead nothing the controller counts on (Kafka skips it too).
            self.state = BrokerState.SHUTTING_DOWN
            self.shutdown_released = True
            return
        self.want_shutdown = True
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self.next_send_ms = now_ms

    def give_up_controlled_shutdown(self) -> None:
        """The shutdown wait ran out (no quorum, say): stop anyway, leaderships move on fencing."""
        self.state = BrokerState.SHUTTING_DOWN

    def status(self, metadata_offset: int, now_ms: int) -> dict[str, Any]:
        answered = self.heartbeat_answered_ms
        return {
            "registered": self.registered,
            "fenced": self.fenced,
            "broker_epoch": self.broker_epoch,
            "metadata_offset": metadata_offset,
            "state": self.state.value,
            "incarnation_id": self.incarnation_id,
            "partition_roles_from_offset": self.roles_from_offset,
            "controller": None if self.hint is None else f"{self.hint[0]}:{self.hint[1]}",
            "last_error": None if self.last_error is None else str(self.last_error),
            "heartbeat_answered_ms_ago": None if answered is None else now_ms - answered,
        }
