"""ControllerHarness: the ControllerDriver over an in-memory Raft log, for tests and the simulator.

It plays Raft and the metadata component: it takes the driver's appends
(one pending batch each, one offset per entry), commits whole batches when
told to (through the real MetadataLoader, so records of an entry share its
offset), and on a failover truncates what was not committed and announces the
new epoch. Every decision (activation, renouncing, packing records into
entries, when a response may go out) is the driver's, as in the node's shell.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.driver import ControllerDriver, Decision
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerResult,
)
from kraftpy.metadata.image.loader import MetadataLoader
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.metadata.records import Listener, MetadataRecord, decode_entry

NODE_ID = 1


@dataclass(frozen=True, slots=True)
class Batch:
    """One atomic append, as Raft hands it to its listeners once committed."""

    base_offset: int
    last_offset: int
    epoch: int
    records: tuple[bytes, ...]


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
        self.loader = MetadataLoader()
        if image is not MetadataImage.EMPTY:  # a node starting from a snapshot
            self.loader.load_snapshot(image.offset + 1, image.epoch, image.encode())
        controller = QuorumController(self.config, rng=random.Random(seed), image=self.loader.image)
        self.driver = ControllerDriver(controller, NODE_ID, committed_offset=self.loader.committed_offset)
        self.loader.subscribe(self._on_image)
        self.auto_commit = auto_commit
        self.now_ms = 0
        self.epoch = epoch
        self.log: list[tuple[int, MetadataRecord]] = []  # (offset, record), every appended record
        self.pending: list[Batch] = []  # appended batches, not yet committed
        self.next_offset = self.loader.committed_offset + 1
        self._answerable: list[Any] = []  # answers the next commit() hands out
        self.released: list[Any] = []
        self.broker_epochs: dict[int, int] = {}
        self.driver.on_leader_change(NODE_ID, epoch, self.now_ms)

    # --- the shell's loop ------------------------------------------------------------------------
    @property
    def controller(self) -> QuorumController:
        return self.driver.controller

    @property
    def committed(self) -> MetadataImage:
        return self.controller.committed_image

    @property
    def latest(self) -> MetadataImage:
        return self.controller.latest_image

    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        self._answerable.extend(self.driver.on_commit(new, self.loader.committed_offset, self.now_ms).released)

    def _carry_out(self, decision: Decision) -> ControllerResult:
        for append in decision.appends:  # this Raft never refuses an append
            batch = Batch(self.next_offset, self.next_offset + len(append.entries) - 1, append.epoch, append.entries)
            for offset, entry in enumerate(append.entries, batch.base_offset):
                self.log.extend((offset, record) for record in decode_entry(entry))
            self.next_offset = batch.last_offset + 1
            self.pending.append(batch)
            self.driver.appended(append, batch.last_offset, self.now_ms)
        if self.driver.must_wait(decision):
            self.driver.defer(decision.result)
        else:
            self._answerable.append(decision.result)
        if self.auto_commit:
            self.commit()
        return decision.result

    def send(self, request: Any, now_ms: int | None = None) -> ControllerResult:
        if now_ms is not None:
            self.now_ms = now_ms
        return self._carry_out(self.driver.decide(request, self.now_ms))

    def tick(self, now_ms: int | None = None) -> ControllerResult:
        if now_ms is not None:
            self.now_ms = now_ms
        return self._carry_out(self.driver.tick(self.now_ms))

    def commit(self, batches: int | None = None) -> list[ControllerResult]:
        """Commit the next `batches` appended batches (all by default; a batch commits atomically,
        as a Raft entry does); returns the results whose responses may now be sent."""
        n = len(self.pending) if batches is None else batches
        done, self.pending = self.pending[:n], self.pending[n:]
        for batch in done:
            self.loader.apply_batch(batch)
        released, self._answerable = self._answerable, []
        self.released.extend(released)
        return released

    def fail_over(self, new_epoch: int | None = None, *, lose_uncommitted: bool = True) -> None:
        """Leadership moves (here: back to this controller in a new epoch). Uncommitted records are
        lost, as when a new Raft leader truncates them, or (lose_uncommitted=False) commit before the
        new epoch starts; waiting responses are answered NOT_CONTROLLER."""
        if lose_uncommitted:
            self.next_offset = self.loader.committed_offset + 1
            self.log = [(o, r) for o, r in self.log if o < self.next_offset]
            self.pending = []
        else:
            self.commit()
        self._answerable = []
        self.epoch = new_epoch if new_epoch is not None else self.epoch + 1
        self.driver.on_leader_change(NODE_ID, self.epoch, self.now_ms)

    # --- conveniences for tests ------------------------------------------------------------------
    def register(
        self, broker_id: int, rack: str | None = None, incarnation: str | None = None, *, clean: bool = False
    ) -> int:
        """Register (or restart: a new `incarnation`); `clean` names the last epoch (KIP-966: nothing lost)."""
        request = BrokerRegistrationRequest(
            broker_id,
            self.config.cluster_id,
            incarnation or f"incarnation-{broker_id}",
            (Listener("PLAINTEXT", "127.0.0.1", 9092 + broker_id),),
            rack,
            self.broker_epochs.get(broker_id, -1) if clean else -1,
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


def check_image_invariants(image: MetadataImage, min_isr_default: int = 1) -> None:
    """The invariants every image the controller produces keeps (AssertionError otherwise):
    replicas distinct and non-empty; the ISR a subset of them, empty only without a leader; the
    leader -1 or an ISR member on a usable (unfenced, not shutting down) broker; the ELR (KIP-966)
    outside the ISR and empty once the ISR reaches the topic's min ISR (`min_isr_default` for
    topics without their own)."""
    for topic in image.topics.by_id.values():
        min_isr = image.min_insync_replicas(topic.name, min_isr_default)
        for p, part in enumerate(topic.partitions):
            where = f"{topic.name}-{p}: {part}"
            assert len(set(part.replicas)) == len(part.replicas) > 0, where
            assert set(part.isr) <= set(part.replicas), where
            assert part.isr or part.leader == NO_LEADER, where
            assert set(part.elr) <= set(part.replicas) and not set(part.elr) & set(part.isr), where
            assert not part.elr or len(part.isr) < min(min_isr, len(part.replicas)), where
            if part.leader != NO_LEADER:
                assert part.leader in part.isr, where
                assert image.is_usable(part.leader), where
