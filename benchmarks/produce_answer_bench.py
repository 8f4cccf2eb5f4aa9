"""CPU per Produce answer: kafka-python's message objects and encoder against protocol/kafka/produce_response.py.

A broker answers every Produce request (librdkafka sends one per partition), so
this is the codec's most frequent answer. Both sides write the same bytes
(tests/unit/protocol/test_kafka_produce_response.py); this times them on a
successful answer for two partitions of one topic, per version. Best and median
of a few rounds, in microseconds per answer. Results in docs/kafka-codec.md.

    python benchmarks/produce_answer_bench.py [--rounds 7] [--iterations 5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kafka_codec_bench import _time_us
from kraftpy.protocol.kafka.produce_response import PartitionAnswer, TopicAnswer, encode_produce_response
from tests.unit.protocol.test_kafka_produce_response import library_bytes

VERSIONS = (3, 7, 9, 12, 13)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=5000)
    args = parser.parse_args()
    answer = [TopicAnswer("events", uuid.uuid4(), [PartitionAnswer(p, 0, 1_000_000 + p, -1, 0) for p in (0, 1)])]
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds of {args.iterations:,} answers")
    print("| version | library objects + encode, best / median µs | produce_response.py, best / median µs |")
    print("|---|---|---|")
    for version in VERSIONS:
        assert library_bytes(version, answer, []) == encode_produce_response(version, answer, [])
        lib = _time_us(lambda v=version: library_bytes(v, answer, []), args.rounds, args.iterations)
        ours = _time_us(lambda v=version: encode_produce_response(v, answer, []), args.rounds, args.iterations)
        print(f"| v{version} | {lib[0]:.1f} / {lib[1]:.1f} | {ours[0]:.1f} / {ours[1]:.1f} |")


if __name__ == "__main__":
    main()
