"""Whether a Produce request is cheap to decode, read from its frame without decoding it.

Decoding costs per element (a topic, a partition, a tagged field), not per byte: the record
batches stay opaque bytes. A Produce frame of a few partitions is cheap however large its
batches, one of a million empty partitions is seconds of CPU. The Kafka listener decodes the
first kind on its event loop and sends the second, like every other large frame, to its
decoder thread (docs/kafka-listener.md, "Decoding off the event loop").
"""

from __future__ import annotations

import struct

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.apis import PRODUCE
from kraftpy.protocol.kafka.codec import read_client_id, read_uvarint

# Elements (topics, partitions, tagged fields) a Produce request may hold and still be decoded
# inline: a few ms of decoding at most. A producer's request carries the partitions one broker
# leads, usually far fewer.
LIGHT_PRODUCE_ELEMENTS = 1000

_HEADER = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FIRST_FLEXIBLE = 9  # Produce v9+: compact encodings, tagged fields, request header v2
_FIRST_WITH_TOPIC_IDS = 13  # Produce v13 names topics by id (KIP-516)
_UUID_BYTES = 16


class _Heavy(Exception):
    """More elements than allowed, or bytes that do not parse: not for the inline path."""


class _Skim:
    def __init__(self, frame: bytes | memoryview, max_elements: int) -> None:
        self.view = memoryview(frame)
        self.left = max_elements

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise _Heavy

    def skip(self, pos: int, size: int) -> int:
        if size < 0 or pos + size > len(self.view):
            raise _Heavy
        return pos + size

    def length(self, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
        """A string's, bytes' or array's length (-1: null), compact (uvarint n + 1) or fixed-width."""
        if flexible:
            n, pos = read_uvarint(self.view, pos)
            return n - 1, pos
        if pos + fixed.size > len(self.view):
            raise _Heavy
        return fixed.unpack_from(self.view, pos)[0], pos + fixed.size

    def tagged_fields(self, pos: int) -> int:
        count, pos = read_uvarint(self.view, pos)
        self.spend(count)
        for _ in range(count):
            _, pos = read_uvarint(self.view, pos)
            size, pos = read_uvarint(self.view, pos)
            pos = self.skip(pos, size)
        return pos


def is_light_produce(frame: bytes | memoryview, max_elements: int = LIGHT_PRODUCE_ELEMENTS) -> bool:
    """True for a Produce v3+ request frame (without its size prefix) holding at most `max_elements`
    topics, partitions and tagged fields. False for anything else, a malformed frame included: the
    decoder, off the loop, then says what is wrong with it."""
    skim = _Skim(frame, max_elements)
    view = skim.view
    try:
        if len(view) < _HEADER.size:
            return False
        api_key, version, _ = _HEADER.unpack_from(view, 0)
        if api_key != PRODUCE or version < 3:
            return False
        flexible = version >= _FIRST_FLEXIBLE
        _, pos = read_client_id(view, _HEADER.size)
        if flexible:
            pos = skim.tagged_fields(pos)
        size, pos = skim.length(pos, flexible, _INT16)  # transactional_id
        pos = skim.skip(pos, max(size, 0))
        pos = skim.skip(pos, _INT16.size + _INT32.size)  # acks, timeout_ms
        topics, pos = skim.length(pos, flexible, _INT32)
        skim.spend(max(topics, 0))
        for _ in range(topics):
            if version >= _FIRST_WITH_TOPIC_IDS:
                pos = skim.skip(pos, _UUID_BYTES)
            else:
                size, pos = skim.length(pos, flexible, _INT16)  # the topic's name
                pos = skim.skip(pos, max(size, 0))
            partitions, pos = skim.length(pos, flexible, _INT32)
            skim.spend(max(partitions, 0))
            for _ in range(partitions):
                pos = skim.skip(pos, _INT32.size)  # index
                size, pos = skim.length(pos, flexible, _INT32)  # records
                pos = skim.skip(pos, max(size, 0))
                if flexible:
                    pos = skim.tagged_fields(pos)
            if flexible:
                pos = skim.tagged_fields(pos)
        if flexible:
            pos = skim.tagged_fields(pos)
    except (_Heavy, KafkaError):
        return False
    return pos == len(view)
