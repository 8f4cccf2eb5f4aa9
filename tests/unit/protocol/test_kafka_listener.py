"""The Kafka listener (protocol/kafka/shell/listener.py) on a real asyncio server on 127.0.0.1.

The broker behind it is replaced by `GatedApis`, whose handlers finish when
the test says so; the ApiVersions tests use the real dispatcher (`BrokerApis`)
with no API families loaded. Every wait is bounded (`_until`, `_read_frame`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import struct
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest

from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.node.config import build_config
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import API_VERSIONS, FETCH, METADATA, OFFSET_FETCH, PRODUCE, SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_request
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.kafka.shell.listener import CLOSE_CONNECTION, KafkaListener, RequestContext
from kraftpy.protocol.records.varint import encode_unsigned_varint
from kraftpy.protocol.shell.byte_budget import SMALL_FRAME_BYTES, ByteBudget
from kraftpy.protocol.shell.rpc_limits import cap_connections

WAIT_S = 10.0
# Long enough that a listener which was going to act has acted (used only to check that nothing happened).
SETTLE_S = 0.3


async def _until(what: str, probe: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Poll `probe` until truthy, failing with `what` after a bound."""
    async with asyncio.timeout(timeout_s):
        while not (value := probe()):
            await asyncio.sleep(0.01)
    return value


class GatedApis:
    """A fake broker: each request's handler waits for its gate (open at once unless `gated`).

    A Fetch is answered with `fetch_answer_bytes` of records, one at a time per connection as the
    broker's are."""

    one_at_a_time_api_keys = frozenset({FETCH})
    fetch_answer_bytes = 1024

    def __init__(self, gated: bool = False) -> None:
        self.gated = gated
        self.started: list[int] = []
        self.gates: dict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.special: dict[int, Any] = {}  # correlation id -> None (no answer), CLOSE_CONNECTION, an exception
        self.undecodable: list[KafkaError] = []
        self.allowances: dict[int, Any] = {}  # correlation id -> the answer allowance its handler got

    def release(self, *correlation_ids: int) -> None:
        for cid in correlation_ids:
            self.gates[cid].set()

    async def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        cid = ctx.header.correlation_id
        self.started.append(cid)
        self.allowances[cid] = ctx.answer_allowance
        if self.gated:
            await self.gates[cid].wait()
        special = self.special.get(cid, "answer")
        if isinstance(special, Exception):
            raise special
        if special != "answer":
            return special
        if ctx.header.api_key == FETCH:
            return _fetch_answer(self.fetch_answer_bytes)
        if ctx.header.api_key == METADATA:
            return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[])
        return ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=cid)

    def answer_undecodable(self, error: KafkaError) -> None:
        self.undecodable.append(error)
        return None


def _frame(cid: int, pad: int = 0, version: int = 3) -> bytes:
    """An ApiVersions request frame; `pad` characters of client software name make it larger."""
    body = ApiVersionsRequest(client_software_name="n" + "x" * pad, client_software_version="1")
    return encode_request(RequestHeader(API_VERSIONS, version, cid, "test"), body)


def fetch_request(topic: str = "t", offset: int = 0, max_wait_ms: int = 0, max_bytes: int = 32 << 20) -> FetchRequest:
    """A consumer's Fetch v12 request for partition 0 of `topic` (tests/kafka_clients send it too)."""
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=max_bytes, current_leader_epoch=-1
    )
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[], rack_id="",
    )  # fmt: skip


def _fetch_frame(cid: int) -> bytes:
    """A consumer's Fetch v12 request frame for partition 0 of topic "t"."""
    return encode_request(RequestHeader(FETCH, 12, cid, "test"), fetch_request())


def _fetch_answer(records_bytes: int) -> FetchResponse:
    topic = FetchResponse.FetchableTopicResponse
    part = topic.PartitionData(
        partition_index=0, error_code=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
        aborted_transactions=None, preferred_read_replica=-1, records=b"r" * records_bytes,
    )  # fmt: skip
    return FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0, responses=[topic(topic="t", partitions=[part])],
        node_endpoints=[],
    )  # fmt: skip


def _produce_frame(cid: int, partitions: int, records: bytes) -> bytes:
    """A Produce v9 request frame (acks=0) of `partitions` partitions of topic "t", each `records`."""
    topic = ProduceRequest.TopicProduceData
    data = [topic.PartitionProduceData(index=p, records=records) for p in range(partitions)]
    request = ProduceRequest(
        transactional_id=None, acks=0, timeout_ms=1000, topic_data=[topic(name="t", partition_data=data)]
    )
    return encode_request(RequestHeader(PRODUCE, 9, cid, "test"), request)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))
        await self.writer.drain()

    async def read_frame(self, timeout_s: float = WAIT_S) -> bytes:
        async with asyncio.timeout(timeout_s):
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            return await self.reader.readexactly(size)

    async def read_cid(self, timeout_s: float = WAIT_S) -> int:
        return struct.unpack_from(">i", await self.read_frame(timeout_s))[0]

    async def closed_by_server(self, timeout_s: float = WAIT_S) -> bool:
        """True once the server closed the connection (EOF, or a reset), within a bound."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self.reader.read(65536) == b""
        except ConnectionError:
            return True

    async def nothing_arrives(self) -> bool:
        try:
            async with asyncio.timeout(SETTLE_S):
                data = await self.reader.read(1)
        except TimeoutError:
            return True
        return data == b""  # closed is not an answer either

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def _start(apis: Any, **limits: int) -> KafkaListener:
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, apis, KafkaListenerLimits(**limits))
    await listener.start()
    return listener


@pytest.fixture
async def served() -> AsyncIterator[Callable[..., Any]]:
    """Start listeners with `await served(apis, **limits)`; all are stopped after the test."""
    started: list[KafkaListener] = []

    async def start(apis: Any, **limits: int) -> KafkaListener:
        listener = await _start(apis, **limits)
        started.append(listener)
        return listener

    yield start
    for listener in started:
        await listener.stop()


async def _left_nothing(listener: KafkaListener) -> None:
    """No connection task, no budget held, no waiter, and no task of the listener left on the loop."""
    await _until("the connections to end", lambda: listener.connection_count == 0)
    assert listener._budget.held_bytes == 0
    assert not listener._budget._waiters
    assert listener.answer_budget.held_bytes == 0
    me = asyncio.current_task()
    await _until("the handler tasks to end", lambda: not [t for t in asyncio.all_tasks() if t is not me])


# --- ordering and in-flight bounds -----------------------------------------------------------------------


async def test_pipelined_requests_are_answered_in_order_when_handlers_finish_out_of_order(served) -> None:
    apis = GatedApis(gated=True)
    listener = await served(apis, max_in_flight_requests=32)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(20)))
    await _until("all 20 handlers to start", lambda: len(apis.started) == 20)
    assert apis.started == list(range(20))  # handlers start in arrival order
    apis.release(*reversed(range(20)))
    assert [await client.read_cid() for _ in range(20)] == list(range(20))
    await client.close()
    await _left_nothing(listener)


async def test_max_in_flight_requests_bounds_the_requests_read_from_a_connection(served) -> None:
    apis = GatedApis(gated=True)
    listener = await served(apis, max_in_flight_requests=3)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(10)))
    await _until("3 handlers to start", lambda: len(apis.started) == 3)
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [0, 1, 2]  # the rest wait unread in the socket
    apis.release(0)
    assert await client.read_cid() == 0
    await _until("one more handler to start", lambda: len(apis.started) == 4)
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [0, 1, 2, 3]
    apis.release(*range(1, 10))
    assert [await client.read_cid() for _ in range(9)] == list(range(1, 10))
    await client.close()
    await _left_nothing(listener)


async def test_a_client_that_pipelines_fetches_and_never_reads_makes_the_broker_hold_one_answer(served) -> None:
    """Fetch answers carry up to 32 MiB: a connection runs one Fetch at a time, the next once the
    previous answer is in the socket. Before, 16 pipelined fetches of a client that read nothing
    were all answered into the broker's memory (16 x 32 MiB per connection)."""
    apis = GatedApis()
    # Far more than loopback's socket buffers take (a few MiB each way by default): the write waits.
    apis.fetch_answer_bytes = 40 << 20
    listener = await served(apis, max_in_flight_requests=16)
    client = await Client.connect(listener.port)
    await client.send(*(_fetch_frame(cid) for cid in range(3)), _frame(9))
    await _until("the first fetch to start", lambda: apis.started)
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [0]  # its answer waits for a client that does not read; the rest wait for it
    for cid in range(3):
        assert await client.read_cid() == cid
    assert await client.read_cid() == 9
    assert apis.started == [0, 1, 2, 9]
    await client.close()
    await _left_nothing(listener)


async def test_each_large_answer_api_runs_one_at_a_time_in_a_slot_of_its_own(served) -> None:
    """A Metadata request does not wait for a Fetch long poll before it, but a second Metadata request
    waits until the first one's answer is written (all-topics Metadata answers grow with the cluster:
    16 pipelined by a client that reads nothing were 16 of them in memory)."""
    apis = GatedApis(gated=True)
    apis.one_at_a_time_api_keys = frozenset({FETCH, METADATA})
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(_fetch_frame(1), metadata_bomb(1, cid=2), metadata_bomb(1, cid=3))
    await _until("the fetch and the first Metadata to start", lambda: apis.started == [1, 2])
    apis.release(2)  # answered, but not written: the fetch's answer goes first
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [1, 2]
    apis.release(1, 3)
    assert [await client.read_cid() for _ in range(3)] == [1, 2, 3]
    assert apis.started == [1, 2, 3]
    await client.close()
    await _left_nothing(listener)


def test_the_broker_runs_its_large_answer_apis_one_at_a_time() -> None:
    assert {FETCH, METADATA, OFFSET_FETCH} <= _broker_apis().one_at_a_time_api_keys


async def test_a_large_answer_holds_the_answer_budget_until_it_is_in_the_socket(served) -> None:
    """A Fetch's handler gets its connection's share of queued_max_response_bytes (other APIs none);
    the listener holds the answer's frame against it from encoding until the socket has it."""
    apis = GatedApis()
    apis.fetch_answer_bytes = 40 << 20  # more than loopback's socket buffers take: the write waits
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(_fetch_frame(1), _frame(2))
    await _until("the answer to be held", lambda: listener.answer_budget.held_bytes > 40 << 20)
    await _until("both handlers to start", lambda: len(apis.started) == 2)
    assert apis.allowances[1] is not None and apis.allowances[2] is None
    await asyncio.sleep(SETTLE_S)
    assert listener.answer_budget.held_bytes > 40 << 20  # unread, still held
    assert await client.read_cid() == 1
    assert await client.read_cid() == 2
    await _until("the answer's bytes to be given back", lambda: listener.answer_budget.held_bytes == 0)
    assert listener.answer_budget.peak_bytes > 40 << 20
    await client.close()
    await _left_nothing(listener)


async def test_a_client_that_reads_no_answer_is_closed_after_the_idle_time(served) -> None:
    """Kafka's idle clock counts writes too. A client that sends but never reads fills its in-flight
    slots, so the connection never looks idle to the reader; it is closed once an answer has waited
    connections_max_idle_ms to be written, and the answer's bytes go back to the budget. Before, the
    broker held the connection and its 40 MiB answer for as long as the client stayed."""
    apis = GatedApis()
    apis.fetch_answer_bytes = 40 << 20
    listener = await served(apis, connections_max_idle_ms=500, max_in_flight_requests=4)
    client = await Client.connect(listener.port)
    await client.send(_fetch_frame(1), *(_frame(cid) for cid in range(2, 12)))
    await _until("the answer to be held", lambda: listener.answer_budget.held_bytes > 40 << 20)
    await _until("the connection to be closed", lambda: listener.connection_count == 0)
    assert listener.connections_unread_closed == 1
    assert listener.answer_budget.held_bytes == 0
    await client.close()
    await _left_nothing(listener)


async def test_stopping_the_listener_does_not_wait_for_a_client_that_reads_nothing() -> None:
    apis = GatedApis()
    apis.fetch_answer_bytes = 40 << 20
    listener = await _start(apis)  # connections_max_idle_ms: 10 minutes
    client = await Client.connect(listener.port)
    await client.send(_fetch_frame(1))
    await _until("the answer to be held", lambda: listener.answer_budget.held_bytes > 40 << 20)
    async with asyncio.timeout(WAIT_S):
        await listener.stop()
    await client.close()
    await _left_nothing(listener)


def metadata_bomb(topics: int, cid: int = 1) -> bytes:
    """A Metadata v12 request frame naming `topics` topics "a": 19 bytes each, about 10-25 µs each to
    decode (kafka-python's generated decoder), so 100,000 of them is a 1.9 MB frame and seconds of CPU.
    (benchmarks/kafka_decode_bomb_bench.py sends it too.)"""
    entry = bytes(16) + b"\x02a\x00"  # topic_id (null uuid), compact name "a", no tagged fields
    header = struct.pack(">hhi", 3, 12, cid) + b"\x00\x01x\x00"  # Metadata v12, client id "x", no tags
    body = header + encode_unsigned_varint(topics + 1) + entry * topics + b"\x00\x00\x00"
    return struct.pack(">i", len(body)) + body


async def test_a_frame_that_takes_seconds_to_decode_does_not_stop_the_listener(served) -> None:
    """Decoding a large frame runs off the event loop: a request sent while it decodes is answered first.
    Decoded on the loop, the 100,000-topic Metadata request stopped every connection (and, in a node,
    Raft and replication) for as long as it took."""
    apis = GatedApis()
    apis.special[1] = None  # the bomb gets no answer; only when its handler starts matters
    listener = await served(apis)
    attacker, other = await Client.connect(listener.port), await Client.connect(listener.port)
    await attacker.send(metadata_bomb(100_000))
    # The frame is in and its decode has begun (half a second or more of CPU). Decoded on the loop,
    # nothing could look at this until the decode was over, and the bomb would start first.
    await _until("the large frame's decode to begin", lambda: listener.frames_decoded_off_loop == 1)
    assert not apis.started
    await other.send(_frame(2))
    assert await other.read_cid() == 2
    assert apis.started[0] == 2  # answered while the large frame was still decoding
    await _until("the large frame to be decoded and handled", lambda: 1 in apis.started, timeout_s=120)
    await attacker.close()
    await other.close()
    await _left_nothing(listener)


async def test_a_produce_of_few_partitions_is_decoded_inline_and_one_of_many_is_not(served) -> None:
    """A Produce's decode costs per partition, not per byte: large batches stay on the loop (a thread
    hop per request cost a fifth of the produce rate); thousands of partitions go to the thread."""
    apis = GatedApis()
    apis.special.update({1: None, 2: None})  # no answers: what matters is where each was decoded
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(_produce_frame(1, partitions=1, records=b"x" * (256 << 10)))
    await _until("the large batch to be handled", lambda: apis.started == [1])
    assert listener.frames_decoded_off_loop == 0
    await client.send(_produce_frame(2, partitions=5_000, records=b""))
    await _until("the many partitions to be handled", lambda: apis.started == [1, 2])
    assert listener.frames_decoded_off_loop == 1
    await client.close()
    await _left_nothing(listener)


# --- queued_max_request_bytes ----------------------------------------------------------------------------


# Frames over SMALL_FRAME_BYTES hold the budget; smaller ones never wait for it.
BIG_PAD = SMALL_FRAME_BYTES + 2_000
MID_PAD = SMALL_FRAME_BYTES + 500


def _payload_bytes(frame: bytes) -> int:
    return len(frame) - 4


async def test_a_frame_waits_for_the_byte_budget_and_goes_in_when_bytes_are_freed(served) -> None:
    frame_bytes = _payload_bytes(_frame(0, pad=BIG_PAD))
    apis = GatedApis(gated=True)
    listener = await served(apis, socket_request_max_bytes=frame_bytes, queued_max_request_bytes=2 * frame_bytes + 100)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid, pad=BIG_PAD) for cid in range(3)))
    await _until("2 handlers to start", lambda: len(apis.started) == 2)
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [0, 1]
    assert listener._budget.held_bytes == 2 * frame_bytes
    apis.release(0)
    assert await client.read_cid() == 0
    await _until("the third frame to get its bytes", lambda: len(apis.started) == 3)
    apis.release(1, 2)
    assert [await client.read_cid() for _ in range(2)] == [1, 2]
    await client.close()
    await _left_nothing(listener)


async def test_the_byte_budget_is_first_come_first_served_across_connections(served) -> None:
    big, mid = _frame(1, pad=BIG_PAD), _frame(3, pad=MID_PAD)
    big_bytes = _payload_bytes(big)
    apis = GatedApis(gated=True)
    listener = await served(
        apis, socket_request_max_bytes=big_bytes, queued_max_request_bytes=big_bytes + _payload_bytes(mid)
    )
    holder, waiting_big, late_mid = [await Client.connect(listener.port) for _ in range(3)]
    await holder.send(big)
    await _until("the first big frame to be held", lambda: apis.started == [1])
    await waiting_big.send(_frame(2, pad=BIG_PAD))
    await _until("the second big frame to wait", lambda: listener._budget._waiters)
    await late_mid.send(mid)  # it would fit, but the big one came first
    await asyncio.sleep(SETTLE_S)
    assert apis.started == [1]
    apis.release(1, 2, 3)
    assert await holder.read_cid() == 1
    assert await waiting_big.read_cid() == 2
    assert await late_mid.read_cid() == 3
    assert apis.started == [1, 2, 3]
    for client in (holder, waiting_big, late_mid):
        await client.close()
    await _left_nothing(listener)


async def test_a_client_leaving_while_its_frame_waits_for_bytes_frees_its_place(served) -> None:
    big, mid = _frame(1, pad=BIG_PAD), _frame(3, pad=MID_PAD)
    frame_bytes = _payload_bytes(big)
    apis = GatedApis(gated=True)
    listener = await served(
        apis, socket_request_max_bytes=frame_bytes, queued_max_request_bytes=frame_bytes + _payload_bytes(mid)
    )
    holder, leaver, other = [await Client.connect(listener.port) for _ in range(3)]
    await holder.send(big)
    await _until("the first frame to be held", lambda: apis.started == [1])
    await leaver.send(_frame(2, pad=BIG_PAD)[:100])  # it leaves before sending the whole frame
    await _until("the leaver's frame to wait", lambda: listener._budget._waiters)
    await other.send(mid)  # behind the leaver
    await leaver.close()
    apis.release(1, 3)
    assert await holder.read_cid() == 1
    # The leaver's turn comes, its read fails at once, and its bytes go to the frame behind it.
    assert await other.read_cid() == 3
    assert apis.started == [1, 3]
    await holder.close()
    await other.close()
    await _left_nothing(listener)


async def test_small_requests_are_served_while_slow_senders_hold_the_whole_budget(served) -> None:
    """An attacker on the machine sends the size of a large frame and then trickles its bytes: its
    connections reserve the whole budget for up to connections_max_idle_ms. Small requests (Metadata,
    heartbeats, fetches, commits) go on being answered; only large frames wait, and get in once the
    budget is freed."""
    big = _frame(1, pad=BIG_PAD)
    frame_bytes = _payload_bytes(big)
    apis = GatedApis()
    listener = await served(apis, socket_request_max_bytes=frame_bytes, queued_max_request_bytes=2 * frame_bytes)
    tricklers = [await Client.connect(listener.port) for _ in range(2)]
    for cid, trickler in enumerate(tricklers, start=10):
        await trickler.send(_frame(cid, pad=BIG_PAD)[:50])
    await _until("the tricklers to hold the whole budget", lambda: listener._budget.held_bytes == 2 * frame_bytes)
    large, small = await Client.connect(listener.port), await Client.connect(listener.port)
    await large.send(big)
    await _until("the large frame to wait", lambda: listener._budget._waiters)
    await small.send(*(_frame(cid, pad=1_000) for cid in range(20, 25)))
    assert [await small.read_cid() for _ in range(5)] == list(range(20, 25))
    assert 1 not in apis.started
    await tricklers[0].close()
    assert await large.read_cid() == 1
    for client in (tricklers[1], large, small):
        await client.close()
    await _left_nothing(listener)


async def test_a_budget_waiter_cancelled_in_the_tick_its_bytes_are_granted_leaks_nothing() -> None:
    budget = ByteBudget(100)
    await budget.acquire(100)
    waiter = asyncio.create_task(budget.acquire(50))
    await asyncio.sleep(0)
    assert budget._waiters
    waiter.cancel()  # its future is cancelled now; its except clause runs only on the next tick
    budget.release(100)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.held_bytes == 0
    assert not budget._waiters
    await budget.acquire(100)  # the whole budget is still there
    assert budget.held_bytes == 100


async def test_a_cancelled_head_waiter_lets_the_next_waiter_in() -> None:
    budget = ByteBudget(100)
    await budget.acquire(80)
    head = asyncio.create_task(budget.acquire(50))
    behind = asyncio.create_task(budget.acquire(10))
    await asyncio.sleep(0)
    assert len(budget._waiters) == 2
    head.cancel()
    async with asyncio.timeout(WAIT_S):
        await behind  # 80 + 10 fits once the head has gone
    assert budget.held_bytes == 90
    with pytest.raises(asyncio.CancelledError):
        await head


# --- frame sizes, idle, connection count -----------------------------------------------------------------


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 1025, 2**31 - 1])
async def test_a_bad_size_prefix_closes_that_connection_only(served, size: int) -> None:
    apis = GatedApis()
    listener = await served(apis, socket_request_max_bytes=1024, queued_max_request_bytes=1024)
    good, bad = await Client.connect(listener.port), await Client.connect(listener.port)
    await bad.send(struct.pack(">i", size) + b"\x00" * 16)
    assert await bad.closed_by_server()
    assert listener.frames_refused == 1
    await good.send(_frame(5))
    assert await good.read_cid() == 5
    assert listener._budget.held_bytes == 0
    await good.close()
    await bad.close()
    await _left_nothing(listener)


async def test_an_idle_connection_is_closed_after_connections_max_idle_ms(served) -> None:
    listener = await served(GatedApis(), connections_max_idle_ms=300)
    client = await Client.connect(listener.port)
    await client.send(_frame(1))
    assert await client.read_cid() == 1
    assert await client.closed_by_server()
    await _left_nothing(listener)


async def test_a_size_prefix_then_silence_is_closed_after_the_idle_time(served) -> None:
    listener = await served(GatedApis(), connections_max_idle_ms=300)
    client = await Client.connect(listener.port)
    size = SMALL_FRAME_BYTES + 500  # a frame that holds the budget: the close frees it
    await client.send(struct.pack(">i", size) + b"\x00" * 10)
    await _until("the frame's bytes to be held", lambda: listener._budget.held_bytes == size)
    assert await client.closed_by_server()
    await _left_nothing(listener)


async def test_a_connection_waiting_for_an_answer_is_not_idle(served) -> None:
    apis = GatedApis(gated=True)
    listener = await served(apis, connections_max_idle_ms=300)
    client = await Client.connect(listener.port)
    await client.send(_frame(1))
    await _until("the handler to start", lambda: apis.started == [1])
    await asyncio.sleep(1.0)  # three idle periods with the request in flight (a long poll, a join)
    apis.release(1)
    assert await client.read_cid() == 1
    assert await client.closed_by_server()  # and idle again afterwards
    await _left_nothing(listener)


async def test_connections_beyond_max_connections_are_refused(served) -> None:
    listener = await served(GatedApis(), max_connections=2)
    first, second = await Client.connect(listener.port), await Client.connect(listener.port)
    await _until("two connections", lambda: listener.connection_count == 2)
    third = await Client.connect(listener.port)
    assert await third.closed_by_server()
    assert listener.connections_refused == 1
    for cid, client in ((1, first), (2, second)):
        await client.send(_frame(cid))
        assert await client.read_cid() == cid
    await first.close()
    await _until("a free slot", lambda: listener.connection_count == 1)
    fourth = await Client.connect(listener.port)
    await fourth.send(_frame(4))
    assert await fourth.read_cid() == 4
    for client in (second, third, fourth):
        await client.close()
    await _left_nothing(listener)


def _accepted_socket_buffers(port: int, client: Client) -> tuple[int, int]:
    """(SO_SNDBUF, SO_RCVBUF) of the server's end of `client`'s connection, found among this process's
    descriptors (the listener runs in it): the socket on `port` whose peer is the client's end."""
    client_end = client.writer.get_extra_info("sockname")[:2]
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue  # not a socket
        with sock:
            try:
                if sock.getsockname()[1:2] != (port,) or sock.getpeername()[:2] != client_end:
                    continue
            except (OSError, IndexError):
                continue
            return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_RCVBUF
            )
    raise AssertionError(f"no accepted socket on port {port} for {client_end}")


async def test_each_connection_gets_the_configured_socket_buffers(served) -> None:
    """Kafka's socket.send.buffer.bytes and socket.receive.buffer.bytes, on every accepted connection
    (Linux reports twice the size asked: the kernel's bookkeeping is counted in)."""
    listener = await served(GatedApis(), socket_send_buffer_bytes=16_384, socket_receive_buffer_bytes=24_576)
    clients = [await Client.connect(listener.port) for _ in range(2)]
    await _until("two connections", lambda: listener.connection_count == 2)
    for client in clients:
        assert _accepted_socket_buffers(listener.port, client) == (2 * 16_384, 2 * 24_576)
        await client.close()
    defaults = await served(GatedApis(), socket_send_buffer_bytes=-1, socket_receive_buffer_bytes=-1)
    client = await Client.connect(defaults.port)
    await _until("a connection", lambda: defaults.connection_count == 1)
    assert _accepted_socket_buffers(defaults.port, client) != (2 * 16_384, 2 * 24_576)  # the kernel's own
    await client.close()


@pytest.mark.parametrize("size", [0, 1023, -2])
def test_a_socket_buffer_below_1024_bytes_is_refused(size: int) -> None:
    for name in ("socket_send_buffer_bytes", "socket_receive_buffer_bytes"):
        with pytest.raises(ValueError, match=f"{name} must be -1"):
            KafkaListenerLimits(**{name: size})


# --- clients leaving, answers that are not answers ---------------------------------------------------------


async def test_a_client_leaving_mid_frame_leaves_nothing_behind(served) -> None:
    listener = await served(GatedApis())
    client = await Client.connect(listener.port)
    await client.send(_frame(1, pad=BIG_PAD)[:9])  # the size prefix and part of the header
    await _until("the frame's bytes to be held", lambda: listener._budget.held_bytes > 0)
    await client.close()
    await _left_nothing(listener)


async def test_a_client_leaving_with_requests_in_flight_leaves_nothing_behind(served) -> None:
    apis = GatedApis(gated=True)
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(5)))
    await _until("5 handlers to start", lambda: len(apis.started) == 5)
    await client.close()
    apis.release(*range(5))  # their answers have nobody to go to
    await _left_nothing(listener)


async def test_handlers_still_running_when_the_listener_stops_are_cancelled() -> None:
    apis = GatedApis(gated=True)
    listener = await _start(apis)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(5)))
    await _until("5 handlers to start", lambda: len(apis.started) == 5)
    await listener.stop()
    assert await client.closed_by_server()
    await client.close()
    await _left_nothing(listener)


async def test_a_none_answer_writes_nothing(served) -> None:
    apis = GatedApis()
    apis.special[1] = None  # Produce with acks=0
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(_frame(1), _frame(2))
    assert await client.read_cid() == 2
    assert await client.nothing_arrives()
    await client.close()
    await _left_nothing(listener)


async def test_close_connection_closes_after_the_earlier_answers_are_written(served) -> None:
    apis = GatedApis(gated=True)
    apis.special[3] = CLOSE_CONNECTION
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(1, 5)))
    await _until("the handlers to start", lambda: len(apis.started) >= 3)
    apis.release(3, 2, 1, 4)
    assert [await client.read_cid(), await client.read_cid()] == [1, 2]
    assert await client.closed_by_server()
    await _left_nothing(listener)


async def test_a_handler_that_raises_closes_its_connection_with_a_log_line(served, caplog) -> None:
    apis = GatedApis()
    apis.special[2] = RuntimeError("a bug in a handler")
    listener = await served(apis)
    client, other = await Client.connect(listener.port), await Client.connect(listener.port)
    await client.send(_frame(1), _frame(2), _frame(3))
    assert await client.read_cid() == 1
    assert await client.closed_by_server()
    assert any("a bug in a handler" in str(r.exc_info) for r in caplog.records if r.levelname == "ERROR")
    await other.send(_frame(9))
    assert await other.read_cid() == 9
    await client.close()
    await other.close()
    await _left_nothing(listener)


async def test_an_undecodable_frame_closes_the_connection_after_the_earlier_answers(served) -> None:
    apis = GatedApis(gated=True)
    listener = await served(apis)
    client = await Client.connect(listener.port)
    unknown_api = struct.pack(">ihhih", 10, 9999, 0, 3, -1)
    await client.send(_frame(1), unknown_api)
    await _until("the first handler to start", lambda: apis.started == [1])
    apis.release(1)
    assert await client.read_cid() == 1
    assert await client.closed_by_server()
    assert [e.code for e in apis.undecodable] == [ErrorCode.UNSUPPORTED_VERSION]
    await _left_nothing(listener)


# --- ApiVersions through the real dispatcher ----------------------------------------------------------------


def _broker_apis() -> BrokerApis:
    node = SimpleNamespace(config=SimpleNamespace(node_id=1), cluster_id="test-cluster")
    return BrokerApis(SimpleNamespace(node=node), handlers={})


@pytest.mark.parametrize("version", range(SUPPORTED_APIS[API_VERSIONS].min_version, 5))
async def test_api_versions_v0_to_v4_are_answered(served, version: int) -> None:
    listener = await served(_broker_apis())
    client = await Client.connect(listener.port)
    await client.send(_frame(7, version=version))
    cid, response = decode_response(RequestHeader(API_VERSIONS, version, 7), await client.read_frame())
    assert cid == 7
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == {API_VERSIONS: (0, 4)}
    await client.close()


async def test_a_too_new_api_versions_gets_a_v0_body_listing_the_apis_and_the_connection_stays(served) -> None:
    listener = await served(_broker_apis())
    client = await Client.connect(listener.port)
    too_new = struct.pack(">hhih", API_VERSIONS, 99, 11, -1) + b"\x00" * 5  # a body we cannot know
    await client.send(struct.pack(">i", len(too_new)) + too_new)
    cid, response = decode_response(RequestHeader(API_VERSIONS, 0, 11), await client.read_frame())
    assert cid == 11
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.max_version) for k in response.api_keys] == [(API_VERSIONS, 4)]
    # KIP-511: the client retries with a version from the list on the same connection.
    await client.send(_frame(12, version=3))
    cid, response = decode_response(RequestHeader(API_VERSIONS, 3, 12), await client.read_frame())
    assert (cid, response.error_code) == (12, 0)
    await client.close()
    await _left_nothing(listener)


async def test_answers_ready_together_go_out_in_one_write(served, monkeypatch) -> None:
    writes: list[int] = []
    real_write = asyncio.StreamWriter.write

    def counting_write(self: asyncio.StreamWriter, data: bytes) -> None:
        writes.append(len(data))
        real_write(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "write", counting_write)
    apis = GatedApis(gated=True)
    listener = await served(apis)
    client = await Client.connect(listener.port)
    await client.send(*(_frame(cid) for cid in range(10)))
    await _until("10 handlers to start", lambda: len(apis.started) == 10)
    writes.clear()  # the client's own writes
    apis.release(*range(10))  # all finish in the same tick
    assert [await client.read_cid() for _ in range(10)] == list(range(10))
    assert len(writes) == 1, writes  # one send for the ten answers, not ten
    await client.close()
    await _left_nothing(listener)


def test_the_rpc_port_and_the_kafka_listeners_share_the_descriptors_left() -> None:
    # A node with 1024 descriptors keeps 256 for its files; the RPC port and one Kafka listener
    # may then hold 384 connections each, so both full never exhaust the process.
    assert cap_connections(1000, 2, 1024) == 384
    assert cap_connections(1000, 1, 1024) == 768
    assert cap_connections(100, 2, 1024) == 100
    assert cap_connections(1000, 3, 200) == 1


NODE = {"node_id": 1, "controller_quorum_voters": "1@127.0.0.1:9000", "port": 9000, "data_dir": "/tmp/x"}


def test_a_node_with_a_kafka_listener_counts_both_listeners() -> None:
    with_kafka = build_config({**NODE, "listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert with_kafka.listener_limits().listeners_sharing_fds == 2
    assert with_kafka.kafka_listener_limits().listeners_sharing_fds == 2
    assert build_config(NODE).listener_limits().listeners_sharing_fds == 1


def test_a_node_passes_its_kafka_listener_settings_to_its_listeners() -> None:
    changed = {
        "socket_request_max_bytes": 2048,
        "queued_max_request_bytes": 4096,
        "queued_max_response_bytes": 8192,
        "socket_send_buffer_bytes": 65_536,
        "socket_receive_buffer_bytes": -1,
        "max_connections": 7,
        "connections_max_idle_ms": 5_000,
    }
    limits = build_config({**NODE, "listeners": "PLAINTEXT://127.0.0.1:9092", **changed}).kafka_listener_limits()
    assert {name: getattr(limits, name) for name in changed} == changed


async def test_the_kafka_listener_caps_its_connections_by_the_descriptors(monkeypatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 4096))
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, GatedApis(), KafkaListenerLimits(listeners_sharing_fds=2))
    assert listener.max_connections == 384
