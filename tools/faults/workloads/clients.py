"""The workloads' clients: one process's producer and consumer, through kraftpy's client or librdkafka.

Both adapters offer the same async calls (send, poll, the transaction calls, positions, end offsets,
close), each bounded in time. confluent-kafka's calls block, and some hold the GIL, so they run in a
child process (confluent_worker.py) with librdkafka's own timeout below our bound. Errors are left to
the caller, which asks `definite()` whether an error proves the operation did not happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import cbor2

from kraftpy.client.rebalance_listener import ConsumerRebalanceListener
from kraftpy.protocol.stream_frames import FrameSplitter, frame
from kraftpy.tools.faults.workload import indeterminate

CALL_TIMEOUT_S = 10.0  # one client call; librdkafka and kraftpy get a little less, so ours is the outer bound
INNER_TIMEOUT_S = 8.0
POLL_TIMEOUT_S = 0.3
TXN_TIMEOUT_MS = 10_000  # an abandoned transaction holds back read_committed readers at most this long
SESSION_TIMEOUT_MS = 6_000
LOG_LEVEL = 2  # librdkafka's syslog level: only critical lines; every fault makes it log connection errors
MAX_CALL_FRAME_BYTES = 16 * 1024 * 1024  # one call or answer between ConfluentClient and its child
CHILD_EXIT_TIMEOUT_S = 5.0  # after its close is answered (or not), librdkafka's child has this long to exit


class RebalanceCount:
    """How many times a rebalance moved this consumer's partitions (revoked, lost or newly assigned).

    A consumer resumes a partition it gets back from the group's committed offset, so a transaction
    whose polls span a rebalance may read records twice: the runner aborts it, as a
    consume-transform-produce application does when its partitions move (Kafka's EOS pattern)."""

    def __init__(self) -> None:
        self.count = 0

    def moved(self, partitions: Any) -> None:
        if partitions:  # cooperative rebalances also report an empty change: nothing moved
            self.count += 1


@dataclass(frozen=True)
class ClientSpec:
    bootstrap: str
    topic: str
    keys: int
    sub_via: str  # assign | subscribe
    transactional: bool
    group_id: str


class KraftpyClient:
    """kraftpy.client's Producer and Consumer (asyncio)."""

    def __init__(self, spec: ClientSpec, worker: int, process: int) -> None:
        from kraftpy.client import Consumer, Producer

        self.spec = spec
        producer: dict[str, Any] = {
            "acks": "all", "enable_idempotence": True, "linger_ms": 1, "request_timeout_ms": 2_000,
            "delivery_timeout_ms": int(INNER_TIMEOUT_S * 1000), "max_block_ms": int(INNER_TIMEOUT_S * 1000),
            "metadata_max_age_ms": 2_000,
        }  # fmt: skip
        if spec.transactional:  # per worker: a fresh process fences its predecessor and aborts its open txn
            producer.update(transactional_id=f"{spec.group_id}-{worker}", transaction_timeout_ms=TXN_TIMEOUT_MS)
        self.producer = Producer(spec.bootstrap, **producer)
        consumer: dict[str, Any] = {
            "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100, "enable_auto_commit": False,
            "request_timeout_ms": 5_000,
            "isolation_level": "read_committed" if spec.transactional else "read_uncommitted",
        }  # fmt: skip
        if spec.sub_via == "subscribe":
            consumer.update(group_id=spec.group_id, session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=1_000)
        self.consumer = Consumer(spec.bootstrap, **consumer)
        self.rebalances = RebalanceCount()

    def _tp(self, key: int) -> Any:
        from kraftpy.client import TopicPartition

        return TopicPartition(self.spec.topic, key)

    async def open(self) -> list[int]:
        if self.spec.transactional:
            await asyncio.wait_for(self.producer.init_transactions(), CALL_TIMEOUT_S)
        else:
            await asyncio.wait_for(self.producer.start(), CALL_TIMEOUT_S)
        if self.spec.sub_via == "subscribe":
            self.consumer.subscribe([self.spec.topic], listener=_CountingListener(self.rebalances))
        else:
            self.consumer.assign([self._tp(k) for k in range(self.spec.keys)])
        return list(range(self.spec.keys))

    async def send(self, key: int, value: str) -> int:
        future = await asyncio.wait_for(
            self.producer.send(self.spec.topic, value.encode(), partition=key), CALL_TIMEOUT_S
        )
        return (await asyncio.wait_for(future, CALL_TIMEOUT_S)).offset

    async def poll(self) -> list[tuple[int, int, str]]:
        records = await asyncio.wait_for(self.consumer.poll(timeout_ms=POLL_TIMEOUT_S * 1000), CALL_TIMEOUT_S)
        return [(r.partition, r.offset, r.value.decode()) for r in records]

    async def commit_positions(self) -> None:
        await asyncio.wait_for(self.consumer.commit(timeout_ms=int(INNER_TIMEOUT_S * 1000)), CALL_TIMEOUT_S)

    async def begin(self) -> None:
        self.producer.begin_transaction()

    async def send_offsets(self, offsets: dict[int, int]) -> None:
        tps = {self._tp(k): o for k, o in offsets.items()}
        await asyncio.wait_for(
            self.producer.send_offsets_to_transaction(tps, self.consumer.group_metadata()), CALL_TIMEOUT_S
        )

    async def commit(self) -> None:
        await asyncio.wait_for(self.producer.commit_transaction(), CALL_TIMEOUT_S)

    async def abort(self) -> None:
        await asyncio.wait_for(self.producer.abort_transaction(), CALL_TIMEOUT_S)

    async def seek(self, offsets: dict[int, int]) -> None:
        for key, offset in offsets.items():
            self.consumer.seek(self._tp(key), offset)

    async def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    async def position(self, key: int) -> int:
        return await asyncio.wait_for(self.consumer.position(self._tp(key)), CALL_TIMEOUT_S)

    async def end_offsets(self) -> dict[int, int]:
        tps = [self._tp(k) for k in range(self.spec.keys)]
        ends = await asyncio.wait_for(self.consumer.end_offsets(tps), CALL_TIMEOUT_S)
        return {tp.partition: o for tp, o in ends.items()}

    def fatal(self, exc: BaseException) -> bool:
        """A send error no fault explains (a client bug, a definite error): it fails the run (exit 2)."""
        return not indeterminate(exc)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.consumer.close(timeout_ms=2_000), CALL_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.producer.close(timeout_ms=2_000), CALL_TIMEOUT_S)


class _CountingListener(ConsumerRebalanceListener):
    def __init__(self, count: RebalanceCount) -> None:
        self.count = count

    def on_partitions_revoked(self, partitions: Any) -> None:
        self.count.moved(partitions)

    def on_partitions_assigned(self, partitions: Any) -> None:
        self.count.moved(partitions)

    def on_partitions_lost(self, partitions: Any) -> None:
        self.count.moved(partitions)


def consume_ready(consumer: Any, max_records: int, timeout_s: float) -> list[Any]:
    """Up to `max_records` messages: waits at most `timeout_s` for the first, then takes what is already fetched.

    Java's `poll` (and kraftpy's) returns as soon as a record is there. confluent-kafka's `consume(n, t)`
    returns only with n messages or after t: five waiting records came back after the whole timeout
    (2026-11-28), so a workload polling through it did a poll per timeout and a few ops per second."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]


class ConfluentClient:
    """confluent-kafka (librdkafka) in a child process of its own (confluent_worker.py), each call bounded.

    A call that gets no answer within its bound (librdkafka's own timeouts are below it) kills the
    child and raises TimeoutError: the runner goes on as a fresh process, as after any unknown
    outcome. In the run's own process, a librdkafka call holding the GIL stopped every worker and
    the nemesis with it for minutes (docs/jepsen.md, "librdkafka's close")."""

    def __init__(self, spec: ClientSpec, worker: int, process: int, call_timeout_s: float = CALL_TIMEOUT_S + 2) -> None:
        import confluent_kafka as ck

        self.ck = ck
        self.spec = spec
        self.call_timeout_s = call_timeout_s
        self.rebalances = RebalanceCount()
        self._sock, child = socket.socketpair()
        with child:
            self.child = subprocess.Popen(
                [
                    sys.executable, "-m", "kraftpy.tools.faults.workloads.confluent_worker", str(child.fileno()),
                    str(os.getpid()), cbor2.dumps(dataclasses.asdict(spec)).hex(), str(worker), str(process),
                ],
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._splitter = FrameSplitter(MAX_CALL_FRAME_BYTES)
        self._lock = asyncio.Lock()
        self._killed_at: str | None = None  # the call whose bound passed: the child was killed then

    async def _call(self, name: str, *args: Any) -> Any:
        bound_s = self.call_timeout_s
        async with self._lock:
            if self._killed_at is not None:  # the outcome of what it was doing is as unknown as that call's
                raise TimeoutError(f"librdkafka's process {self.child.pid} was killed when {self._killed_at} hung")
            if self.child.returncode is not None:
                raise ChildGone(f"librdkafka's process {self.child.pid} is gone (exit {self.child.returncode})")
            if self._streams is None:
                self._streams = await asyncio.open_unix_connection(sock=self._sock)
            reader, writer = self._streams
            try:
                writer.write(frame(cbor2.dumps({"call": name, "args": list(args)})))
                reply = await asyncio.wait_for(self._answer(reader), bound_s)
            except TimeoutError:
                self._killed_at = name
                await self._kill()
                raise TimeoutError(
                    f"librdkafka's {name} got no answer within {bound_s} s: its process {self.child.pid} was killed"
                ) from None
            except asyncio.CancelledError:
                # Its answer would come to the next call: the child is as good as hung.
                self._killed_at = name
                self.child.kill()
                raise
            except (ConnectionError, asyncio.IncompleteReadError, EOFError) as exc:
                await self._kill()
                raise ChildGone(
                    f"librdkafka's process {self.child.pid} ended during {name} (exit {self.child.returncode}): {exc!r}"
                ) from None
        self.rebalances.count = reply["rebalances"]
        if "error" in reply:
            raise rebuild_error(self.ck, reply["error"])
        return reply["result"]

    async def _answer(self, reader: asyncio.StreamReader) -> dict[str, Any]:
        while True:
            data = await reader.read(65536)
            if not data:
                raise EOFError("the child closed its socket")
            payloads = self._splitter.feed(data)
            if payloads:  # one call at a time: its answer is the one frame
                return cbor2.loads(payloads[0])

    async def _kill(self) -> None:
        if self.child.returncode is None:
            self.child.kill()
        await asyncio.to_thread(self.child.wait)

    async def open(self) -> list[int]:
        return await self._call("open")

    async def send(self, key: int, value: str) -> int:
        return await self._call("send", key, value)

    async def poll(self) -> list[tuple[int, int, str]]:
        return [tuple(r) for r in await self._call("poll")]

    async def commit_positions(self) -> None:
        await self._call("commit_positions")

    async def begin(self) -> None:
        await self._call("begin")

    async def send_offsets(self, offsets: dict[int, int]) -> None:
        await self._call("send_offsets", offsets)

    async def commit(self) -> None:
        await self._call("commit")

    async def abort(self) -> None:
        await self._call("abort")

    async def seek(self, offsets: dict[int, int]) -> None:
        await self._call("seek", offsets)

    async def assigned(self) -> list[int]:
        return await self._call("assigned")

    async def position(self, key: int) -> int:
        return await self._call("position", key)

    async def end_offsets(self) -> dict[int, int]:
        return await self._call("end_offsets")

    def fatal(self, exc: BaseException) -> bool:
        """Not a Kafka error nor a timeout (a bug in the adapter, a crashed child), or one librdkafka calls fatal."""
        if isinstance(exc, self.ck.KafkaException) and exc.args and isinstance(exc.args[0], self.ck.KafkaError):
            return bool(exc.args[0].fatal()) and not self.spec.transactional  # fenced: the txn run's fresh process
        return not isinstance(exc, TimeoutError | BufferError)

    async def close(self) -> None:
        """The child closes its consumer (LeaveGroup) and producer, bounded; past the bound it is killed."""
        if self._killed_at is None:
            with contextlib.suppress(Exception):
                await self._call("close")
        try:
            await asyncio.wait_for(asyncio.to_thread(self.child.wait), CHILD_EXIT_TIMEOUT_S)
        except TimeoutError:
            await self._kill()
        if self._streams is not None:
            self._streams[1].close()
        self._sock.close()


class ChildGone(RuntimeError):
    """librdkafka's child process ended without answering: a crash, not a fault (the run fails)."""


def describe_error(exc: BaseException) -> dict[str, Any]:
    """An error of a librdkafka call, as confluent_worker sends it to ConfluentClient (rebuild_error)."""
    import confluent_kafka as ck

    if isinstance(exc, SystemError) and isinstance(exc.__cause__, ck.KafkaException):
        # A fatal error met while flush() serves delivery reports is set before the callback runs,
        # whose first C call then fails: confluent-kafka raises SystemError from the KafkaException.
        exc = exc.__cause__
    if isinstance(exc, ck.KafkaException) and exc.args and isinstance(exc.args[0], ck.KafkaError):
        e = exc.args[0]
        return {
            "kind": "kafka", "code": e.code(), "reason": e.str(), "fatal": e.fatal(), "retriable": e.retriable(),
            "txn_requires_abort": e.txn_requires_abort(),
        }  # fmt: skip
    kind = "timeout" if isinstance(exc, TimeoutError) else "buffer" if isinstance(exc, BufferError) else "other"
    return {"kind": kind, "type": type(exc).__name__, "message": str(exc)}


def rebuild_error(ck: Any, error: dict[str, Any]) -> BaseException:
    """The exception describe_error described, of the class the runner judges (fatal, indeterminate)."""
    if error["kind"] == "kafka":
        return ck.KafkaException(
            ck.KafkaError(
                error["code"], error["reason"], fatal=error["fatal"], retriable=error["retriable"],
                txn_requires_abort=error["txn_requires_abort"],
            )
        )  # fmt: skip
    if error["kind"] == "timeout":
        return TimeoutError(error["message"])
    if error["kind"] == "buffer":
        return BufferError(error["message"])
    return RuntimeError(f"{error['type']}: {error['message']}")


CLIENTS = {"kraftpy": KraftpyClient, "confluent": ConfluentClient}
