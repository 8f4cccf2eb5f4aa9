"""Records of `__transaction_state` in Kafka's TransactionLog layouts (key v0, value v0 and v1).

Key: int16 version 0, then TransactionLogKey v0 (string transactional_id). Value: int16 version,
then TransactionLogValue: producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
transaction_status int8, transaction_partitions [topic string, partition_ids [int32]] (nullable),
last_update_timestamp_ms int64, start_timestamp_ms int64. v1 is the flexible form (compact
strings and arrays, tagged fields; tag 0 previous_producer_id, 1 next_producer_id, 2
client_transaction_version). We write v0 (what Kafka writes without transaction version 2) and
read both. A tombstone (value None) removes the transactional id (expiration).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.fields import I8, I16, I32, I64, FieldReader, string

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_VALUE_VERSION = 1

Record = tuple[bytes, bytes | None]


class TxnRecordError(KafkaError):
    """A record of __transaction_state that does not decode (the loader logs and skips it)."""

    code = ErrorCode.CORRUPT_MESSAGE


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with the byte each state is stored as."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions / ListTransactions use ("Ongoing", "PrepareCommit", ...)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    # topic -> sorted partitions
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    last_update_timestamp_ms: int = -1
    start_timestamp_ms: int = -1
    previous_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + string(transactional_id)


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(I16.pack(VALUE_VERSION))
    out += I64.pack(value.producer_id) + I16.pack(value.producer_epoch) + I32.pack(value.txn_timeout_ms)
    out += I8.pack(int(value.state))
    out += I32.pack(len(value.partitions))
    for topic, partitions in sorted(value.partitions.items()):
        out += string(topic) + I32.pack(len(partitions))
        for p in partitions:
            out += I32.pack(p)
    out += I64.pack(value.last_update_timestamp_ms) + I64.pack(value.start_timestamp_ms)
    return bytes(out)


def txn_record(transactional_id: str, value: TxnLogValue | None) -> Record:
    return encode_key(transactional_id), None if value is None else encode_value(value)


def decode_key(data: bytes) -> str:
    reader = FieldReader(data, TxnRecordError)
    version = reader.fixed(I16)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown __transaction_state key version {version}")
    return reader.string()


def decode_value(data: bytes | None) -> TxnLogValue | None:
    if data is None:
        return None
    reader = FieldReader(data, TxnRecordError)
    version = reader.fixed(I16)
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise TxnRecordError(f"unknown __transaction_state value version {version}")
    reader.flexible = version >= 1
    producer_id = reader.fixed(I64)
    producer_epoch = reader.fixed(I16)
    timeout_ms = reader.fixed(I32)
    status = reader.fixed(I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction state {status}") from None
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(max(0, reader.array_len())):
        topic = reader.string()
        ids = tuple(reader.fixed(I32) for _ in range(max(0, reader.array_len())))
        reader.tagged()
        partitions[topic] = tuple(sorted(set(partitions.get(topic, ()) + ids)))
    last_update = reader.fixed(I64)
    start = reader.fixed(I64)
    tags = reader.tagged()
    previous = I64.unpack(tags[0])[0] if 0 in tags and len(tags[0]) == 8 else -1
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, state, partitions, last_update, start, previous)


def decode_record(key: bytes, value: bytes | None) -> tuple[str, TxnLogValue | None]:
    try:
        return decode_key(key), decode_value(value)
    except struct.error as exc:  # FieldReader.take bounds every read; this is a belt to its braces
        raise TxnRecordError(f"record does not decode: {exc}") from None
