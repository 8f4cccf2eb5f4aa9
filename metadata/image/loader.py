"""MetadataLoader: committed Raft batches and snapshots in, metadata images out (sans-I/O).

Design notes: docs/metadata.md, section "metadata/image/loader.py".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy
from kraftpy.metadata.image.metadata_delta import MetadataDelta
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import MetadataRecordError, decode_entry
from kraftpy.protocol.errors import KafkaError

log = logging.getLogger(__name__)

ImageSubscriber = Callable[[MetadataImage, MetadataImage], None]


class CommittedBatchLike(Protocol):
    """The Raft shell's CommittedBatch: data entries base_offset..last_offset of one epoch."""

    base_offset: int
    last_offset: int
    epoch: int
    records: Sequence[bytes]


class MetadataLoader:
    def __init__(self, policy: SnapshotPolicy | None = None) -> None:
        self.image = MetadataImage.EMPTY
        # Offset of the last committed entry applied (== image.offset unless the image is empty).
        self.committed_offset = -1
        self.policy = policy or SnapshotPolicy()
        self.replay_errors = 0
        self.last_error: str | None = None
        self.snapshots_loaded = 0
        self._subscribers: list[ImageSubscriber] = []

    def subscribe(self, subscriber: ImageSubscriber) -> None:
        """`subscriber(old, new)` after every published image, in subscription order."""
        self._subscribers.append(subscriber)

    def _publish(self, old: MetadataImage, new: MetadataImage) -> None:
        self.image = new
        for subscriber in self._subscribers:
            subscriber(old, new)

    def load_snapshot(self, end_offset: int, epoch: int, payload: bytes) -> MetadataImage:
        """Replace the image with the snapshot covering every entry below `end_offset`."""
        image = MetadataImage.decode(payload)
        if image.offset != end_offset - 1:
            # The image's own offset is authoritative for what it contains; the id says where the
            # log continues. They agree for snapshots this code writes.
            log.warning("snapshot %d/%d holds an image at offset %d", end_offset, epoch, image.offset)
        self.committed_offset = max(self.committed_offset, end_offset - 1)
        self.snapshots_loaded += 1
        self.policy.on_snapshot_loaded(end_offset)
        self._publish(self.image, image)
        return image

    def apply_batch(self, batch: CommittedBatchLike) -> MetadataImage:
        """Replay one committed batch and publish the resulting image."""
        delta = MetadataDelta(self.image)
        size = 0
        count = 0
        for i, data in enumerate(batch.records):
            offset = batch.base_offset + i
            size += len(data)
            try:
                records = decode_entry(data)
                for record in records:
                    delta.replay(record, offset)
                count += len(records)
            except (MetadataRecordError, KafkaError, TypeError, ValueError) as e:
                self.replay_errors += 1
                self.last_error = f"offset {offset}: {e}"
                log.error("skipping metadata record at offset %d that does not replay: %s", offset, e)
        self.committed_offset = max(self.committed_offset, batch.last_offset)
        new = delta.apply(offset=batch.last_offset, epoch=batch.epoch)
        self.policy.on_applied(count, size)
        self._publish(self.image, new)
        return new

    def status(self) -> dict[str, Any]:
        return {
            "offset": self.committed_offset,
            "epoch": self.image.epoch,
            "topics": len(self.image.topics.by_id),
            "partitions": self.image.topics.partition_count(),
            "brokers": len(self.image.brokers),
            "last_snapshot_offset": self.policy.last_snapshot_offset,
            "records_since_snapshot": self.policy.new_records,
            "snapshots_loaded": self.snapshots_loaded,
            "replay_errors": self.replay_errors,
            "last_error": self.last_error,
        }
