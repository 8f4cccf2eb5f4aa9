"""The librdkafka group member reads its generation from librdkafka's serialized group metadata."""

from __future__ import annotations

import sys

import confluent_kafka

from kraftpy.tools.faults.workloads.group_member_confluent import generation_of


def test_the_generation_is_read_from_librdkafkas_serialized_metadata() -> None:
    assert generation_of(b"CGMDv2:" + (7).to_bytes(4, sys.byteorder) + b"g\x00m\x00\x00") == 7
    assert generation_of(b"not librdkafka's format") == -1
    assert generation_of(b"CGMDv2:\x01") == -1


def test_a_consumer_that_never_joined_has_no_generation() -> None:
    # The real librdkafka's bytes (no broker needed): generation -1 until the consumer joins a group.
    consumer = confluent_kafka.Consumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    try:
        assert generation_of(consumer.consumer_group_metadata()) == -1
    finally:
        consumer.close()
