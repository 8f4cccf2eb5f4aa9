"""Kafka's LogValidator.validateKey: a compacted topic takes only records with a key.

Compaction keeps the latest record per key; a record without one could never
be compacted away, so Kafka refuses it with INVALID_RECORD ("Compacted topic
cannot accept message without key"). Only produces to a topic whose
cleanup_policy includes compact pay for decoding the batch's records here.
"""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.records.header import DEFAULT_MAX_BATCH_BYTES


def check_keys_for_compaction(records: bytes, max_message_bytes: int, topic: str, partition: int) -> None:
    """INVALID_RECORD when any record of the (already header-checked) batch has a null key."""
    batch = decode_batch(records, max_batch_bytes=max(DEFAULT_MAX_BATCH_BYTES, max_message_bytes), check_crc=False)
    for index, record in enumerate(batch.records):
        if record.key is None:
            raise KafkaError(
                f"Compacted topic cannot accept message without key in topic partition {topic}-{partition} "
                f"(record {index} of the batch)",
                ErrorCode.INVALID_RECORD,
            )
