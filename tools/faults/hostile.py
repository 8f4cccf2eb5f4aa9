"""A hostile local process for fault runs: malformed, forged and oversized requests to every node, all run long.

It knows what any process on the machine can learn (addresses, cluster id), no credential, and
sends at a bounded rate garbage and wrong-shaped bodies, forged Raft and controller calls, poison
and garbage batches on the Kafka listeners, bad fetches, huge bodies, bad stream frames and
half-sent requests (the list: docs/jepsen.md). None of it may cost an acknowledged write, stop
the quorum or kill a node; `HostileStats` counts what came back per attack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import cbor2

from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.protocol.access import REPLICA_FETCH_PATH, WRITE_TXN_MARKERS_PATH
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.header import HEADER_SIZE, write_crc
from kraftpy.raft.messages import BeginQuorumEpochRequest, VoteRequest, to_dict
from kraftpy.tools.faults.history import RunEnd
from kraftpy.tools.faults.raw_stream import RawStream

INT32_MAX = 2**31 - 1
REQUEST_TIMEOUT_S = 5.0
MAX_SLOW_CONNECTIONS = 16
BIG_BODY_BYTES = 4 * 1024 * 1024

ROUTES = (
    "/raft/vote",
    "/raft/begin_quorum_epoch",
    "/raft/end_quorum_epoch",
    "/raft/fetch",
    "/raft/fetch_snapshot",
    "/controller/broker_registration",
    "/controller/broker_heartbeat",
    "/controller/alter_partition",
    "/controller/create_topics",
    "/controller/allocate_producer_ids",
    REPLICA_FETCH_PATH,
    WRITE_TXN_MARKERS_PATH,
    "/kafka/produce",  # a client route no longer served on the RPC: refused as unknown
)

Address = tuple[str, int]


@dataclass
class HostileStats:
    sent: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)  # "attack -> status/code"
    poison_accepted: int = 0  # poison batches a leader stored: every consumer of the partition would fail at them

    def summary(self) -> dict[str, Any]:
        return {"sent": dict(self.sent), "answers": dict(self.answers), "poison_accepted": self.poison_accepted}


def _forged_raft(cluster_id: str, rng: random.Random, dst: int) -> tuple[str, dict[str, Any]]:
    epoch = rng.choice((INT32_MAX, INT32_MAX - 1, INT32_MAX + 1, 2**63 - 1, 2**64))
    src = rng.choice([n for n in (1, 2, 3) if n != dst])  # posing as another voter
    if rng.random() < 0.5:
        msg = BeginQuorumEpochRequest(cluster_id, src, dst, rng.randrange(1 << 20), epoch, src)
        return "/raft/begin_quorum_epoch", to_dict(msg)
    msg = VoteRequest(cluster_id, src, dst, rng.randrange(1 << 20), epoch, epoch, 2**62, rng.random() < 0.5)
    return "/raft/vote", to_dict(msg)


def _forged_controller(cluster_id: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    if rng.random() < 0.5:
        return "/controller/broker_heartbeat", {
            "broker_id": rng.choice((1, 2, 3)),
            "broker_epoch": rng.randrange(0, 1000),
            "current_metadata_offset": 0,
            "want_fence": False,
            "want_shut_down": True,
        }
    return "/controller/broker_registration", {
        "broker_id": rng.choice((99, 2**31, 2**20001)),
        "cluster_id": cluster_id,
        "incarnation_id": f"evil-{rng.randrange(1 << 30)}",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.9", "port": 1}],
        "rack": None,
    }


def _wrong_types(rng: random.Random) -> dict[str, Any]:
    junk = (2**200, -(2**70), "x" * 1000, [1, [2, [3]]], {"a": {"b": None}}, 1.5e308, True, None, b"\xff" * 64)
    names = ("epoch", "broker_id", "offset", "fetch_offset", "partition", "topic", "max_bytes", "timeout_ms", "acks")
    return {name: rng.choice(junk) for name in rng.sample(names, rng.randrange(1, len(names)))}


def _produce_body(topic: str, partition: int, records: bytes, *, acks: int = 1, timeout_ms: int = 1000) -> dict:
    return {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": [{"name": topic, "partitions": [{"partition": partition, "records": records}]}],
    }


def poison_batch(rng: random.Random) -> bytes:
    """A batch whose header and CRC are right and whose compressed records are garbage: Kafka's poison pill."""
    codec = rng.choice((CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD))
    batch = bytearray(build_batch([(None, b"poison-%d" % i) for i in range(3)], compression=codec))
    batch[HEADER_SIZE:] = os.urandom(len(batch) - HEADER_SIZE)
    write_crc(batch)
    return bytes(batch)


def _bad_produce(rng: random.Random, topic: str) -> dict[str, Any]:
    # Kafka's framing carries only what fits its fields: the garbage is in the records and the partition.
    return _produce_body(topic, rng.randrange(-2, 5), os.urandom(80), acks=rng.choice((-1, 1)), timeout_ms=1000)


def _bad_fetch(rng: random.Random, topic: str) -> dict[str, Any]:
    return {
        "replica_id": rng.choice((-1, 1, 2**40)),
        "max_wait_ms": rng.choice((0, 10, 2**40)),
        "min_bytes": 1,
        "max_bytes": rng.choice((1, 2**63, -5)),
        "topics": [{"name": topic, "partitions": [{"partition": 0, "fetch_offset": rng.choice((-5, 2**62, 0))}]}],
    }


class HostileClient:
    def __init__(
        self, nodes: dict[int, Address], kafka: dict[int, Address], cluster_id: str, topic: str, rng: random.Random
    ) -> None:
        self.nodes = nodes  # the internal RPC
        self.kafka = kafka  # the Kafka listeners
        self._transport: KafkaTransport | None = None
        self.cluster_id = cluster_id
        self.topic = topic
        self.rng = rng
        self.stats = HostileStats()
        self._slow: list[asyncio.StreamWriter] = []

    def _attacks(self) -> list[tuple[str, Callable[[aiohttp.ClientSession, int], Any]]]:
        return [
            ("garbage", self._garbage),
            ("wrong-types", self._wrong_types),
            ("forged-raft", self._forged_raft),
            ("forged-controller", self._forged_controller),
            ("bad-produce", self._bad_produce),
            ("poison-batch", self._poison_batch),
            ("bad-fetch", self._bad_fetch),
            ("big-body", self._big_body),
            ("stream-garbage", self._stream),
            ("slow-connection", self._slow_connection),
        ]

    def _url(self, node: int, path: str) -> str:
        host, port = self.nodes[node]
        return f"http://{host}:{port}{path}"

    async def _post(self, session: aiohttp.ClientSession, attack: str, node: int, path: str, body: bytes) -> Any:
        async with session.post(
            self._url(node, path), data=body, headers={"Content-Type": "application/cbor"}
        ) as answer:
            data = await answer.read()
        decoded = code = None
        with contextlib.suppress(Exception):
            decoded = cbor2.loads(data)
            code = decoded.get("error_code")
        self.stats.answers[f"{attack} -> {answer.status}/{code}"] += 1
        return decoded

    async def _garbage(self, session: aiohttp.ClientSession, node: int) -> None:
        body = os.urandom(self.rng.randrange(0, 512)) if self.rng.random() < 0.5 else cbor2.dumps([1, 2, 3])
        await self._post(session, "garbage", node, self.rng.choice(ROUTES), body)

    async def _wrong_types(self, session: aiohttp.ClientSession, node: int) -> None:
        await self._post(session, "wrong-types", node, self.rng.choice(ROUTES), cbor2.dumps(_wrong_types(self.rng)))

    async def _forged_raft(self, session: aiohttp.ClientSession, node: int) -> None:
        path, body = _forged_raft(self.cluster_id, self.rng, node)
        await self._post(session, "forged-raft", node, path, cbor2.dumps(body))

    async def _forged_controller(self, session: aiohttp.ClientSession, node: int) -> None:
        path, body = _forged_controller(self.cluster_id, self.rng)
        await self._post(session, "forged-controller", node, path, cbor2.dumps(body))

    async def _produce(self, attack: str, node: int, body: dict[str, Any]) -> Any:
        """A Produce on the node's Kafka listener (clients' only way in); the answer, or None."""
        if self._transport is None:
            self._transport = KafkaTransport(request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000), client_id="hostile")
        try:
            answer = await self._transport.call(self.kafka[node], "/kafka/produce", body, raise_errors=False)
        except KafkaError as exc:
            self.stats.answers[f"{attack} -> kafka/{exc.code.name}"] += 1
            return None
        with contextlib.suppress(Exception):
            code = answer["topics"][0]["partitions"][0]["error_code"]
            self.stats.answers[f"{attack} -> kafka/{code}"] += 1
        return answer

    async def _bad_produce(self, session: aiohttp.ClientSession, node: int) -> None:
        await self._produce("bad-produce", node, _bad_produce(self.rng, self.topic))

    async def _poison_batch(self, session: aiohttp.ClientSession, node: int) -> None:
        """Sent to every partition's leader in turn (whoever answers); an accepted one is counted apart."""
        body = _produce_body(self.topic, self.rng.randrange(3), poison_batch(self.rng))
        answer = await self._produce("poison-batch", node, body)
        with contextlib.suppress(Exception):
            code = answer["topics"][0]["partitions"][0]["error_code"]
            self.stats.answers[f"poison-batch partition answer {code}"] += 1
            if code == 0:
                self.stats.poison_accepted += 1

    async def _bad_fetch(self, session: aiohttp.ClientSession, node: int) -> None:
        body = cbor2.dumps(_bad_fetch(self.rng, self.topic))  # a forged follower's
        await self._post(session, "bad-fetch", node, REPLICA_FETCH_PATH, body)

    async def _big_body(self, session: aiohttp.ClientSession, node: int) -> None:
        body = cbor2.dumps({"topics": [{"name": "x" * 100, "blob": os.urandom(BIG_BODY_BYTES)}]})
        await self._post(session, "big-body", node, self.rng.choice(ROUTES), body)

    async def _stream(self, session: aiohttp.ClientSession, node: int) -> None:
        host, port = self.nodes[node]
        stream = await RawStream.open(host, port, timeout_s=REQUEST_TIMEOUT_S)
        try:
            path, body = _forged_raft(self.cluster_id, self.rng, node)
            stream.send_bytes(os.urandom(64))  # garbage where a frame's size should be
            stream.send_payload(cbor2.dumps({"id": 1, "path": path, "body": body}))
            stream.send_payload(cbor2.dumps("not a map"))
            with contextlib.suppress(TimeoutError):
                answer = await stream.receive(1.0)
                self.stats.answers[f"stream-garbage -> {'closed' if answer is None else 'answer'}"] += 1
        finally:
            await stream.close()

    async def _slow_connection(self, session: aiohttp.ClientSession, node: int) -> None:
        if len(self._slow) >= MAX_SLOW_CONNECTIONS:
            self._slow.pop(0).close()
        host, port = self.nodes[node]
        _reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /raft/vote HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n\xa0")
        await writer.drain()
        self._slow.append(writer)  # left half-sent; the node must time it out or bound it

    async def run(self, end: RunEnd, *, rate_per_s: float = 20.0, max_requests: int = 10_000) -> HostileStats:
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        attacks = self._attacks()
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                while not end.passed() and sum(self.stats.sent.values()) < max_requests:
                    name, attack = self.rng.choice(attacks)
                    node = self.rng.choice(sorted(self.nodes))
                    self.stats.sent[name] += 1
                    try:
                        await attack(session, node)
                    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                        # a paused, killed or isolated node, or one that closed on us: all fine
                        self.stats.answers[f"{name} -> {type(exc).__name__}"] += 1
                    await asyncio.sleep(self.rng.expovariate(rate_per_s))
            finally:
                for writer in self._slow:
                    writer.close()
                if self._transport is not None:
                    await self._transport.close()
                    self._transport = None
        return self.stats
