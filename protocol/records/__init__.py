"""Kafka's v2 RecordBatch codec, byte for byte: header, records, compression.

The names most callers need are re-exported here; header.py, varint.py,
record.py, compression.py and batch.py hold the parts.
"""

from kraftpy.protocol.records.batch import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    DecodedBatch,
    RecordBatchBuilder,
    build_batch,
    decode_batch,
    decode_batches,
)
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.header import DEFAULT_MAX_BATCH_BYTES, BatchHeader, iter_batches, parse_header
from kraftpy.protocol.records.record import Record

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_UNCOMPRESSED_BYTES",
    "BatchHeader",
    "CompressionType",
    "DecodedBatch",
    "Record",
    "RecordBatchBuilder",
    "build_batch",
    "decode_batch",
    "decode_batches",
    "iter_batches",
    "parse_header",
]
