"""The storage engine's error types: KafkaError subclasses, so callers answer with Kafka's codes.

A caller that only knows KafkaError still gets a code and a readable message;
one that cares (the replica fetcher, the Raft log) catches the precise type.
"""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.errors import OffsetOutOfRangeError as OffsetOutOfRangeError  # the client raises it too


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose first offset does not continue the log (Kafka's UnexpectedAppendOffsetException)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class LogStorageError(KafkaError):
    """The files of a log cannot be trusted or written; the partition is offline until an operator looks."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class CorruptCheckpointError(LogStorageError):
    """A checkpoint file exists but does not parse or fails its checksum."""
