"""Transaction markers: Kafka's control records (EndTransactionMarker), built and read.

A marker is a control batch (attributes: transactional + control, no compression) holding one
record whose key is (version int16, type int16; 0 = ABORT, 1 = COMMIT) and whose value is
(version int16, coordinator_epoch int32), as Kafka's ControlRecordType and EndTransactionMarker.
Docs: docs/transactions.md, "The partition side".
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import HEADER_SIZE, BatchHeader
from kraftpy.protocol.records.record import decode_record

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class TxnMarker(NamedTuple):
    """What a control batch says: the transaction ended (committed or aborted) under coordinator_epoch."""

    committed: bool
    coordinator_epoch: int


def build_marker_batch(
    producer_id: int, producer_epoch: int, marker: TxnMarker, *, timestamp_ms: int, leader_epoch: int = -1
) -> bytes:
    """The control batch a partition leader appends to end `producer_id`'s transaction (offset 0; the log assigns)."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if marker.committed else ABORT)
    value = _VALUE.pack(MARKER_VALUE_VERSION, marker.coordinator_epoch)
    return build_batch(
        [(key, value, (), timestamp_ms)],
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def read_marker(batch: bytes | bytearray | memoryview, header: BatchHeader, pos: int = 0) -> TxnMarker | None:
    """The marker in the control batch at `pos`, or None for a control batch that is no transaction marker.

    Kafka writes control batches uncompressed; anything else here is corrupt.
    """
    if header.compression != 0:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} is compressed", pos)
    end = pos + header.size
    record, _ = decode_record(batch, pos + HEADER_SIZE, end, base_offset=header.base_offset)
    if record.key is None or len(record.key) < _KEY.size:
        raise CorruptRecordError(f"control record at offset {header.base_offset} has no control key", pos)
    _version, kind = _KEY.unpack_from(record.key)
    if kind not in (ABORT, COMMIT):
        return None  # another control type (Kafka has leader-change and snapshot records): no transaction end
    if record.value is None or len(record.value) < _VALUE.size:
        raise CorruptRecordError(f"transaction marker at offset {header.base_offset} has no value", pos)
    _vversion, coordinator_epoch = _VALUE.unpack_from(record.value)
    return TxnMarker(kind == COMMIT, coordinator_epoch)
