"""Encode/decode cost of a 1 MiB Produce request and Fetch response, per Kafka codec.

Compares the candidates of issue 15's codec choice (kio, kafka-python 3.x's
generated protocol) on the two messages that carry record batches. The batches
are opaque bytes (16 partitions x 64 KiB); what is measured is the codec's own
work around them. Prints one line per (library, message, version): best and median
microseconds per encode and per decode over a few short rounds.

    pip install kio   # the rival candidate; not a kraftpy dependency (skipped if absent)
    python benchmarks/kafka_codec_bench.py [--rounds 7] [--iterations 20]
"""

from __future__ import annotations

import argparse
import datetime
import io
import statistics
import time
from collections.abc import Callable

PARTITIONS = 16
BATCH_BYTES = 64 * 1024  # 16 x 64 KiB = 1 MiB of batches per message


def _blob(index: int) -> bytes:
    return bytes([index % 251]) * BATCH_BYTES


def _time_us(fn: Callable[[], object], rounds: int, iterations: int) -> tuple[float, float]:
    """(best, median) microseconds per call over `rounds` rounds: the best is the least disturbed by load."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        samples.append((time.perf_counter() - start) / iterations * 1e6)
    return min(samples), statistics.median(samples)


def _kio_cases() -> dict[str, tuple[Callable[[], bytes], Callable[[bytes], object]]]:
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v4 import response as f4
    from kio.schema.fetch.v12 import response as f12
    from kio.schema.produce.v7 import request as p7
    from kio.schema.produce.v9 import request as p9
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import Records, i16, i32, i64

    def produce(mod):
        return mod.ProduceRequest(
            acks=i16(-1),
            timeout=datetime.timedelta(milliseconds=30_000),
            topic_data=(
                mod.TopicProduceData(
                    name="bench",
                    partition_data=tuple(
                        mod.PartitionProduceData(index=i32(p), records=Records(_blob(p))) for p in range(PARTITIONS)
                    ),
                ),
            ),
        )

    def fetch(mod):
        parts = tuple(
            mod.PartitionData(
                partition_index=i32(p),
                error_code=ErrorCode.none,
                high_watermark=i64(1000),
                aborted_transactions=None,
                records=Records(_blob(p)),
            )
            for p in range(PARTITIONS)
        )
        kwargs = {"error_code": ErrorCode.none} if mod is f12 else {}
        return mod.FetchResponse(
            throttle_time=datetime.timedelta(0),
            responses=(mod.FetchableTopicResponse(topic="bench", partitions=parts),),
            **kwargs,
        )

    cases = {}
    for label, mod, build, cls_name in (
        ("produce v7", p7, produce, "ProduceRequest"),
        ("produce v9", p9, produce, "ProduceRequest"),
        ("fetch v4", f4, fetch, "FetchResponse"),
        ("fetch v12", f12, fetch, "FetchResponse"),
    ):
        cls = getattr(mod, cls_name)
        write = entity_writer(cls)
        read = entity_reader(cls)
        message = build(mod)

        def encode(write=write, message=message) -> bytes:
            buffer = io.BytesIO()
            write(buffer, message)
            return buffer.getvalue()

        def decode(data: bytes, read=read) -> object:
            return read(data, 0)

        cases[label] = (encode, decode)
    return cases


def _kafka_python_cases() -> dict[str, tuple[Callable[[], bytes], Callable[[bytes], object]]]:
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.producer.produce import ProduceRequest

    def produce(version: int):
        return ProduceRequest(
            version=version,
            transactional_id=None,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="bench",
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=_blob(p))
                        for p in range(PARTITIONS)
                    ],
                )
            ],
        )

    def fetch(version: int):
        part_cls = FetchResponse.FetchableTopicResponse.PartitionData
        return FetchResponse(
            version=version,
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="bench",
                    partitions=[
                        part_cls(
                            partition_index=p,
                            error_code=0,
                            high_watermark=1000,
                            last_stable_offset=1000,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=_blob(p),
                        )
                        for p in range(PARTITIONS)
                    ],
                )
            ],
        )

    cases = {}
    for label, cls, build, version in (
        ("produce v7", ProduceRequest, produce, 7),
        ("produce v9", ProduceRequest, produce, 9),
        ("fetch v4", FetchResponse, fetch, 4),
        ("fetch v12", FetchResponse, fetch, 12),
    ):
        message = build(version)

        def encode(message=message) -> bytes:
            return bytes(message.encode())

        def decode(data: bytes, cls=cls, version=version) -> object:
            return cls.decode(data, version=version)

        cases[label] = (encode, decode)
    return cases


def _seam_cases() -> dict[str, tuple[Callable[[], bytes], Callable[[bytes], object]]]:
    """kafka-python's messages through our seam (protocol/kafka/codec.py): header, framing, end checks."""
    from kraftpy.protocol.kafka.codec import (
        RequestHeader,
        decode_request,
        decode_response,
        encode_request,
        encode_response,
    )

    cases = {}
    for label, (encode_message, _) in _kafka_python_cases().items():
        api_key = 0 if label.startswith("produce") else 1
        header = RequestHeader(api_key, int(label.split("v")[1]), 1, "bench")
        message = encode_message.__defaults__[0]
        if api_key == 0:

            def encode(header=header, message=message) -> bytes:
                return encode_request(header, message)

            def decode(frame: bytes) -> object:
                return decode_request(memoryview(frame)[4:])
        else:

            def encode(header=header, message=message) -> bytes:
                return encode_response(header, message)

            def decode(frame: bytes, header=header) -> object:
                return decode_response(header, memoryview(frame)[4:])

        cases[label] = (encode, decode)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    print(f"{'library':14} {'message':11} {'bytes':>9} {'encode_us best/median':>22} {'decode_us best/median':>22}")
    for library, factory in (("kio", _kio_cases), ("kafka-python", _kafka_python_cases), ("kraftpy", _seam_cases)):
        try:
            cases = factory()
        except ImportError as exc:
            print(f"{library:14} skipped: {exc}")
            continue
        for label, (encode, decode) in cases.items():
            data = encode()
            encode_us = _time_us(encode, args.rounds, args.iterations)
            decode_us = _time_us(lambda decode=decode, data=data: decode(data), args.rounds, args.iterations)
            enc = f"{encode_us[0]:.0f} / {encode_us[1]:.0f}"
            dec = f"{decode_us[0]:.0f} / {decode_us[1]:.0f}"
            print(f"{library:14} {label:11} {len(data):9d} {enc:>22} {dec:>22}")


if __name__ == "__main__":
    main()
