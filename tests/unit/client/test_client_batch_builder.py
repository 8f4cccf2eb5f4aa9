"""The producer's fast batch builder writes exactly the bytes of protocol's RecordBatchBuilder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.client.producer.batch_builder import ProducerBatchBuilder
from kraftpy.protocol.records.batch import RecordBatchBuilder, decode_batch

# Large fields come from a few fixed values: drawing 16 KB of random bytes per example would be slow.
BIG = [bytes([i]) * n for i, n in enumerate((8_191, 8_192, 16_383, 16_384, 20_000))]
fields = st.one_of(st.none(), st.binary(max_size=300), st.sampled_from(BIG))
records = st.lists(st.tuples(fields, fields, st.integers(-5_000, 40_000)), min_size=1, max_size=30)


@settings(max_examples=100, deadline=None)
@given(records=records, batch_size=st.integers(100, 100_000))
def test_same_bytes_and_same_fullness_as_the_general_builder(records, batch_size) -> None:
    fast, general = ProducerBatchBuilder(batch_size), RecordBatchBuilder(batch_size)
    base = 1_700_000_000_000
    for key, value, delta in records:
        assert fast.append(key, value, (), base + delta) == general.append(key, value, (), base + delta)
        assert fast.estimated_size == general.estimated_size
    fast.set_producer_state(7, 1, 3, False)
    general.set_producer_state(7, 1, 3, False)
    assert fast.build() == general.build()
    decoded = decode_batch(fast.build())
    assert len(decoded.records) == general.record_count


def test_headers_and_missing_timestamps_take_the_general_path() -> None:
    fast = ProducerBatchBuilder(10_000)
    assert fast.append(b"k", b"v", (("h", b"1"),), 5)
    assert fast.append(bytearray(b"k"), memoryview(b"v"), (), 6)
    assert fast.append(None, b"v")
    records = decode_batch(fast.build()).records
    assert records[0].headers == (("h", b"1"),)
    assert [r.key for r in records] == [b"k", b"k", None]
