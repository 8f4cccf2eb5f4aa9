"""How long one expensive request stops a Kafka listener: a Metadata request naming 100,000s of topics.

A frame's decode costs per element (kafka-python's generated decoders: about 10-25 µs a topic), so
a request of a few MB is seconds of CPU. The listener (protocol/kafka/shell/listener.py) runs in
this process on 127.0.0.1 with a KafkaApis that answers at once; a child process sends the bomb
while another child sends one small ApiVersions request every 10 ms and times each answer (the
time the listener's event loop could not serve anyone). Two rows, in one run: the listener as it
is (frames over 16 KiB decoded on its decoder thread) and the same listener decoding every frame
on its event loop (as before session 17).

    python benchmarks/kafka_decode_bomb_bench.py [--topics 200000] [--rounds 2]

Prints, per row: the bomb's size, how long until its answer, and the small requests' round trips
during that time (p50, p99, max, and how many were answered).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

from kafka.protocol.metadata.api_versions import ApiVersionsRequest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_listener_bench import InstantApis  # benchmarks/ is on sys.path when this file runs as a script

from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, encode_request
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.kafka.shell.listener import KafkaListener
from tests.unit.protocol.test_kafka_listener import metadata_bomb  # the test's frame, one builder

PROBE_EVERY_S = 0.01


class InlineDecodeListener(KafkaListener):
    """The listener before session 17: every frame decoded on the event loop."""

    async def decode(self, frame: bytes) -> tuple[RequestHeader, Any]:
        return decode_request(frame)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    return exactly(struct.unpack(">i", exactly(4))[0])


def _attacker(port: int, topics: int, results: Any) -> None:
    frame = metadata_bomb(topics)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(600)
        start = time.perf_counter()
        sock.sendall(frame)
        _read_frame(sock)
        results.put(("bomb", len(frame), start, time.perf_counter()))


async def run_row(listener_class: type[KafkaListener], topics: int) -> dict[str, Any]:
    """The bomb's answer time, and the round trips of the small requests sent while it was out."""
    listener = listener_class("PLAINTEXT", "127.0.0.1", 0, InstantApis(), KafkaListenerLimits())
    await listener.start()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    stop = ctx.Value("d", 0.0)
    prober = ctx.Process(target=_prober, args=(listener.port, stop, results))
    attacker = ctx.Process(target=_attacker, args=(listener.port, topics, results))
    try:
        prober.start()
        await asyncio.sleep(2.0)  # the prober's start-up (spawn, imports) before the bomb
        attacker.start()
        got: dict[str, Any] = {}
        while "bomb" not in got:
            item = await asyncio.to_thread(results.get, True, 600)
            got[item[0]] = item
        _, size, start, end = got["bomb"]
        stop.value = 1.0
        while "probe" not in got:
            item = await asyncio.to_thread(results.get, True, 60)
            got[item[0]] = item
        during = [trip * 1000 for sent, trip in got["probe"][1] if start <= sent <= end]
        return {"bomb_bytes": size, "bomb_answered_s": end - start, "trips_ms": during}
    finally:
        for p in (prober, attacker):
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(10)
        await listener.stop()


def _prober(port: int, stop: Any, results: Any) -> None:
    """One ApiVersions request every 10 ms, timed, until told to stop (the bomb answered), 10 minutes at most."""
    request = encode_request(
        RequestHeader(18, 3, 0, "probe"), ApiVersionsRequest(client_software_name="p", client_software_version="1")
    )
    samples = []
    deadline = time.perf_counter() + 600
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(600)
        while not stop.value and time.perf_counter() < deadline:
            sent = time.perf_counter()
            sock.sendall(request)
            _read_frame(sock)
            done = time.perf_counter()
            samples.append((sent, done - sent))
            time.sleep(max(0.0, PROBE_EVERY_S - (done - sent)))
    results.put(("probe", samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200_000, help="topics the Metadata request names")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"one Metadata v12 request naming {args.topics:,} topics ({len(metadata_bomb(args.topics)):,} bytes)")
    print("| listener | bomb answered after (s) | small requests during it: answered, p50 / p99 / max (ms) |")
    print("|---|---|---|")
    rows = [("decoded on a thread (now)", KafkaListener), ("decoded on the event loop (before)", InlineDecodeListener)]
    for _ in range(args.rounds):
        for label, cls in rows:
            out = asyncio.run(run_row(cls, args.topics))
            trips = sorted(out["trips_ms"])
            if trips:
                p50 = statistics.median(trips)
                p99 = trips[min(len(trips) - 1, int(len(trips) * 0.99))]
                cells = f"{len(trips)}, {p50:.1f} / {p99:.1f} / {trips[-1]:.1f}"
            else:
                cells = "none"
            print(f"| {label} | {out['bomb_answered_s']:.2f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
