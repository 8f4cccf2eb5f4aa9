"""Checking the batches of an append before a byte of them reaches the log.

The leader validates what producers send (Kafka's LogValidator, header level:
the broker never decodes records on this path, DESIGN.md principle 2); a
follower validates what it fetched. Errors carry Kafka's codes:
CORRUPT_MESSAGE (bad length, magic or CRC), MESSAGE_TOO_LARGE (one batch over
max_message_bytes), RECORD_LIST_TOO_LARGE (the append exceeds a segment),
INVALID_RECORD (a producer batch whose offsets are not dense).
"""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import (
    DEFAULT_MAX_BATCH_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
)

Batches = list[tuple[int, BatchHeader]]


def hard_max_batch_bytes(max_message_bytes: int) -> int:
    """The largest batch the files may hold: beyond any config, only garbage is larger."""
    return max(DEFAULT_MAX_BATCH_BYTES, max_message_bytes)


def validate_batches(
    data: bytes | bytearray | memoryview,
    *,
    segment_bytes: int,
    max_message_bytes: int | None,
    dense_offsets: bool,
) -> Batches:
    """(position, header) of each batch in `data`, or a KafkaError for the first bad one.

    `max_message_bytes` None skips the size limit (a follower mirrors its leader,
    whatever the leader allowed). `dense_offsets` demands what a producer must
    send: at least one record and lastOffsetDelta == count - 1.
    """
    total = len(data)
    if total > segment_bytes:
        raise KafkaError(
            f"append of {total} bytes is larger than a whole segment ({segment_bytes} bytes)",
            ErrorCode.RECORD_LIST_TOO_LARGE,
        )
    limit = hard_max_batch_bytes(max_message_bytes or 0)
    out: Batches = []
    pos = 0
    while pos < total:
        header = parse_header(data, pos, max_batch_bytes=limit, check_crc=True)
        size = header.batch_length + LOG_OVERHEAD
        if max_message_bytes is not None and size > max_message_bytes:
            raise KafkaError(
                f"batch at position {pos} is {size} bytes, above max_message_bytes {max_message_bytes}",
                ErrorCode.MESSAGE_TOO_LARGE,
            )
        if dense_offsets and (header.records_count < 1 or header.last_offset_delta != header.records_count - 1):
            raise KafkaError(
                f"batch at position {pos} has {header.records_count} records but lastOffsetDelta "
                f"{header.last_offset_delta}; a producer batch must hold offsets 0..count-1",
                ErrorCode.INVALID_RECORD,
            )
        out.append((pos, header))
        pos += size
    return out
