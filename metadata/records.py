"""Metadata records: the versioned CBOR entries of the metadata log.

Design notes: docs/metadata.md, section "metadata/records.py".
"""

from __future__ import annotations

import dataclasses
import operator
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import cbor2

from kraftpy.metadata.bulk import gc_paused
from kraftpy.protocol.errors import ErrorCode, KafkaError


class MetadataRecordError(KafkaError):
    """Bytes that are not a valid metadata record, or a record the image cannot apply."""

    code = ErrorCode.INVALID_RECORD


@dataclass(frozen=True, slots=True)
class Listener:
    """A named endpoint of a broker (Kafka's listener name, host and port)."""

    name: str
    host: str
    port: int


# --- field codecs: (encode, decode); decode validates the CBOR type ------------------------


def _expect(kind: str, ok: bool, value: Any) -> None:
    if not ok:
        raise MetadataRecordError(f"expected {kind}, got {type(value).__name__} {value!r:.60}")


def _typed(kind: str, cls: type, *, nullable: bool = False) -> Callable[[Any], Any]:
    """A decoder accepting exactly `cls` (`type(v) is cls`, so a bool is not an int), or also null."""
    if nullable:
        kind = f"{kind} or null"

        def decode_nullable(v: Any) -> Any:
            if v is not None and type(v) is not cls:
                _expect(kind, False, v)
            return v

        return decode_nullable

    def decode(v: Any) -> Any:
        if type(v) is not cls:
            _expect(kind, False, v)
        return v

    return decode


_dec_int = _typed("an integer", int)
_dec_opt_int = _typed("an integer", int, nullable=True)
_dec_bool = _typed("a boolean", bool)
_dec_opt_bool = _typed("a boolean", bool, nullable=True)
_dec_str = _typed("a text string", str)
_dec_opt_str = _typed("a text string", str, nullable=True)


@lru_cache(maxsize=4096)
def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=raw)


def _enc_uuid(v: uuid.UUID) -> bytes:
    return v.bytes


def _dec_uuid(v: Any) -> uuid.UUID:
    _expect("a 16-byte uuid", type(v) is bytes and len(v) == 16, v)
    return uuid_from_bytes(v)


def _dec_ints(v: Any) -> tuple[int, ...]:
    if type(v) is not list:
        _expect("an array of integers", False, v)
    for x in v:
        if type(x) is not int:
            _expect("an array of integers", False, v)
    return tuple(v)


def _dec_opt_ints(v: Any) -> tuple[int, ...] | None:
    return None if v is None else _dec_ints(v)


def _enc_listeners(v: tuple[Listener, ...]) -> list[list[Any]]:
    return [[x.name, x.host, x.port] for x in v]


def _dec_listeners(v: Any) -> tuple[Listener, ...]:
    _expect("an array of listeners", type(v) is list, v)
    out = []
    for item in v:
        _expect("a [name, host, port] listener", type(item) is list and len(item) == 3, item)
        out.append(Listener(_dec_str(item[0]), _dec_str(item[1]), _dec_int(item[2])))
    return tuple(out)


def _dec_scalar(v: Any) -> Any:
    _expect("a config value (int, float, bool, text or null)", v is None or type(v) in (int, float, bool, str), v)
    return v


def _same(v: Any) -> Any:
    return v


_CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "int": (_same, _dec_int),
    "opt_int": (_same, _dec_opt_int),
    "bool": (_same, _dec_bool),
    "opt_bool": (_same, _dec_opt_bool),
    "str": (_same, _dec_str),
    "opt_str": (_same, _dec_opt_str),
    "uuid": (_enc_uuid, _dec_uuid),
    "ints": (list, _dec_ints),
    "opt_ints": (lambda v: None if v is None else list(v), _dec_opt_ints),
    "listeners": (_enc_listeners, _dec_listeners),
    "scalar": (_same, _dec_scalar),
}


class MetadataRecord:
    """Base of every record class: `TYPE` (Kafka's apiKey where one exists) and `VERSION`.

    A field added in a later version says so (`"since": N` in its metadata) and has a default. A
    record whose later fields all hold their defaults is written in the oldest version that has
    its fields, so logs and snapshots that do not use a new field stay readable by older nodes.
    """

    __slots__ = ()
    TYPE: ClassVar[int]
    VERSION: ClassVar[int] = 1
    _encoders: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]]
    # The versions before VERSION, newest first: (version, number of fields it has, a getter of the
    # later fields' values as a tuple, their defaults).
    _older_layouts: ClassVar[tuple[tuple[int, int, Callable[[Any], tuple[Any, ...]], tuple[Any, ...]], ...]]


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(MetadataRecord):
    """A broker (re)registers; a new registration always starts fenced."""

    TYPE = 0
    broker_id: int = field(metadata={"codec": "int"})
    incarnation_id: str = field(metadata={"codec": "str"})
    broker_epoch: int = field(metadata={"codec": "int"})
    listeners: tuple[Listener, ...] = field(metadata={"codec": "listeners"})
    rack: str | None = field(default=None, metadata={"codec": "opt_str"})


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord(MetadataRecord):
    TYPE = 1
    broker_id: int = field(metadata={"codec": "int"})
    broker_epoch: int = field(metadata={"codec": "int"})


@dataclass(frozen=True, slots=True)
class TopicRecord(MetadataRecord):
    TYPE = 2
    name: str = field(metadata={"codec": "str"})
    topic_id: uuid.UUID = field(metadata={"codec": "uuid"})


@dataclass(frozen=True, slots=True)
class PartitionRecord(MetadataRecord):
    """A whole partition: written when it is created."""

    TYPE = 3
    VERSION = 2
    topic_id: uuid.UUID = field(metadata={"codec": "uuid"})
    partition: int = field(metadata={"codec": "int"})
    replicas: tuple[int, ...] = field(metadata={"codec": "ints"})
    isr: tuple[int, ...] = field(metadata={"codec": "ints"})
    leader: int = field(metadata={"codec": "int"})
    leader_epoch: int = field(default=0, metadata={"codec": "int"})
    partition_epoch: int = field(default=0, metadata={"codec": "int"})
    # KIP-966: eligible leader replicas, and the last leader of an ISR that became empty (docs/replication.md).
    elr: tuple[int, ...] = field(default=(), metadata={"codec": "ints", "since": 2})
    last_known_elr: tuple[int, ...] = field(default=(), metadata={"codec": "ints", "since": 2})


@dataclass(frozen=True, slots=True)
class ConfigRecord(MetadataRecord):
    """Set (value) or delete (value None) one config of a topic or broker resource."""

    TYPE = 4
    resource_type: int = field(metadata={"codec": "int"})
    resource_name: str = field(metadata={"codec": "str"})
    name: str = field(metadata={"codec": "str"})
    value: Any = field(default=None, metadata={"codec": "scalar"})


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(MetadataRecord):
    """Only the changed fields (None = unchanged).

    Applying it bumps partition_epoch by one, and leader_epoch by one when
    `leader` is present (KRaft's rule), so every node derives the same epochs.
    """

    TYPE = 5
    VERSION = 2
    topic_id: uuid.UUID = field(metadata={"codec": "uuid"})
    partition: int = field(metadata={"codec": "int"})
    leader: int | None = field(default=None, metadata={"codec": "opt_int"})
    isr: tuple[int, ...] | None = field(default=None, metadata={"codec": "opt_ints"})
    elr: tuple[int, ...] | None = field(default=None, metadata={"codec": "opt_ints", "since": 2})
    last_known_elr: tuple[int, ...] | None = field(default=None, metadata={"codec": "opt_ints", "since": 2})


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord(MetadataRecord):
    TYPE = 7
    broker_id: int = field(metadata={"codec": "int"})
    broker_epoch: int = field(metadata={"codec": "int"})


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord(MetadataRecord):
    TYPE = 8
    broker_id: int = field(metadata={"codec": "int"})
    broker_epoch: int = field(metadata={"codec": "int"})


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(MetadataRecord):
    """Deletes the topic, its partitions and its config overrides."""

    TYPE = 9
    topic_id: uuid.UUID = field(metadata={"codec": "uuid"})


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(MetadataRecord):
    """A block of producer ids went to a broker; `next_producer_id` is the first id after it."""

    TYPE = 15
    broker_id: int = field(metadata={"codec": "int"})
    broker_epoch: int = field(metadata={"codec": "int"})
    next_producer_id: int = field(metadata={"codec": "int"})


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord(MetadataRecord):
    """Changes a registration's flags (None = unchanged); used to enter controlled shutdown."""

    TYPE = 17
    broker_id: int = field(metadata={"codec": "int"})
    broker_epoch: int = field(metadata={"codec": "int"})
    fenced: bool | None = field(default=None, metadata={"codec": "opt_bool"})
    in_controlled_shutdown: bool | None = field(default=None, metadata={"codec": "opt_bool"})


@dataclass(frozen=True, slots=True)
class NoOpRecord(MetadataRecord):
    """Written by an idle active controller so followers see the log advance."""

    TYPE = 20


@dataclass(frozen=True, slots=True)
class RegisterValueRecord(MetadataRecord):
    """Sets one key of the linearizable registers (`/controller/register_write`; docs/metadata.md)."""

    TYPE = 1000  # kraftpy's own, far from Kafka's record apiKeys
    key: str = field(metadata={"codec": "str"})
    value: int = field(metadata={"codec": "int"})


RECORD_TYPES: tuple[type[MetadataRecord], ...] = (
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    ConfigRecord,
    PartitionChangeRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    RemoveTopicRecord,
    ProducerIdsRecord,
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    RegisterValueRecord,
)

# (type id, version) -> (class, field decoders). Older versions keep their entry here.
_DECODERS: dict[tuple[int, int], tuple[type[MetadataRecord], tuple[Callable[[Any], Any], ...]]] = {}
_BY_TYPE: dict[int, type[MetadataRecord]] = {}

for _cls in RECORD_TYPES:
    _fields = dataclasses.fields(_cls)  # type: ignore[arg-type]
    _cls._encoders = tuple((f.name, _CODECS[f.metadata["codec"]][0]) for f in _fields)
    _layouts = []
    for _version in range(_cls.VERSION, 0, -1):
        _own = [f for f in _fields if f.metadata.get("since", 1) <= _version]
        # Later fields come last, so an older version is a prefix of the newer ones.
        assert _own == list(_fields[: len(_own)]), (_cls, _version)
        _DECODERS[(_cls.TYPE, _version)] = (_cls, tuple(_CODECS[f.metadata["codec"]][1] for f in _own))
        _later = _fields[len(_own) :]
        _getter = operator.attrgetter(*(f.name for f in _later)) if _later else (lambda record: ())
        if len(_later) == 1:  # attrgetter of one name returns the value, not a 1-tuple
            _getter = (lambda get: lambda record: (get(record),))(_getter)
        _layouts.append((_version, len(_own), _getter, tuple(f.default for f in _later)))
    _cls._older_layouts = tuple(_layouts[1:])
    assert _cls.TYPE not in _BY_TYPE, _cls
    _BY_TYPE[_cls.TYPE] = _cls


def record_to_list(record: MetadataRecord) -> list[Any]:
    """The CBOR-ready array form `[type_id, version, *fields]`, in the oldest version that holds it."""
    cls = type(record)
    encoders = cls._encoders
    version = cls.VERSION
    for older, count, later_values, later_defaults in cls._older_layouts:
        if later_values(record) != later_defaults:
            break
        version, encoders = older, encoders[:count]
    out = [cls.TYPE, version]
    for name, enc in encoders:
        value = getattr(record, name)
        out.append(value if enc is _same else enc(value))
    return out


def record_from_list(item: Any) -> MetadataRecord:
    if type(item) is not list or len(item) < 2 or type(item[0]) is not int or type(item[1]) is not int:
        raise MetadataRecordError(f"a metadata record is an array [type, version, fields...], got {item!r:.80}")
    type_id, version = item[0], item[1]
    entry = _DECODERS.get((type_id, version))
    if entry is None:
        cls = _BY_TYPE.get(type_id)
        if cls is None:
            raise MetadataRecordError(f"unknown metadata record type {type_id}", record_type=type_id)
        known = sorted(v for (t, v) in _DECODERS if t == type_id)
        raise MetadataRecordError(
            f"unsupported version {version} of metadata record {cls.__name__} (this node reads versions {known})",
            record_type=type_id,
            version=version,
        )
    cls, decoders = entry
    values = item[2:]
    if len(values) != len(decoders):
        raise MetadataRecordError(
            f"{cls.__name__} v{version} has {len(decoders)} fields, got {len(values)}", record_type=type_id
        )
    try:
        return cls(*(dec(v) for dec, v in zip(decoders, values, strict=True)))
    except MetadataRecordError as e:
        raise MetadataRecordError(f"{cls.__name__} v{version}: {e.message}", record_type=type_id) from None


def encode_record(record: MetadataRecord) -> bytes:
    return cbor2.dumps(record_to_list(record))


def decode_record(data: bytes) -> MetadataRecord:
    return record_from_list(_loads(data))


def encode_records(records: Iterable[MetadataRecord]) -> bytes:
    """A batch of records (one Raft entry) as one CBOR array."""
    with gc_paused():
        return cbor2.dumps([record_to_list(r) for r in records])


def decode_records(data: bytes) -> list[MetadataRecord]:
    with gc_paused():
        items = _loads(data)
        if type(items) is not list:
            raise MetadataRecordError("a record batch is a CBOR array of records")
        return [record_from_list(item) for item in items]


def _cbor_array_header(n: int) -> bytes:
    if n < 24:
        return bytes([0x80 + n])
    if n < 1 << 8:
        return b"\x98" + n.to_bytes(1, "big")
    if n < 1 << 16:
        return b"\x99" + n.to_bytes(2, "big")
    return b"\x9a" + n.to_bytes(4, "big")


def encode_entries(records: Iterable[MetadataRecord], max_entry_bytes: int) -> list[bytes]:
    """Pack records into Raft entries of at most `max_entry_bytes` each (a lone record may exceed it).

    An entry holding one record is that record; several are a CBOR array of them (`encode_records`'
    format, built by concatenating each record's encoding behind an array header). Packing keeps the
    number of Raft entries small: a fencing of 10,000 partitions is a few entries, not 10,000.
    """
    entries: list[bytes] = []
    items: list[bytes] = []
    size = 0
    for record in records:
        data = encode_record(record)
        if items and size + len(data) > max_entry_bytes:
            entries.append(items[0] if len(items) == 1 else _cbor_array_header(len(items)) + b"".join(items))
            items, size = [], 0
        items.append(data)
        size += len(data)
    if items:
        entries.append(items[0] if len(items) == 1 else _cbor_array_header(len(items)) + b"".join(items))
    return entries


def decode_entry(data: bytes) -> list[MetadataRecord]:
    """One Raft entry of the metadata log: a single record, or a batch of them (`encode_records`)."""
    item = _loads(data)
    if type(item) is list and item and type(item[0]) is list:
        return [record_from_list(r) for r in item]
    return [record_from_list(item)]


def _loads(data: bytes) -> Any:
    try:
        return cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as e:
        raise MetadataRecordError(f"not valid CBOR: {e}") from None


def record_type_name(record: MetadataRecord | type[MetadataRecord]) -> str:
    cls = record if isinstance(record, type) else type(record)
    return cls.__name__.removesuffix("Record")


def describe_records(records: Sequence[MetadataRecord]) -> str:
    """A short summary for logs: `Topic x1, Partition x3`."""
    counts: dict[str, int] = {}
    for r in records:
        counts[record_type_name(r)] = counts.get(record_type_name(r), 0) + 1
    return ", ".join(f"{name} x{n}" for name, n in counts.items())
