"""The consumer's fast batch decoder agrees with protocol's decode_batch on every input, valid or damaged."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.client.consumer.batch_decoder import FastBatch, decode_for_consumer
from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import build_batch, decode_batch
from kraftpy.protocol.records.compression import CompressionType

values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.one_of(st.just(()), st.lists(st.tuples(st.text(max_size=5), values), max_size=2).map(tuple))
records = st.lists(st.tuples(values, values, headers, st.integers(0, 10**13)), min_size=1, max_size=12)


def outcome(decode, data: bytes):
    try:
        batch = decode(data, 0, check_crc=False)
    except CorruptRecordError as exc:
        return ("error", type(exc))
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch.records]


def fast(data: bytes, pos: int, check_crc: bool):
    return decode_for_consumer(data, pos, check_crc=check_crc)


def general(data: bytes, pos: int, check_crc: bool):
    return decode_batch(data, pos, check_crc=check_crc)


@settings(max_examples=300, deadline=None)
@given(records=records, base=st.integers(0, 10**6), gzip=st.booleans(), data=st.data())
def test_same_records_or_same_refusal(records, base, gzip, data) -> None:
    compression = CompressionType.GZIP if gzip else CompressionType.NONE
    batch = build_batch(records, base_offset=base, compression=compression)
    assert outcome(fast, batch) == outcome(general, batch)
    plain = build_batch([(k, v, (), t) for k, v, _, t in records], base_offset=base)
    assert isinstance(decode_for_consumer(plain, 0, check_crc=True), FastBatch)  # the fast path took it
    damaged = bytearray(plain)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(61, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    assert outcome(fast, bytes(damaged)) == outcome(general, bytes(damaged))
