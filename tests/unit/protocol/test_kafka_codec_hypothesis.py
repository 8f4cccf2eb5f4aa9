"""Hypothesis round trips of the Kafka codec beyond test_kafka_codec.py's: values, long lengths, unknown tags.

test_kafka_codec.py checks that every API and version re-encodes to the same
bytes with short random values. Here, for every API and version, request and
response: the decoded message equals the one encoded (field by field, not only
byte for byte), with strings, bytes and arrays long enough to cross the one-byte
varint of compact lengths (127/128); and random unknown tagged fields in a
flexible request's body or header are skipped or kept, never refused.
Examples are few per version (bounded time), drawn afresh each run.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage

from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    message_classes,
)

ALL_VERSIONS = [
    (key, version)
    for key, api in sorted(SUPPORTED_APIS.items())
    for version in range(api.min_version, api.max_version + 1)
]
FLEXIBLE_REQUESTS = [(k, v) for k, v in ALL_VERSIONS if is_flexible(k, v)]


def _length() -> st.SearchStrategy[int]:
    # Short, or right around the compact encodings' varint boundary (length + 1 = 128).
    return st.sampled_from([0, 1, 5, 126, 127, 128, 129, 300])


_SIMPLE = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "uuid": st.uuids(),
    "string": _length().flatmap(lambda n: st.text(alphabet="aé€𝄞", min_size=n, max_size=n)),
    "bytes": _length().flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    "records": _length().flatmap(lambda n: st.binary(min_size=n, max_size=n)),
}


def _field(field, version: int, depth: int) -> st.SearchStrategy:
    if field.is_struct_array():
        strategy = st.lists(_struct(field.array_of, version, depth + 1), max_size=2 if depth else 3)
    elif field.is_array():
        item = _SIMPLE.get(field.array_of.type_str, st.just(0))
        strategy = _length().flatmap(lambda n: st.lists(item, min_size=min(n, 130), max_size=min(n, 130)))
    elif field.is_struct():
        strategy = _struct(field, version, depth + 1)
    else:
        strategy = _SIMPLE.get(field.type_str, st.just(field.default))
    if field.nullable_for_version_q(version):
        strategy = st.none() | strategy
    return strategy


def _struct(struct_field, version: int, depth: int) -> st.SearchStrategy:
    fields = {f.name: _field(f, version, depth) for f in struct_field.fields.values() if f.for_version_q(version)}
    return st.fixed_dictionaries(fields).map(lambda values: struct_field.data_class(version=version, **values))


def _message(cls: type[ApiMessage], version: int, tagged: bool = True) -> st.SearchStrategy:
    fields = {
        f.name: _field(f, version, 0)
        for f in cls._struct.fields.values()
        if f.for_version_q(version) and (tagged or f.tag is None)
    }
    return st.fixed_dictionaries(fields).map(lambda values: cls(version=version, **values))


_FEW = settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_every_request_version_decodes_to_the_values_encoded(api_key: int, version: int) -> None:
    request_cls, _ = message_classes(api_key)

    @_FEW
    @given(request=_message(request_cls, version), client_id=st.none() | st.text(max_size=200))
    def round_trip(request: ApiMessage, client_id: str | None) -> None:
        header = RequestHeader(api_key, version, 12345, client_id)
        decoded_header, decoded = decode_request(encode_request(header, request)[4:])
        assert decoded_header == header
        assert decoded == request

    round_trip()


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_every_response_version_decodes_to_the_values_encoded(api_key: int, version: int) -> None:
    _, response_cls = message_classes(api_key)
    header = RequestHeader(api_key, version, -7, None)

    @_FEW
    @given(response=_message(response_cls, version))
    def round_trip(response: ApiMessage) -> None:
        correlation_id, decoded = decode_response(header, encode_response(header, response)[4:])
        assert correlation_id == -7
        assert decoded == response

    round_trip()


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag_section(tags: dict[int, bytes]) -> bytes:
    return _uvarint(len(tags)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in sorted(tags.items()))


_UNKNOWN_TAGS = st.dictionaries(st.integers(1000, 70_000), st.binary(max_size=140), min_size=1, max_size=3)


@pytest.mark.parametrize(("api_key", "version"), FLEXIBLE_REQUESTS)
def test_unknown_tagged_fields_in_a_flexible_request_are_skipped(api_key: int, version: int) -> None:
    request_cls, _ = message_classes(api_key)

    @_FEW
    @given(request=_message(request_cls, version, tagged=False), body_tags=_UNKNOWN_TAGS, header_tags=_UNKNOWN_TAGS)
    def skipped(request: ApiMessage, body_tags: dict[int, bytes], header_tags: dict[int, bytes]) -> None:
        header = RequestHeader(api_key, version, 3, "c")
        frame = encode_request(header, request)[4:]
        head_end = 8 + 2 + 1  # api key, version, correlation id; client id "c"; then the header's tag count
        assert frame[head_end] == 0 and frame[-1] == 0  # no tagged fields in the header, none at the body's end
        hostile = frame[:head_end] + _tag_section(header_tags) + frame[head_end + 1 : -1] + _tag_section(body_tags)
        decoded_header, decoded = decode_request(hostile)
        assert decoded_header == header
        for name in request.fields:
            assert getattr(decoded, name) == getattr(request, name), name

    skipped()


def test_a_compact_length_of_exactly_128_bytes_takes_two_varint_bytes() -> None:
    # The boundary the strategies aim at, checked once by hand: ApiVersions v3, a 127-character name.
    request_cls, _ = message_classes(18)
    request = request_cls(version=3, client_software_name="n" * 127, client_software_version="1")
    frame = encode_request(RequestHeader(18, 3, 1, None), request)
    body = frame[4 + 8 + 2 + 1 :]
    assert body[:2] == b"\x80\x01"  # 127 + 1 = 128 as a two-byte varint
    assert decode_request(frame[4:])[1].client_software_name == "n" * 127
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
