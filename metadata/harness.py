"""ControllerHarness: the smallest correct shell around QuorumController, in memory.

It plays the Raft log and the node shell: appends each result's records as one
batch (one offset per record), commits on demand (replaying committed records
into the committed image with their offsets), and releases responses through
DeferredResponses only once the log has committed past them. Unit tests and
the simulator use it; it is also the executable description of how a real
shell drives the controller.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.deferred import DeferredResponses
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerResult,
)
from kraftpy.metadata.image.metadata_delta import MetadataDelta
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.metadata.records import Listener, MetadataRecord


class ControllerHarness:
    def __init__(
        self,
        config: ControllerConfig | None = None,
        *,
        seed: int = 0,
        auto_commit: bool = True,
        image: MetadataImage = MetadataImage.EMPTY,
        epoch: int = 1,
    ) -> None:
        self.config = config or ControllerConfig(cluster_id="test-cluster")
        self.controller = QuorumController(self.config, rng=random.Random(seed), image=image)
        self.auto_commit = auto_commit
        self.now_ms = 0
        self.epoch = epoch
        self.log: list[tuple[int, MetadataRecord]] = []  # (offset, record), every appended record
        self.pending: list[list[tuple[int, MetadataRecord]]] = []  # appended batches, not yet committed
        self.next_offset = image.offset + 1
        self.deferred = DeferredResponses()
        self.released: list[Any] = []
        self.controller.activate(epoch, self.now_ms)
        self.broker_epochs: dict[int, int] = {}

    # --- the shell's loop ------------------------------------------------------------------------
    @property
    def committed(self) -> MetadataImage:
        return self.controller.committed_image

    @property
    def latest(self) -> MetadataImage:
        return self.controller.latest_image

    def _append(self, result: ControllerResult) -> ControllerResult:
        if result.records:
            batch = []
            for record in result.records:
                batch.append((self.next_offset, record))
                self.next_offset += 1
            self.log.extend(batch)
            self.pending.append(batch)
        self.deferred.add(self.next_offset - 1, result)
        if self.auto_commit:
            self.commit()
        return result

    def send(self, request: Any, now_ms: int | None = None) -> ControllerResult:
        if now_ms is not None:
            self.now_ms = now_ms
        return self._append(self.controller.handle(request, self.now_ms))

    def tick(self, now_ms: int | None = None) -> ControllerResult:
        if now_ms is not None:
            self.now_ms = now_ms
        return self._append(self.controller.tick(self.now_ms))

    def commit(self, batches: int | None = None) -> list[ControllerResult]:
        """Commit the next `batches` appended batches (all by default; a batch commits atomically,
        as a Raft entry does); returns the results whose responses may now be sent."""
        n = len(self.pending) if batches is None else batches
        done, self.pending = self.pending[:n], self.pending[n:]
        if done:
            delta = MetadataDelta(self.committed)
            for batch in done:
                for offset, record in batch:
                    delta.replay(record, offset)
            self.controller.handle_commit(delta.apply(epoch=self.epoch))
        released = self.deferred.complete_up_to(self.committed.offset)
        self.released.extend(released)
        return released

    def fail_over(self, new_epoch: int | None = None, *, lose_uncommitted: bool = True) -> None:
        """Leadership moves (here: back to this controller in a new epoch). Uncommitted records are
        lost, as when a new Raft leader truncates them; waiting responses are answered NOT_CONTROLLER."""
        self.controller.deactivate(leader_id=None)
        if lose_uncommitted:
            lost = {offset for batch in self.pending for offset, _ in batch}
            self.log = [(o, r) for o, r in self.log if o not in lost]
            self.pending = []
            self.next_offset = self.committed.offset + 1
        self.deferred.fail_all()
        self.epoch = new_epoch if new_epoch is not None else self.epoch + 1
        self.controller.activate(self.epoch, self.now_ms)

    # --- conveniences for tests ------------------------------------------------------------------
    def register(self, broker_id: int, rack: str | None = None, incarnation: str | None = None) -> int:
        request = BrokerRegistrationRequest(
            broker_id,
            self.config.cluster_id,
            incarnation or f"incarnation-{broker_id}",
            (Listener("PLAINTEXT", "127.0.0.1", 9092 + broker_id),),
            rack,
        )
        result = self.send(request)
        assert isinstance(result.response, BrokerRegistrationResponse), result.response
        self.broker_epochs[broker_id] = result.response.broker_epoch
        return result.response.broker_epoch

    def heartbeat(self, broker_id: int, *, offset: int | None = None, want_shutdown: bool = False) -> ControllerResult:
        request = BrokerHeartbeatRequest(
            broker_id,
            self.broker_epochs[broker_id],
            self.committed.offset if offset is None else offset,
            want_shutdown,
        )
        return self.send(request)

    def start_brokers(self, broker_ids: Iterable[int], racks: dict[int, str] | None = None) -> None:
        """Register and unfence brokers (each heartbeats at the committed offset)."""
        ids = list(broker_ids)
        for b in ids:
            self.register(b, (racks or {}).get(b))
        self.commit()
        for b in ids:
            response = self.heartbeat(b).response
            assert isinstance(response, BrokerHeartbeatResponse), response
        self.commit()

    def heartbeat_all(self) -> None:
        for b, registration in sorted(self.latest.brokers.items()):
            if not registration.fenced and b in self.broker_epochs:
                self.heartbeat(b)


def check_image_invariants(image: MetadataImage) -> None:
    """The invariants every image the controller produces keeps (AssertionError otherwise):
    replicas distinct and non-empty, the ISR a non-empty subset of them, and the leader -1
    or an ISR member on a usable (unfenced, not shutting down) broker."""
    for topic in image.topics.by_id.values():
        for p, part in enumerate(topic.partitions):
            where = f"{topic.name}-{p}: {part}"
            assert len(set(part.replicas)) == len(part.replicas) > 0, where
            assert part.isr and set(part.isr) <= set(part.replicas), where
            if part.leader != NO_LEADER:
                assert part.leader in part.isr, where
                assert image.is_usable(part.leader), where
