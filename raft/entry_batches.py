"""Raft entries as records inside Kafka v2 record batches: the one on-disk format the Raft log uses.

A run of consecutive entries with the same epoch and kind becomes one batch
whose `partitionLeaderEpoch` is that epoch (so the storage engine's
leader-epoch cache tracks Raft epochs for free). A data entry is a record with
a null key and the entry's bytes as its value. A leader-change entry is a
control batch holding one control record, as KRaft writes its
LeaderChangeMessage: key = (version 0, type 2 = LEADER_CHANGE) as two int16,
value = the core's CBOR body. Decoding is the exact inverse and rejects
anything else (a control record of another type, a keyed data record) as
corrupt, since only this module writes the Raft log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import DecodedBatch, build_batch, decode_batches
from kraftpy.raft.log import Entry, EntryKind

CONTROL_KEY = struct.Struct(">hh")
LEADER_CHANGE_TYPE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
LEADER_CHANGE_KEY = CONTROL_KEY.pack(0, LEADER_CHANGE_TYPE)


def runs(entries: Sequence[Entry]) -> Iterator[Sequence[Entry]]:
    """Maximal runs of entries sharing (epoch, kind); each becomes one batch."""
    start = 0
    for i in range(1, len(entries) + 1):
        if i == len(entries) or entries[i].epoch != entries[start].epoch or entries[i].kind != entries[start].kind:
            yield entries[start:i]
            start = i


def encode_run(run: Sequence[Entry], timestamp_ms: int) -> bytes:
    """One batch for a run of same-epoch, same-kind entries with contiguous offsets."""
    first = run[0]
    ts = timestamp_ms
    control = first.kind is EntryKind.LEADER_CHANGE
    key = LEADER_CHANGE_KEY if control else None
    return build_batch(
        [(key, e.data, (), ts) for e in run],
        base_offset=first.offset,
        partition_leader_epoch=first.epoch,
        is_control=control,
    )


def encode_entries(entries: Sequence[Entry], timestamp_ms: int) -> bytes:
    """The batches for `entries` (contiguous offsets), concatenated, ready for append_as_follower.

    `timestamp_ms` is the batches' timestamp (the shell's wall clock): the core reads no clock."""
    return b"".join(encode_run(run, timestamp_ms) for run in runs(entries))


def _kind_of(batch: DecodedBatch, key: bytes | None) -> EntryKind:
    if batch.is_control:
        if key != LEADER_CHANGE_KEY:
            raise CorruptRecordError(f"control record with key {key!r} in the Raft log at offset {batch.base_offset}")
        return EntryKind.LEADER_CHANGE
    if key is not None:
        raise CorruptRecordError(f"data record with a key in the Raft log at offset {batch.base_offset}")
    return EntryKind.DATA


def decode_batch_entries(batch: DecodedBatch) -> list[Entry]:
    epoch = batch.header.partition_leader_epoch
    out = []
    for record in batch.records:
        kind = _kind_of(batch, record.key)
        out.append(Entry(record.offset, epoch, record.value or b"", kind))
    return out


def decode_entries(data: bytes | memoryview) -> Iterable[list[Entry]]:
    """Entries of each batch in `data`, batch by batch (the batch boundaries matter to readers)."""
    for batch in decode_batches(data):
        yield decode_batch_entries(batch)
