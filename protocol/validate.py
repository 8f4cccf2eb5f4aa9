"""Field checks for request bodies decoded from CBOR: one way to say "this field is wrong".

Every RPC handler reads its fields through `field()`, so bad input always
becomes INVALID_REQUEST with a message naming the field, the expectation and
what arrived, and a handler never sees a value of the wrong type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError

_MISSING: Any = object()

_KIND_NAMES = {
    int: "an integer",
    str: "a string",
    bytes: "a byte string",
    bool: "a boolean",
    list: "a list",
    dict: "a map",
    float: "a number",
}


def invalid(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REQUEST)


def field(
    body: Mapping[str, Any],
    name: str,
    kind: type,
    *,
    default: Any = _MISSING,
    min_value: int | None = None,
    max_value: int | None = None,
    nullable: bool = False,
    max_len: int | None = None,
) -> Any:
    """Return body[name] checked against `kind` and the bounds, or raise INVALID_REQUEST."""
    if not isinstance(body, Mapping):
        raise invalid(f"request body must be a map, got {type(body).__name__}")
    if name not in body:
        if default is _MISSING:
            raise invalid(f"missing required field {name!r}")
        return default
    value = body[name]
    if value is None:
        if nullable:
            return None
        raise invalid(f"field {name!r} must not be null")
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise invalid(f"field {name!r} must be {_KIND_NAMES.get(kind, kind.__name__)}, got {_show(value)}")
    if min_value is not None and value < min_value:
        raise invalid(f"field {name!r} must be >= {min_value}, got {_number(value)}")
    if max_value is not None and value > max_value:
        raise invalid(f"field {name!r} must be <= {max_value}, got {_number(value)}")
    if max_len is not None and len(value) > max_len:
        raise invalid(f"field {name!r} is {len(value)} long; at most {max_len} allowed")
    return value


def _number(value: Any) -> str:
    # str() of a huge int is slow, then refused past 4,300 digits: the message would become a crash.
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    return str(value)


def _show(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return _number(value)
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
