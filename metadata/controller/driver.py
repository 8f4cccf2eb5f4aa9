"""ControllerDriver: when this node's QuorumController is active, and what it appends to Raft (sans-I/O).

Design notes: docs/metadata.md, section "metadata/controller/driver.py".
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kraftpy.metadata.controller.deferred import DeferredResponses
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.requests import ControllerResult
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import MetadataRecord, NoOpRecord, encode_entries, encode_record
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.types import format_address

log = logging.getLogger(__name__)

# Raft's default max_batch_bytes is 1 MiB per append and each entry costs 16 bytes more; keep a margin.
DEFAULT_MAX_APPEND_BYTES = 1000 * 1024
ENTRY_OVERHEAD_BYTES = 16
# Records are packed into Raft entries of at most this size (records of one entry share its offset):
# few entries per decision, each far below Raft's fetch and batch limits.
MAX_ENTRY_BYTES = 128 * 1024
# Raft refuses appends while 8 MiB of proposals are uncommitted; stop taking new work at half of it.
DEFAULT_MAX_UNCOMMITTED_BYTES = 4 * 1024 * 1024
# Below Raft's own max_batch_bytes by this much, so an append of ours is never refused for its size.
RAFT_BATCH_MARGIN_BYTES = 1024
CLAIM_RETRY_MS = 100


def split_payloads(payloads: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """Consecutive chunks of at most `max_bytes` (entry overhead included); one chunk when it fits."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for p in payloads:
        cost = len(p) + ENTRY_OVERHEAD_BYTES
        if chunks[-1] and size + cost > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(p)
        size += cost
    return chunks


def append_limits(
    max_append_bytes: int,
    max_uncommitted_bytes: int,
    *,
    raft_max_batch_bytes: int | None = None,
    raft_max_uncommitted_bytes: int | None = None,
) -> tuple[int, int]:
    """(bytes per append, uncommitted bytes before refusing new work) within Raft's own limits:
    under its per-append limit, and at half its uncommitted-bytes bound so appends are not refused."""
    if raft_max_batch_bytes is not None:
        max_append_bytes = min(max_append_bytes, raft_max_batch_bytes - RAFT_BATCH_MARGIN_BYTES)
    if raft_max_uncommitted_bytes is not None:
        max_uncommitted_bytes = min(max_uncommitted_bytes, raft_max_uncommitted_bytes // 2)
    return max_append_bytes, max_uncommitted_bytes


@dataclass(frozen=True, slots=True)
class Append:
    """Entries for one atomic Raft append in `epoch`; `claim`: the NoOp that claims the epoch back."""

    epoch: int
    entries: tuple[bytes, ...]
    claim: bool = False

    @property
    def size_bytes(self) -> int:
        return sum(len(e) for e in self.entries)


class RaftView(NamedTuple):
    """Raft's role as the shell sees it right after an append failed."""

    is_leader: bool
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class Decision:
    """The controller's answer to a request or tick, and the appends that carry its records."""

    result: ControllerResult
    appends: tuple[Append, ...] = ()
    active: bool = True  # decided as the active controller (else the response is NOT_CONTROLLER)


@dataclass
class Effects:
    """What the shell does after an input, in this order: on `renounced` forget a scheduled claim and
    answer `failed` with `error`; on `activated` let waiting requests in; answer `released`; then,
    with `claim_after_ms`, call `claim()` that much later."""

    renounced: bool = False
    failed: list[Any] = field(default_factory=list)
    error: KafkaError | None = None
    activated: bool = False
    released: list[Any] = field(default_factory=list)
    claim_after_ms: int | None = None


class ControllerDriver:
    def __init__(
        self,
        controller: QuorumController,
        node_id: int,
        *,
        voters: Mapping[int, tuple[str, int]] | None = None,
        committed_offset: int = -1,
        max_append_bytes: int = DEFAULT_MAX_APPEND_BYTES,
        max_uncommitted_bytes: int = DEFAULT_MAX_UNCOMMITTED_BYTES,
    ) -> None:
        self.controller = controller
        self.node_id = node_id
        self.max_append_bytes = max_append_bytes
        self.max_uncommitted_bytes = max_uncommitted_bytes
        self._voters = dict(voters or {})
        self.deferred = DeferredResponses()  # items are the shell's; released or failed through Effects
        self.committed_offset = committed_offset
        self.last_appended_offset = -1  # last offset this controller appended (in any epoch)
        self._claim_epoch: int | None = None  # Raft leader of this epoch, not active yet
        self._barrier: int | None = None  # offset of the claiming NoOp
        self._backlog: deque[tuple[int, int]] = deque()  # (last offset, bytes) appended, not committed
        self.backlog_bytes = 0
        self._stopping = False
        self.activations = 0
        self.renounces = 0

    # --- state ---------------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self.controller.is_active

    @property
    def claiming(self) -> bool:
        """Raft leader but not active yet (claiming the epoch back): new requests wait, bounded."""
        return self._claim_epoch is not None and not self.controller.is_active

    @property
    def backlogged(self) -> bool:
        """Too much appended and not committed: take no new work until the quorum catches up."""
        return self.controller.is_active and self.backlog_bytes > self.max_uncommitted_bytes

    def address_of(self, node_id: int | None) -> str | None:
        if node_id is None or node_id not in self._voters:
            return None
        return format_address(*self._voters[node_id])

    def not_controller_error(self) -> KafkaError:
        return self.controller.not_controller_error()

    # --- Raft events ---------------------------------------------------------------------------------
    def on_commit(self, image: MetadataImage, committed_offset: int, now_ms: int) -> Effects:
        """The committed image advanced to `committed_offset`."""
        effects = Effects()
        self.controller.handle_commit(image)
        self.committed_offset = committed_offset
        while self._backlog and self._backlog[0][0] <= committed_offset:
            self.backlog_bytes -= self._backlog.popleft()[1]
        if self._claim_epoch is not None and self._barrier is not None and committed_offset >= self._barrier:
            self._activate(self._claim_epoch, now_ms, effects)
        effects.released = self.deferred.complete_up_to(committed_offset)
        return effects

    def on_leader_change(self, leader_id: int | None, epoch: int, now_ms: int) -> Effects:
        """Raft's new leader; this node's own leadership is announced only once the log before `epoch`
        is applied (as KRaft does), so the controller activates at once."""
        effects = Effects()
        if leader_id == self.node_id:
            if self.controller.is_active and self.controller.epoch == epoch:
                return effects
            self._renounce(leader_id, f"new epoch {epoch}", effects)
            self._activate(epoch, now_ms, effects)
        else:
            self._renounce(leader_id, f"leader is now {leader_id} in epoch {epoch}", effects)
        return effects

    def stop(self, raft_leader_id: int | None) -> Effects:
        """The node stops: renounce (pointing at another leader, never at ourselves) and claim no more."""
        self._stopping = True
        effects = Effects()
        self._renounce(raft_leader_id if raft_leader_id != self.node_id else None, "stopping", effects)
        return effects

    # --- decisions -----------------------------------------------------------------------------------
    def decide(self, request: Any, now_ms: int) -> Decision:
        result = self.controller.handle(request, now_ms)
        if not self.controller.is_active:
            return Decision(result, active=False)
        return Decision(result, self._pack(result.records))

    def tick(self, now_ms: int) -> Decision:
        """Timers (fencing, rebalance, NoOps); nothing while inactive or backlogged."""
        if not self.controller.is_active or self.backlogged:
            return Decision(ControllerResult(), active=self.controller.is_active)
        result = self.controller.tick(now_ms)
        return Decision(result, self._pack(result.records))

    def claim(self) -> Append | None:
        """The NoOp that claims the epoch back after a failed append (None: nothing to claim)."""
        if self._claim_epoch is None or self._stopping:
            return None
        return Append(self._claim_epoch, (encode_record(NoOpRecord()),), claim=True)

    def must_wait(self, decision: Decision) -> bool:
        """After its appends: the answer waits until its records, and all appended before, commit."""
        if not decision.active:
            return False
        if decision.appends:
            return True
        return bool(self.deferred) or self.last_appended_offset > self.committed_offset

    def defer(self, item: Any) -> None:
        """Hold `item` until everything appended so far commits (see `must_wait`)."""
        self.deferred.add(self.last_appended_offset, item)

    def _pack(self, records: Iterable[MetadataRecord]) -> tuple[Append, ...]:
        records = tuple(records)
        if not records:
            return ()
        epoch = self.controller.epoch
        assert epoch is not None
        payloads = encode_entries(records, MAX_ENTRY_BYTES)
        return tuple(Append(epoch, tuple(chunk)) for chunk in split_payloads(payloads, self.max_append_bytes))

    # --- append outcomes -----------------------------------------------------------------------------
    def appended(self, append: Append, last_offset: int, now_ms: int) -> Effects:
        """Raft took `append`; its last entry is at `last_offset`."""
        effects = Effects()
        if append.claim:
            if append.epoch != self._claim_epoch:
                return effects  # renounced meanwhile: this NoOp claims nothing
            self._barrier = last_offset
            self.last_appended_offset = last_offset
            if self.committed_offset >= last_offset:
                self._activate(append.epoch, now_ms, effects)
            return effects
        size = append.size_bytes
        self.last_appended_offset = last_offset
        self._backlog.append((last_offset, size))
        self.backlog_bytes += size
        return effects

    def append_failed(self, append: Append, error: KafkaError, raft: RaftView) -> Effects:
        """Raft refused `append`. A record append renounces (as KRaft does); if we are still the leader
        of its epoch our earlier records may still commit, so we claim the epoch back behind them."""
        effects = Effects()
        still_leader = raft.is_leader and raft.epoch == append.epoch
        if append.claim:
            if still_leader and append.epoch == self._claim_epoch:
                log.debug("claiming epoch %d: append failed (%s); retrying", append.epoch, error)
                effects.claim_after_ms = CLAIM_RETRY_MS
            return effects
        log.warning("append of %d metadata entries failed in epoch %d: %s", len(append.entries), append.epoch, error)
        self._renounce(self.node_id if still_leader else raft.leader_id, f"append failed: {error}", effects)
        if still_leader:
            self._claim_epoch = append.epoch
            effects.claim_after_ms = CLAIM_RETRY_MS
        return effects

    # --- transitions ---------------------------------------------------------------------------------
    def _renounce(self, leader_id: int | None, why: str, effects: Effects) -> None:
        was_active = self.controller.is_active
        self.controller.deactivate(leader_id, self.address_of(leader_id))
        self._claim_epoch = None
        self._barrier = None
        self._backlog.clear()
        self.backlog_bytes = 0
        effects.renounced = True
        effects.failed.extend(self.deferred.fail_all())
        effects.error = self.controller.not_controller_error()
        if was_active:
            self.renounces += 1
            log.info("no longer the active controller: %s", why)

    def _activate(self, epoch: int, now_ms: int, effects: Effects) -> None:
        self._claim_epoch = None
        self._barrier = None
        # Everything before the epoch (or the claiming NoOp) is committed; whatever we appended in an
        # older epoch and is not in the committed log is gone (truncated). Offsets start from here.
        self.last_appended_offset = self.committed_offset
        self.controller.activate(epoch, now_ms)
        self.activations += 1
        effects.activated = True
        log.info("active controller for epoch %d at offset %d", epoch, self.committed_offset)
