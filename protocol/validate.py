"""Field checks for request bodies decoded from CBOR: one way to say "this field is wrong".

Design notes: docs/protocol.md, section "protocol/validate.py".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError

_MISSING: Any = object()

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Kafka's STRING is int16-length-prefixed: the default bound of a string field.
MAX_STRING_LEN = INT16_MAX

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
    # Every field of every request passes here: a dict body and an in-range int skip the general path
    # (an ABC isinstance per call was a tenth of a follower fetch's parsing).
    if type(body) is not dict and not isinstance(body, Mapping):
        raise invalid(f"request body must be a map, got {type(body).__name__}")
    value = body.get(name, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise invalid(f"missing required field {name!r}")
        return default
    if kind is int and type(value) is int:
        low = INT64_MIN if min_value is None else min_value
        high = INT64_MAX if max_value is None else max_value
        if low <= value <= high:
            return value
    if value is None:
        if nullable:
            return None
        raise invalid(f"field {name!r} must not be null")
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise invalid(f"field {name!r} must be {_KIND_NAMES.get(kind, kind.__name__)}, got {_show(value)}")
    if kind is int:
        low = INT64_MIN if min_value is None else min_value
        high = INT64_MAX if max_value is None else max_value
        return check_int(value, name, low, high)
    if min_value is not None and value < min_value:
        raise invalid(f"field {name!r} must be >= {min_value}, got {_show_int(value)}")
    if max_value is not None and value > max_value:
        raise invalid(f"field {name!r} must be <= {max_value}, got {value}")
    if kind is str and max_len is None:
        max_len = MAX_STRING_LEN
    if max_len is not None and len(value) > max_len:
        raise invalid(f"field {name!r} is {len(value)} long; at most {max_len} allowed")
    return value


def check_int(value: Any, name: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """`value` if it is an integer (not a boolean) in [low, high], else INVALID_REQUEST naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"field {name!r} must be an integer, got {_show(value)}")
    if value < low:
        raise invalid(f"field {name!r} must be >= {low}, got {_show_int(value)}")
    if value > high:
        raise invalid(f"field {name!r} must be <= {high}, got {_show_int(value)}")
    return value


def int32(value: Any, name: str, low: int = INT32_MIN) -> int:
    """An int32 field (ids, epochs, partition indexes) from `low` up."""
    return check_int(value, name, low, INT32_MAX)


def int64(value: Any, name: str, low: int = INT64_MIN) -> int:
    """An int64 field (offsets, producer ids, timestamps) from `low` up."""
    return check_int(value, name, low, INT64_MAX)


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"field {name!r} must be a boolean, got {_show(value)}")
    return value


def check_str(value: Any, name: str, max_len: int = MAX_STRING_LEN) -> str:
    if not isinstance(value, str):
        raise invalid(f"field {name!r} must be a string, got {_show(value)}")
    if len(value) > max_len:
        raise invalid(f"field {name!r} is {len(value)} long; at most {max_len} allowed")
    return value


def check_list(value: Any, name: str, max_len: int) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise invalid(f"field {name!r} must be a list, got {_show(value)}")
    if len(value) > max_len:
        raise invalid(f"field {name!r} has {len(value)} items; at most {max_len} allowed")
    return value


def _show_int(value: int) -> str:
    # a forged bignum can have thousands of digits: name its size, not its digits
    return str(value) if value.bit_length() <= 64 else f"a {value.bit_length()}-bit integer"


def show(value: Any) -> str:
    """A short, always printable description of an untrusted value, for error messages."""
    return _show(value)


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int {_show_int(value)}"
    try:
        text = repr(value)
    except ValueError:  # a container holding a bignum too long to print
        text = "..."
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
