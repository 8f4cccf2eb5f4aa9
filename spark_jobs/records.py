"""The rows of one replica log: one per record, plus one per damage that stops the reading (no Spark here).

The segment files are read with the storage engine's own inspection reader
(kraftpy.storage.inspection.LogFileReader), which never changes a file
and keeps going past a bad CRC. A batch whose CRC fails is still decoded
without the check when its structure allows, so its records can be compared
with the other replicas; its rows carry crc_ok = false. Damage that stops the
reading (a cut-off or insane batch) becomes a row with `problem` set and the
file and position, so the audit reports it instead of crashing.

Keys and values are compared by a 64-bit BLAKE2b digest, which keeps rows small;
`value_preview` keeps enough of the value for a human to recognize it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.records.header import NO_SEQUENCE, BatchHeader
from kraftpy.protocol.records.record import Record
from kraftpy.spark_jobs.replicas import ReplicaDir, read_info, segment_files
from kraftpy.storage import LeaderEpochCache
from kraftpy.storage.inspection import LogFileReader

PREVIEW_CHARS = 40

RECORD_SCHEMA = (
    "node INT, topic STRING, partition INT, offset BIGINT, batch_base_offset BIGINT, batch_last_offset BIGINT, "
    "leader_epoch INT, checkpoint_epoch INT, producer_id BIGINT, producer_epoch INT, sequence INT, "
    "timestamp BIGINT, key_hash STRING, value_hash STRING, value_preview STRING, crc_ok BOOLEAN, "
    "file STRING, position BIGINT, problem STRING"
)

REPLICA_SCHEMA = (
    "node INT, topic STRING, partition INT, path STRING, high_watermark BIGINT, log_start_offset BIGINT, "
    "recovery_point BIGINT, epochs STRING, compacted BOOLEAN, problem STRING"
)


def digest(data: bytes | None) -> str | None:
    """The digest the audit compares keys and values by (None for a null key or a tombstone)."""
    return None if data is None else hashlib.blake2b(data, digest_size=8).hexdigest()


def preview(data: bytes | None) -> str | None:
    return None if data is None else data[:PREVIEW_CHARS].decode("utf-8", errors="replace")


def _sequence(header: BatchHeader, record: Record) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + record.offset - header.base_offset) & 0x7FFFFFFF


def _decode_unchecked(path: Path, position: int, size: int) -> tuple[Record, ...] | None:
    """The records of a batch whose CRC failed, when its structure still decodes; else None."""
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), size, position)
    try:
        return decode_batch(data, 0, check_crc=False).records
    except CorruptRecordError:
        return None


def _problem_row(replica: ReplicaDir, file: str, position: int | None, message: str) -> tuple:
    return (replica.node_id, replica.topic, replica.partition, *([None] * 12), None, file, position, message)


def replica_rows(replica: ReplicaDir) -> Iterator[tuple]:
    """The rows of RECORD_SCHEMA for every record in the replica's segments, in offset order."""
    info = read_info(replica)
    epochs = LeaderEpochCache(None, lambda: 0, info.epochs)
    for path in segment_files(replica):
        reader = LogFileReader(path, with_records=True)
        yielded: set[int] = set()
        try:
            for entry in reader:
                yielded.add(entry.position)
                header = entry.header
                records = entry.records
                if records is None:
                    records = _decode_unchecked(path, entry.position, header.size)
                if records is None:
                    yield _problem_row(
                        replica,
                        str(path),
                        entry.position,
                        f"batch at offset {header.base_offset}: "
                        + ("CRC32C does not match and " if not entry.crc_valid else "")
                        + "its records cannot be decoded",
                    )
                    continue
                checkpoint_epoch = epochs.epoch_for_offset(header.base_offset)
                for record in records:
                    yield (
                        replica.node_id,
                        replica.topic,
                        replica.partition,
                        record.offset,
                        header.base_offset,
                        header.last_offset,
                        header.partition_leader_epoch,
                        checkpoint_epoch,
                        header.producer_id,
                        header.producer_epoch,
                        _sequence(header, record),
                        record.timestamp,
                        digest(record.key),
                        digest(record.value),
                        preview(record.value),
                        entry.crc_valid,
                        str(path),
                        entry.position,
                        None,
                    )
        except OSError as exc:
            yield _problem_row(replica, str(path), None, f"cannot read: {exc.strerror or exc}")
            continue
        problem = reader.problem
        # A CRC or offset-order note is about a batch that was yielded (the audit reports those from its rows);
        # anything else stopped the reading, and only a row of its own can say so.
        if problem is not None and problem.position not in yielded:
            yield _problem_row(replica, str(path), problem.position, problem.message)


def replica_info_row(replica: ReplicaDir) -> tuple:
    """The row of REPLICA_SCHEMA for one replica."""
    info = read_info(replica)
    return (
        replica.node_id,
        replica.topic,
        replica.partition,
        replica.path,
        info.high_watermark,
        info.log_start_offset,
        info.recovery_point,
        " ".join(f"{e}@{o}" for e, o in info.epochs),
        info.compacted,
        "; ".join(info.problems) or None,
    )
