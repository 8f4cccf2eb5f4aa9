"""The partitioner matches Kafka's Java client bit for bit and spreads unkeyed records."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kraftpy.client.producer.partitioner import Partitioner, murmur2, partition_for_key

# Apache Kafka's UtilsTest.testMurmur2 vectors (Java signed ints), and one more where noted.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    # Not in UtilsTest: the empty key, 0x106e08d9, as librdkafka's partitioner test has it (computed there with
    # Kafka's own Utils.murmur2 through its tests/java/Murmur2Cli); kafka-python's murmur2 agrees.
    (b"", 275646681),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(key: bytes) -> None:
    # kafka-python's murmur2 returns the unsigned form of the same 32 bits.
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF


def test_key_partition_uses_sign_bit_clearing_not_abs() -> None:
    assert partition_for_key(b"foobar", 50) == (-790332482 & 0x7FFFFFFF) % 50
    p = Partitioner()
    assert p.partition("t", b"foobar", 50) == partition_for_key(b"foobar", 50)


def test_explicit_partition_wins_and_is_checked() -> None:
    p = Partitioner()
    assert p.partition("t", b"foobar", 6, explicit=4) == 4
    with pytest.raises(ValueError, match="out of range"):
        p.partition("t", None, 6, explicit=6)


def test_unkeyed_records_stick_until_the_batch_closes_then_rotate() -> None:
    p = Partitioner()
    first = p.partition("t", None, 3)
    assert all(p.partition("t", None, 3) == first for _ in range(10))
    seen = [first]
    for _ in range(5):
        p.on_new_batch("t", seen[-1], 3)
        seen.append(p.partition("t", None, 3))
    assert all(a != b for a, b in itertools.pairwise(seen))
    assert set(seen) == {0, 1, 2}


def test_unkeyed_prefers_available_partitions() -> None:
    p = Partitioner()
    chosen = {p.partition("t", None, 6, available=[2, 5])}
    for _ in range(4):
        p.on_new_batch("t", p.partition("t", None, 6, available=[2, 5]), 6, available=[2, 5])
        chosen.add(p.partition("t", None, 6, available=[2, 5]))
    assert chosen == {2, 5}


def test_custom_partitioner_is_used_and_checked() -> None:
    p = Partitioner(custom=lambda topic, key, parts, avail: len(key or b"") % len(parts))
    assert p.partition("t", b"abcd", 3) == 1
    bad = Partitioner(custom=lambda *a: 7)
    with pytest.raises(ValueError, match="custom partitioner chose 7"):
        bad.partition("t", b"k", 3)
