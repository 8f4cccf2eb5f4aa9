"""Client-side exceptions and how the client classifies broker error codes.

Every exception is a KafkaError, so `err.code` and `err.retriable` work
uniformly. The classification follows Kafka's Java client: which codes a
producer or consumer retries (RetriableException), which ones mean the cached
metadata is stale (InvalidMetadataException), and which ones are fatal to an
idempotent producer (its state can no longer be trusted).
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.errors import OffsetOutOfRangeError as OffsetOutOfRangeError  # shared with the storage engine
from kraftpy.protocol.types import TopicPartition

# Kafka's InvalidMetadataException subclasses (plus a lost connection, which
# NetworkClient treats the same way): the leader or the partition list we
# cached is wrong, so refresh metadata before retrying.
_METADATA_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)

# Errors after which an idempotent producer stops: its producer id was taken
# over or it is not allowed to produce at all (TransactionManager's fatal states).
_FATAL_PRODUCER_ERRORS = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


def is_retriable(code: ErrorCode) -> bool:
    """True when Kafka's client would retry a request that failed with `code`."""
    return code.retriable


def invalidates_metadata(code: ErrorCode) -> bool:
    """True when `code` means the cached leaders or partitions are stale."""
    return code in _METADATA_ERRORS


def is_fatal_for_producer(code: ErrorCode) -> bool:
    """True when an idempotent producer must stop after `code`."""
    return code in _FATAL_PRODUCER_ERRORS


def error_from(code: int, message: str = "", **details: object) -> KafkaError:
    """A KafkaError for a numeric code, tolerating codes this build does not know."""
    try:
        known = ErrorCode(int(code))
    except ValueError:
        known = ErrorCode.UNKNOWN_SERVER_ERROR
        message = f"unknown error code {code}: {message}"
    return KafkaError(message or known.name, known, **details)


def malformed(what: str, detail: object) -> KafkaError:
    """An answer the client cannot read: CORRUPT_MESSAGE, naming the answer and what is wrong with it."""
    return KafkaError(f"malformed {what} answer: {detail}", ErrorCode.CORRUPT_MESSAGE)


class ConfigError(KafkaError, ValueError):
    """A configuration value is missing, of the wrong type or out of range; the message names the key."""

    code = ErrorCode.INVALID_CONFIG

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class KafkaTimeoutError(KafkaError, TimeoutError):
    """Kafka's TimeoutException: an operation did not finish within its configured bound."""

    code = ErrorCode.REQUEST_TIMED_OUT


class BufferExhaustedError(KafkaTimeoutError):
    """send() waited max_block_ms for buffer_memory and none came free (Kafka's BufferExhaustedException)."""


class RecordTooLargeError(KafkaError):
    """A record is larger than max_request_size or buffer_memory; it can never be sent."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class ProducerClosedError(KafkaError):
    """send() after close(), or a record still buffered when close() gave up."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class ProducerFencedError(KafkaError):
    """The producer's id/epoch was taken over; the producer is unusable and must be closed."""

    code = ErrorCode.PRODUCER_FENCED


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and auto_offset_reset is "none" (Kafka's NoOffsetForPartitionException)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, partitions: list[TopicPartition]) -> None:
        names = ", ".join(str(tp) for tp in sorted(partitions))
        super().__init__(f"undefined offset with no reset policy for partitions: {names}")
        self.partitions = sorted(partitions)


class LogTruncationError(KafkaError):
    """The log was truncated below the consumer's position after a leader change (KIP-320).

    `divergent_offsets` maps each partition to the first offset known to
    diverge, or None when the broker could not say (the epoch is gone).
    """

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, truncations: Mapping[TopicPartition, tuple[int, int | None]]) -> None:
        parts = []
        for tp, (position, divergent) in sorted(truncations.items()):
            where = f"diverges at offset {divergent}" if divergent is not None else "diverges at an unknown offset"
            parts.append(f"{tp} at position {position} ({where})")
        super().__init__(
            "log truncation detected: " + "; ".join(parts) + ". Records at and after the divergence point may "
            "have been lost on the broker; seek to choose where to resume, or set auto_offset_reset to resume "
            "at the divergence point automatically"
        )
        self.positions = {tp: position for tp, (position, _) in truncations.items()}
        self.divergent_offsets = {tp: divergent for tp, (_, divergent) in truncations.items()}


class RecordDeserializationError(KafkaError):
    """A key or value could not be deserialized; the position stays at `offset` so a seek can skip it."""

    code = ErrorCode.INVALID_RECORD

    def __init__(self, tp: TopicPartition, offset: int, what: str, cause: BaseException) -> None:
        super().__init__(
            f"error deserializing the {what} of the record at offset {offset} of {tp}: {cause}. "
            f"Seek past it (seek({tp.topic!r}, {tp.partition}, {offset + 1})) to continue"
        )
        self.topic_partition = tp
        self.offset = offset
        self.what = what


class CorruptFetchError(KafkaError):
    """Fetched bytes failed validation (CRC, layout); the position stays at the first record not returned."""

    code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, tp: TopicPartition, offset: int, cause: BaseException, next_offset: int | None = None) -> None:
        past = "seek past it" if next_offset is None else f"seek to {next_offset}, past the batch"
        super().__init__(f"corrupt data fetched from {tp} at offset {offset}: {cause}. If needed, {past} to continue")
        self.topic_partition = tp
        self.offset = offset
        self.next_offset = next_offset  # the offset after the bad batch, when its header could be read


class IllegalStateError(KafkaError):
    """An API was used in a state that does not allow it (for example poll() with nothing assigned)."""

    code = ErrorCode.INVALID_REQUEST
