"""Rebuild groups and offsets from the records of one `__consumer_offsets` partition.

Design notes: docs/groups.md, section "broker/groups/loader.py".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kraftpy.broker.groups.group import GroupMetadata
from kraftpy.broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    OffsetAndMetadata,
    OffsetCommitKey,
    Record,
    decode_record,
)
from kraftpy.protocol.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class LoadedGroup:
    metadata: GroupMetadataValue | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return self.metadata is None and not self.offsets


def replay(records: Iterable[Record]) -> dict[str, LoadedGroup]:
    """The last state of every group the records mention (groups whose state was deleted are absent)."""
    loaded: dict[str, LoadedGroup] = {}
    for key_bytes, value_bytes in records:
        try:
            key, value = decode_record(key_bytes, value_bytes)
        except GroupRecordError as exc:
            log.error("skipping a record of __consumer_offsets that does not parse (key %r): %s", key_bytes[:40], exc)
            continue
        entry = loaded.setdefault(key.group, LoadedGroup())
        if isinstance(key, OffsetCommitKey):
            tp = TopicPartition(key.topic, key.partition)
            if value is None:
                entry.offsets.pop(tp, None)
            else:
                assert isinstance(value, OffsetAndMetadata)
                entry.offsets[tp] = value
        else:
            assert isinstance(key, GroupMetadataKey)
            entry.metadata = value if isinstance(value, GroupMetadataValue) else None
    return {group: entry for group, entry in loaded.items() if not entry.is_empty()}


def build_groups(records: Iterable[Record], partition: int) -> dict[str, GroupMetadata]:
    """Groups as a coordinator holds them right after loading `partition` (before any timers run)."""
    groups: dict[str, GroupMetadata] = {}
    for group_id, entry in replay(records).items():
        if entry.metadata is not None:
            group = GroupMetadata.from_record(group_id, partition, entry.metadata)
        else:
            group = GroupMetadata(group_id, partition)
        group.offsets = dict(entry.offsets)
        groups[group_id] = group
    return groups
