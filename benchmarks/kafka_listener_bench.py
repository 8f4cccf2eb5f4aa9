"""Requests per second one Kafka listener answers: framing, decode, ordering and encode, no broker work.

The listener (protocol/kafka/shell/listener.py) runs in this process on
127.0.0.1 with a KafkaApis that answers at once (a fixed ApiVersions or
Metadata response); clients in child processes pipeline requests, up to
`--window` unanswered each, over `--connections` connections. What is
measured is the listener's own cost per request, the floor under every API.

    python benchmarks/kafka_listener_bench.py [--requests 20000] [--connections 1] [--window 16]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import struct
import time
from typing import Any

from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from kraftpy.protocol.kafka.codec import RequestHeader, encode_request
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.kafka.shell.listener import KafkaListener, RequestContext

_BROKERS = [MetadataResponse.MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i) for i in range(3)]


class InstantApis:
    one_at_a_time_api_keys: frozenset[int] = frozenset()

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.header.api_key == 18:
            return ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=0)
        return MetadataResponse(throttle_time_ms=0, brokers=_BROKERS, cluster_id="c", controller_id=1, topics=[])

    def answer_undecodable(self, error: Any) -> None:
        return None


def _frame(api: str, cid: int) -> bytes:
    if api == "api_versions":
        body = ApiVersionsRequest(client_software_name="bench", client_software_version="1")
        return encode_request(RequestHeader(18, 3, cid, "bench"), body)
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return encode_request(RequestHeader(3, 12, cid, "bench"), body)


def _client(port: int, api: str, count: int, window: int, start_at: float, results: Any) -> None:
    frame = _frame(api, 1)
    sock = socket.create_connection(("127.0.0.1", port))
    while time.time() < start_at:  # every client connected and imported before any sends
        time.sleep(0.001)
    start = time.perf_counter()
    buf = b""
    sent = received = 0
    while received < count:
        while sent < count and sent - received < window:
            sock.sendall(frame)
            sent += 1
        buf += sock.recv(1 << 20)
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            buf = buf[4 + struct.unpack_from(">i", buf)[0] :]
            received += 1
    results.put(time.perf_counter() - start)
    sock.close()


async def _run(api: str, requests: int, connections: int, window: int) -> float:
    limits = KafkaListenerLimits(max_in_flight_requests=max(16, window))
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, InstantApis(), limits)
    await listener.start()
    ctx = multiprocessing.get_context("spawn")
    per = requests // connections
    results = ctx.Queue()
    start_at = time.time() + 5  # time for the children to start and import
    args = (listener.port, api, per, window, start_at, results)
    procs = [ctx.Process(target=_client, args=args) for _ in range(connections)]
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs):
        await asyncio.sleep(0.01)
    elapsed = max(results.get() for _ in procs)  # the slowest client: all requests answered by then
    await listener.stop()
    return per * connections / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--window", type=int, default=16)
    args = parser.parse_args()
    for api in ("api_versions", "metadata"):
        rate = asyncio.run(_run(api, args.requests, args.connections, args.window))
        print(f"{api}: {rate:,.0f} requests/s ({args.connections} connection(s), window {args.window})")


if __name__ == "__main__":
    main()
