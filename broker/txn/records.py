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


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(value.producer_id) + _I16.pack(value.producer_epoch) + _I32.pack(value.txn_timeout_ms)
    out += _I8.pack(int(value.state))
    out += _I32.pack(len(value.partitions))
    for topic, partitions in sorted(value.partitions.items()):
        out += _string(topic) + _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)
    out += _I64.pack(value.last_update_timestamp_ms) + _I64.pack(value.start_timestamp_ms)
    return bytes(out)


def txn_record(transactional_id: str, value: TxnLogValue | None) -> Record:
    return encode_key(transactional_id), None if value is None else encode_value(value)


class _Reader:
    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise TxnRecordError(f"record ends early (wanted {n} bytes at {self.pos} of {len(self.data)})")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def fixed(self, s: struct.Struct) -> int:
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 28:
                raise TxnRecordError("varint too long")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.fixed(_I16)
        if n < 0:
            raise TxnRecordError("a null string where one is required")
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise TxnRecordError(f"a string is not UTF-8: {exc}") from None

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.fixed(_I32)
        if n > len(self.data) - self.pos:
            raise TxnRecordError(f"an array of {n} items in a record of {len(self.data)} bytes")
        return n

    def tagged(self) -> dict[int, memoryview]:
        if not self.flexible:
            return {}
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags


def decode_key(data: bytes) -> str:
    reader = _Reader(data, flexible=False)
    version = reader.fixed(_I16)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown __transaction_state key version {version}")
    return reader.string()


def decode_value(data: bytes | None) -> TxnLogValue | None:
    if data is None:
        return None
    reader = _Reader(data, flexible=False)
    version = reader.fixed(_I16)
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise TxnRecordError(f"unknown __transaction_state value version {version}")
    reader.flexible = version >= 1
    producer_id = reader.fixed(_I64)
    producer_epoch = reader.fixed(_I16)
    timeout_ms = reader.fixed(_I32)
    status = reader.fixed(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction state {status}") from None
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(max(0, reader.array_len())):
        topic = reader.string()
        ids = tuple(reader.fixed(_I32) for _ in range(max(0, reader.array_len())))
        reader.tagged()
        partitions[topic] = tuple(sorted(set(partitions.get(topic, ()) + ids)))
    last_update = reader.fixed(_I64)
    start = reader.fixed(_I64)
    tags = reader.tagged()
    previous = _I64.unpack(tags[0])[0] if 0 in tags and len(tags[0]) == 8 else -1
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, state, partitions, last_update, start, previous)


def decode_record(key: bytes, value: bytes | None) -> tuple[str, TxnLogValue | None]:
    try:
        return decode_key(key), decode_value(value)
    except struct.error as exc:  # _Reader.take bounds every read; this is a belt to its braces
        raise TxnRecordError(f"record does not decode: {exc}") from None
