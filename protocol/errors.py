"""Kafka's error codes and the one exception type that carries them.

Every layer answers bad input with one of these codes plus a readable message,
so a client sees the same names a Kafka user knows (TOPIC_ALREADY_EXISTS, ...).
The numbers are Kafka's, so a Kafka wire-protocol listener can reuse them as is.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Mapping
from typing import Any

from kraftpy.protocol.types import TopicPartition


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    }
)


class KafkaError(Exception):
    """An error with a Kafka error code, a readable message and optional details.

    `details` carries machine-readable context (a leader hint, a position in a
    file) that travels with the error in an RPC answer.
    """

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, code: ErrorCode | None = None, **details: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = details

    @property
    def name(self) -> str:
        return self.code.name

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The error as it travels in an RPC answer."""
        out: dict[str, Any] = {"error_code": int(self.code), "error": self.code.name, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> KafkaError:
        try:
            code = ErrorCode(int(body.get("error_code", -1)))
        except ValueError:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        return cls(str(body.get("message", "")), code, **dict(body.get("details") or {}))


class OffsetOutOfRangeError(KafkaError):
    """A read, seek or fetch position outside [log_start_offset, log_end_offset].

    The storage engine raises it for a read or a log-start move it cannot do (its
    bounds in `details`); the consumer for a fetch position the broker refused when
    auto_offset_reset is "none" (`offsets`: the position of each such partition).
    """

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, offsets: Mapping[TopicPartition, int] | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.offsets = dict(offsets or {})


class CorruptRecordError(KafkaError):
    """Bytes that are not a valid record batch; `position` says where in the input."""

    code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, position: int | None = None, **details: Any) -> None:
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{message}{where}", position=position, **details)
        self.position = position


class TruncatedBatchError(CorruptRecordError):
    """The input ends before the batch (or a field of it) does."""


class InvalidMagicError(CorruptRecordError):
    """The magic byte is not 2; only v2 batches are accepted."""


class CrcMismatchError(CorruptRecordError):
    """The stored CRC32C does not match the bytes it covers."""


class BatchTooLargeError(CorruptRecordError):
    """A declared length is beyond the buffer or beyond the allowed maximum."""

    code = ErrorCode.CORRUPT_MESSAGE


class VarintOverflowError(CorruptRecordError):
    """A varint runs past its maximum width or the end of the buffer."""


# Resource shortages: the node is healthy, its environment is short of descriptors, space or memory.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM})


def resource_error(exc: BaseException | None) -> OSError | None:
    """The EMFILE/ENOSPC-like OSError behind `exc` (itself, its cause or context), if any."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
