"""What one cluster-internal exchange costs on each transport: the RPC stream, RPC over HTTP, Kafka's protocol.

Issue 16 asks whether Raft, registration/heartbeats, AlterPartition and follower fetches should move onto
Kafka's own API keys (as KRaft) or stay on the internal RPC (as Redpanda). A Raft commit is a chain of
such exchanges, so the figure that decides is the round trip of one small call at a time between two
processes, with the server's work reduced to nothing: what the transport itself costs.

A server process serves, on 127.0.0.1, the internal RPC (protocol/shell/rpc.py's app: HTTP and the
per-peer stream) with one route answering a fixed map, and a Kafka listener (protocol/kafka/shell/
listener.py) answering a fixed Metadata response of about the same size. This process calls one at a
time, the transports interleaved in rounds so that a change in machine load hits all of them: the RPC
stream (`RpcClient(peer_streams=True)`, what nodes use between them now), RPC over HTTP, and a
Kafka connection (the client's own, client/shell/kafka_connection.py, with ApiVersions negotiated).
Beside them, `raw_frames`: the same CBOR call and answer as the RPC stream, with the same route handler
behind run_handler, on a plain asyncio Protocol with 4-byte size prefixes instead of aiohttp's
websocket (no auth, no limits: a lower bound for what a framed stream would cost, the lead in
docs/internal-transport.md).
Both processes run uvloop, as the nodes do (since 2026-11-27 afternoon; asyncio's loop before). Each
transport's round trip p50/p99 comes with the CPU per call of the server process and of this one
(/proc and process_time, summed over that transport's rounds).
Then, in this process, what encoding and decoding one Raft fetch exchange (request and empty answer)
costs: the RPC's CBOR maps against Kafka's Fetch v16 frames with KRaft's fields.

    python benchmarks/internal_transport_bench.py [--calls 20000] [--rounds 10] [--json] [--busy-cores N]

`--busy-cores N` runs N busy loops at nice 19 beside the measurement: they take a core only when
nothing else wants it, so no core ever idles. On a virtual machine whose idle vCPUs halt (this one's
kernel runs cpuidle haltpoll with guest_halt_poll_ns=0), the round trip between two idle processes
pays for waking a halted vCPU on each side; the difference between the two runs is that cost.

Results and the decision: docs/internal-transport.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from proc_cpu import cpu_seconds

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kraftpy.protocol.stream_frames import FrameSplitter, frame  # noqa: E402

ROUTE = "/bench/fetch"
SPIN_BOUND_S = 900  # a busy loop ends by itself after this, whatever happens to the bench
METADATA = 3
METADATA_VERSION = 12
# About a Raft FetchResponse with nothing new: ids, epochs, offsets, an empty record set.
ANSWER = {
    "type": "FetchResponse",
    "cluster_id": "bench-cluster-id-0000",
    "src": 1,
    "dst": 2,
    "correlation_id": 7,
    "epoch": 5,
    "leader_id": 1,
    "high_watermark": 123_456,
    "log_start_offset": 0,
    "diverging_epoch": None,
    "records": b"",
}


class _Frames(asyncio.Protocol):
    """Size-prefixed frames on a plain asyncio Protocol: the raw_frames reference transport (both ends)."""

    def __init__(self, on_frame: Any) -> None:
        self.on_frame = on_frame
        self.splitter = FrameSplitter(1 << 26)  # the stream's own frame cutter
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for payload in self.splitter.feed(data):
            self.on_frame(self, payload)

    def send(self, payload: bytes) -> None:
        self.transport.write(frame(payload))


def _use_uvloop() -> bool:
    """uvloop where it is installed, as the nodes run (tools/commands/server.py); asyncio's loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return False
    uvloop.install()
    return True


def _server(ready: Any, stop: Any) -> None:
    _use_uvloop()
    asyncio.run(_serve(ready, stop))


async def _serve(ready: Any, stop: Any) -> None:
    from aiohttp import web
    from kafka.protocol.metadata.metadata import MetadataResponse

    from kraftpy.protocol.kafka.limits import KafkaListenerLimits
    from kraftpy.protocol.kafka.shell.listener import KafkaListener, RequestContext
    from kraftpy.protocol.shell.rpc import make_app
    from kraftpy.protocol.shell.rpc_calls import decode_map, encode, run_handler

    async def fetch(body: dict[str, Any]) -> dict[str, Any]:
        return ANSWER

    brokers = [MetadataResponse.MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i) for i in (1, 2)]

    class Apis:
        one_at_a_time_api_keys: frozenset[int] = frozenset()

        async def handle(self, ctx: RequestContext, request: Any) -> Any:
            if ctx.header.api_key == 18:
                from kraftpy.broker.kafka.api_versions import api_versions_answer

                return api_versions_answer(request, ctx.header.api_version, frozenset({18, METADATA}))
            return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id="c", controller_id=1, topics=[])

        def answer_undecodable(self, error: Any) -> None:
            return None

    runner = web.AppRunner(make_app({ROUTE: fetch}), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rpc_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, Apis(), KafkaListenerLimits())
    await listener.start()
    loop = asyncio.get_running_loop()

    def on_call(frames: _Frames, frame: bytes) -> None:
        call = decode_map(frame, "stream frame")

        async def answer() -> None:
            out, _status = await run_handler(fetch, call["body"], "a framed call")
            frames.send(encode({"id": call["id"], "body": out}))

        task = loop.create_task(answer())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    tasks: set[asyncio.Task[None]] = set()
    framed = await loop.create_server(lambda: _Frames(on_call), "127.0.0.1", 0)
    ready.put((rpc_port, listener.port, framed.sockets[0].getsockname()[1]))
    while stop.empty():
        await asyncio.sleep(0.05)
    framed.close()
    await listener.stop()
    await runner.cleanup()


def codec_us(count: int) -> dict[str, float]:
    """Microseconds to encode and decode one Raft fetch exchange (request and empty answer): the internal
    RPC's CBOR bodies (raft/codec.py's dicts) against Kafka's Fetch v16 frames, as KRaft sends them."""
    import cbor2

    from kraftpy.protocol.kafka.codec import (
        FetchRequest,
        FetchResponse,
        RequestHeader,
        decode_request,
        decode_response,
        encode_request,
        encode_response,
    )
    from kraftpy.raft.messages import FetchRequest as RaftFetch
    from kraftpy.raft.messages import to_dict

    raft_request = to_dict(RaftFetch("bench-cluster-id-0000", 2, 1, 8, 1, 123_456, 5, 500, 0))
    header = RequestHeader(1, 16, 7, "raft-2")
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=5, fetch_offset=123_456, last_fetched_epoch=5, log_start_offset=0,
        partition_max_bytes=1 << 20,
    )  # fmt: skip
    topic_id = __import__("uuid").UUID(int=1)
    kafka_request = FetchRequest(
        cluster_id="bench-cluster-id-0000", replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=-1),
        max_wait_ms=500, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[partition])], forgotten_topics_data=[],
        rack_id="",
    )  # fmt: skip
    answer = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=123_456, last_stable_offset=123_456, log_start_offset=0,
        aborted_transactions=[], preferred_read_replica=-1, records=b"",
    )  # fmt: skip
    kafka_answer = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[FetchResponse.FetchableTopicResponse(topic_id=topic_id, partitions=[answer])], node_endpoints=[],
    )  # fmt: skip
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    for _ in range(count):
        cbor2.loads(cbor2.dumps(raft_request))
        cbor2.loads(cbor2.dumps(ANSWER))
    out["cbor_us"] = round((time.perf_counter() - t0) / count * 1e6, 2)
    t0 = time.perf_counter()
    for _ in range(count):
        decode_request(encode_request(header, kafka_request)[4:])
        decode_response(header, encode_response(header, kafka_answer)[4:])
    out["kafka_us"] = round((time.perf_counter() - t0) / count * 1e6, 2)
    return out


def _spin(until_monotonic_s: float) -> None:
    """A busy loop at the lowest priority, until the deadline (a bound if the bench dies first)."""
    os.nice(19)
    while time.monotonic() < until_monotonic_s:
        pass


def percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


async def measure(
    rpc_port: int, kafka_port: int, framed_port: int, calls: int, rounds: int, server_pid: int
) -> dict[str, Any]:
    from kafka.protocol.metadata.metadata import MetadataRequest

    from kraftpy.client.shell.kafka_connection import KafkaConnection
    from kraftpy.protocol.shell.rpc import RpcClient
    from kraftpy.protocol.shell.rpc_calls import decode_map, encode

    rpc = RpcClient(request_timeout_ms=10_000)
    streamed = RpcClient(request_timeout_ms=10_000, peer_streams=True)
    kafka = KafkaConnection(("127.0.0.1", kafka_port), client_id="bench", max_in_flight=1, connect_timeout_ms=5_000)
    await kafka.open(5_000)
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    address = ("127.0.0.1", rpc_port)

    async def stream() -> None:
        await streamed.call(address, ROUTE, {"dst": 1})

    async def http() -> None:
        await rpc.call(address, ROUTE, {"dst": 1})

    async def kafka_call() -> None:
        await kafka.request(METADATA, METADATA_VERSION, request, 10_000)

    # raw_frames: a call id per frame, a future per call and a timer bounding it, as the RPC stream has.
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Any]] = {}

    def on_answer(frames: _Frames, frame: bytes) -> None:
        answer = decode_map(frame, "stream answer")
        future = waiting.pop(answer["id"], None)
        if future is not None and not future.done():
            future.set_result(answer["body"])

    _, framed = await loop.create_connection(lambda: _Frames(on_answer), "127.0.0.1", framed_port)
    next_id = iter(range(1, 1 << 62))

    async def raw_frames() -> None:
        call_id = next(next_id)
        future = waiting[call_id] = loop.create_future()
        framed.send(encode({"id": call_id, "path": ROUTE, "body": {"dst": 1}}))
        timer = loop.call_later(10, future.cancel)
        try:
            await future
        finally:
            timer.cancel()

    transports = {"rpc_stream": stream, "raw_frames": raw_frames, "rpc_http": http, "kafka": kafka_call}
    times: dict[str, list[float]] = {name: [] for name in transports}
    # CPU per call on each side, summed over the rounds: what a transport costs the two processes
    server_cpu = {name: 0.0 for name in transports}
    client_cpu = {name: 0.0 for name in transports}
    try:
        for call in transports.values():  # warm up: connections, caches
            for _ in range(200):
                await call()
        per_round = max(1, calls // rounds)
        for _ in range(rounds):
            for name, call in transports.items():
                server_before, client_before = cpu_seconds(server_pid), time.process_time()
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    await call()
                    times[name].append((time.perf_counter() - t0) * 1000)
                server_cpu[name] += cpu_seconds(server_pid) - server_before
                client_cpu[name] += time.process_time() - client_before
    finally:
        await rpc.close()
        await streamed.close()
        await kafka.close()
        framed.transport.close()
    out: dict[str, Any] = {"calls_each": per_round * rounds, "rounds": rounds}
    for name, ms in times.items():
        ms.sort()
        out[name] = {
            "p50_ms": round(percentile(ms, 0.5), 4),
            "p99_ms": round(percentile(ms, 0.99), 4),
            "server_cpu_us_per_call": round(server_cpu[name] / len(ms) * 1e6, 1),
            "client_cpu_us_per_call": round(client_cpu[name] / len(ms) * 1e6, 1),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per transport")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--busy-cores", type=int, default=0, help="busy loops at nice 19 beside the measurement")
    args = parser.parse_args()
    if not 0 <= args.busy_cores <= (os.cpu_count() or 1):
        parser.error(f"--busy-cores must be 0-{os.cpu_count()}")
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_server, args=(ready, stop), daemon=True)
    server.start()
    spinners = [
        ctx.Process(target=_spin, args=(time.monotonic() + SPIN_BOUND_S,), daemon=True) for _ in range(args.busy_cores)
    ]
    for spinner in spinners:
        spinner.start()
    try:
        rpc_port, kafka_port, framed_port = ready.get(timeout=30)
        before = os.getloadavg()
        loop_name = "uvloop" if _use_uvloop() else "asyncio"
        results = asyncio.run(measure(rpc_port, kafka_port, framed_port, args.calls, args.rounds, server.pid))
        results["event_loop"] = loop_name
        results["busy_cores"] = args.busy_cores
        results["codec_per_exchange"] = codec_us(5_000)
        results["loadavg_before_after"] = [round(before[0], 2), round(os.getloadavg()[0], 2)]
        results["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join(10)
        stop.put(True)
        server.join(10)
        if server.is_alive():
            server.kill()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    busy = f", {args.busy_cores} busy loops at nice 19 beside them" if args.busy_cores else ""
    print(f"{results['calls_each']} calls each, one at a time, {results['rounds']} interleaved rounds{busy}")
    for name in ("rpc_stream", "raw_frames", "rpc_http", "kafka"):
        r = results[name]
        print(
            f"  {name:10}  p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
            f"CPU per call: server {r['server_cpu_us_per_call']} us, client {r['client_cpu_us_per_call']} us"
        )
    codec = results["codec_per_exchange"]
    print(f"  codec, one Raft fetch exchange: CBOR {codec['cbor_us']} us, Kafka Fetch v16 {codec['kafka_us']} us")
    print(f"  load average {results['loadavg_before_after'][0]} -> {results['loadavg_before_after'][1]}")


if __name__ == "__main__":
    main()
