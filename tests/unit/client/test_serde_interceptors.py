"""Serializers round-trip and fail clearly; interceptors change records and never break the path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.client.interceptors import run_on_acknowledgement, run_on_consume, run_on_send
from kraftpy.client.serde import SerializationError, deserializer_for, serializer_for
from kraftpy.protocol.errors import ErrorCode

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@given(json_values)
def test_json_and_cbor_round_trip(value) -> None:
    for name in ("json", "cbor"):
        data = serializer_for(name)(value)
        assert deserializer_for(name)(data) == value if value is not None else data is None


@given(st.text())
def test_str_round_trip(text: str) -> None:
    assert deserializer_for("str")(serializer_for("str")(text)) == text


def test_none_stays_none_for_tombstones() -> None:
    for name in ("bytes", "str", "json", "cbor"):
        assert serializer_for(name)(None) is None
        assert deserializer_for(name)(None) is None


def test_wrong_input_is_a_clear_error() -> None:
    with pytest.raises(SerializationError, match="bytes serializer got int") as info:
        serializer_for("bytes")(5)
    assert info.value.code is ErrorCode.INVALID_RECORD
    with pytest.raises(SerializationError, match="not JSON-serializable"):
        serializer_for("json")({1, 2})
    with pytest.raises(SerializationError, match="not valid UTF-8"):
        deserializer_for("str")(b"\xff")
    with pytest.raises(SerializationError, match="not valid JSON"):
        deserializer_for("json")(b"{")
    with pytest.raises(SerializationError, match="not valid CBOR"):
        deserializer_for("cbor")(b"\xff\xff")
    with pytest.raises(ValueError, match="unknown serializer 'avro'"):
        serializer_for("avro")


def test_custom_callable_passes_through() -> None:
    upper = serializer_for(lambda v: v.upper().encode())
    assert upper("abc") == b"ABC"


class Tag:
    def __init__(self) -> None:
        self.acks: list = []

    def on_send(self, record: dict) -> dict:
        return {**record, "headers": [("traced", b"1")]}

    def on_acknowledgement(self, metadata, error) -> None:
        self.acks.append((metadata, error))

    def on_consume(self, records: list) -> list:
        return [r for r in records if r != "drop"]


class Broken:
    def on_send(self, record):
        raise RuntimeError("boom")

    def on_acknowledgement(self, metadata, error):
        raise RuntimeError("boom")

    def on_consume(self, records):
        raise RuntimeError("boom")


def test_interceptors_change_records_and_failures_are_skipped() -> None:
    tag = Tag()
    chain = [Broken(), tag, Broken()]
    assert run_on_send(chain, {"value": b"x"}) == {"value": b"x", "headers": [("traced", b"1")]}
    err = RuntimeError("lost")
    run_on_acknowledgement(chain, ("t", 0, 5), None)
    run_on_acknowledgement(chain, None, err)
    assert tag.acks == [(("t", 0, 5), None), (None, err)]
    assert run_on_consume(chain, ["a", "drop", "b"]) == ["a", "b"]
