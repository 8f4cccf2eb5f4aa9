"""Serializers and deserializers for keys and values: bytes, str, JSON, CBOR, or any callable.

A producer turns application objects into bytes with a Serializer; a consumer
turns bytes back with a Deserializer. Anything with the right shape works
(for example an Avro encoder bound to a schema): `serializer_for("json")`
resolves the built-in names, and a callable passes through unchanged.
None stays None both ways, so tombstones (null values) survive.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]


class SerializationError(KafkaError):
    code = ErrorCode.INVALID_RECORD


def _bytes_ser(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise SerializationError(f"bytes serializer got {type(value).__name__}; pass bytes or choose another serializer")


def _str_ser(value: Any) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SerializationError(f"str serializer got {type(value).__name__}")
    return value.encode("utf-8")


def _json_ser(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"value is not JSON-serializable: {exc}") from None


def _cbor_ser(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return cbor2.dumps(value)
    except (cbor2.CBOREncodeError, TypeError) as exc:
        raise SerializationError(f"value is not CBOR-serializable: {exc}") from None


def _bytes_de(data: bytes | None) -> Any:
    return data


def _str_de(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"not valid UTF-8: {exc}") from None


def _json_de(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as exc:
        raise SerializationError(f"not valid JSON: {exc}") from None


def _cbor_de(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types on garbage
        raise SerializationError(f"not valid CBOR: {exc}") from None


SERIALIZERS: dict[str, Serializer] = {"bytes": _bytes_ser, "str": _str_ser, "json": _json_ser, "cbor": _cbor_ser}
DESERIALIZERS: dict[str, Deserializer] = {"bytes": _bytes_de, "str": _str_de, "json": _json_de, "cbor": _cbor_de}


def serializer_for(spec: str | Serializer | None) -> Serializer:
    """A built-in by name ('bytes', 'str', 'json', 'cbor'), any callable, or bytes when None."""
    return _resolve(spec, SERIALIZERS, "serializer")


def deserializer_for(spec: str | Deserializer | None) -> Deserializer:
    return _resolve(spec, DESERIALIZERS, "deserializer")


def _resolve(spec: Any, table: dict[str, Any], what: str) -> Any:
    if spec is None:
        return table["bytes"]
    if callable(spec):
        return spec
    if isinstance(spec, str) and spec in table:
        return table[spec]
    raise ValueError(f"unknown {what} {spec!r}; use one of {sorted(table)} or a callable")
