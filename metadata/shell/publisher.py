"""The node's "metadata" component: the Raft listener that turns the metadata log into images.

Design notes: docs/metadata.md, section "metadata/shell/publisher.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy
from kraftpy.metadata.image.loader import CommittedBatchLike, ImageSubscriber, MetadataLoader
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.raft.log import OffsetAndEpoch

log = logging.getLogger(__name__)

LeaderSubscriber = Callable[[int | None, int], None]

# After this many records have been replayed since the last gc.freeze(), freeze again: the image's
# objects are long-lived and acyclic, and without freezing the collector's full passes over a large
# image dominate a node's CPU (docs/metadata.md, Performance).
GC_FREEZE_EVERY_RECORDS = 50_000


class MetadataComponent:
    name = "metadata"

    def __init__(self, node: Any, raft: Any, policy: SnapshotPolicy | None = None) -> None:
        self.node = node
        self.raft = raft
        self.loader = MetadataLoader(policy)
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self._leader_subscribers: list[LeaderSubscriber] = []
        self._snapshot_task: asyncio.Task[None] | None = None
        self._unfrozen_records = 0
        self._started = False
        raft.register_listener(self)

    # --- subscriptions -----------------------------------------------------------------------------
    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    @property
    def committed_offset(self) -> int:
        return self.loader.committed_offset

    def subscribe(self, on_image: ImageSubscriber, on_leader_change: LeaderSubscriber | None = None) -> None:
        self.loader.subscribe(on_image)
        if on_leader_change is not None:
            self._leader_subscribers.append(on_leader_change)

    # --- RaftListener --------------------------------------------------------------------------------
    def handle_commit(self, batch: CommittedBatchLike) -> None:
        self.loader.apply_batch(batch)
        self._unfrozen_records += len(batch.records)
        if self._unfrozen_records >= GC_FREEZE_EVERY_RECORDS:
            self._unfrozen_records = 0
            gc.freeze()
        self._maybe_snapshot()

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        offset, epoch = snapshot_id
        self.loader.load_snapshot(offset, epoch, payload)
        gc.freeze()
        log.info("loaded metadata snapshot %d/%d (%d bytes)", offset, epoch, len(payload))

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = epoch
        for subscriber in self._leader_subscribers:
            subscriber(leader_id, epoch)

    # --- snapshots -----------------------------------------------------------------------------------
    def _maybe_snapshot(self) -> None:
        if not self._started or not self.loader.policy.should_snapshot():
            return
        image = self.loader.image
        if image.offset < 0:
            return
        self.loader.policy.started()
        self._snapshot_task = asyncio.get_running_loop().create_task(self._snapshot(image), name="metadata-snapshot")

    async def _snapshot(self, image: MetadataImage) -> None:
        snapshot_id = OffsetAndEpoch(image.offset + 1, image.epoch)
        stored: int | None = None
        try:
            payload = await asyncio.to_thread(image.encode)
            self.raft.create_snapshot(snapshot_id, payload)
            stored = snapshot_id.offset
            log.info("stored metadata snapshot %d/%d (%d bytes)", snapshot_id.offset, snapshot_id.epoch, len(payload))
        except Exception:  # a failed snapshot is retried at the next bound; the log stays as it is
            log.exception("metadata snapshot at %s failed", snapshot_id)
        finally:
            self.loader.policy.finished(stored)

    # --- component -----------------------------------------------------------------------------------
    def routes(self) -> Mapping[str, Any]:
        return {}

    async def start(self) -> None:
        self._started = True
        self._maybe_snapshot()

    async def stop(self, graceful: bool) -> None:
        self._started = False
        task = self._snapshot_task
        if task is not None and not task.done():
            # An encode in a thread cannot be interrupted; wait for it (bounded by the node's stop timeout).
            with contextlib.suppress(Exception):
                await task

    def status(self) -> dict[str, Any]:
        return self.loader.status()


def create(node: Any) -> MetadataComponent | None:
    """Factory for node/process.py: every node with a raft component replays the metadata log."""
    try:
        raft = node.component("raft")
    except LookupError:
        return None
    policy = SnapshotPolicy(max_new_record_bytes=node.config.metadata_snapshot_max_new_record_bytes)
    return MetadataComponent(node, raft, policy)
