"""One workload process's librdkafka producer and consumer, served in a child process of their own.

    python -m kraftpy.tools.faults.workloads.confluent_worker FD PARENT_PID SPEC WORKER PROCESS

clients.ConfluentClient starts it and calls it over the socket FD: one CBOR request per frame
(`{"call": name, "args": [...]}`), one answer each, in order. confluent-kafka holds the GIL in some
calls that can wait without bound under faults (Consumer.close() serving a rebalance, librdkafka
issue 4884); here that stops this process only, which the parent kills when its bound passes. The
process dies with its parent (PR_SET_PDEATHSIG), so a killed run leaves none behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import time
from typing import Any

import cbor2

from kraftpy.protocol.stream_frames import FrameSplitter, frame
from kraftpy.tools.faults.workloads.clients import (
    INNER_TIMEOUT_S,
    LOG_LEVEL,
    MAX_CALL_FRAME_BYTES,
    POLL_TIMEOUT_S,
    SESSION_TIMEOUT_MS,
    TXN_TIMEOUT_MS,
    ClientSpec,
    RebalanceCount,
    consume_ready,
    describe_error,
)

_PR_SET_PDEATHSIG = 1


class ConfluentSession:
    """The blocking librdkafka calls behind each of ConfluentClient's async ones."""

    CALLS = frozenset({
        "open", "send", "poll", "commit_positions", "begin", "send_offsets", "commit", "abort", "seek",
        "assigned", "position", "end_offsets", "close",
    })  # fmt: skip

    def __init__(self, spec: ClientSpec, worker: int, process: int) -> None:
        import confluent_kafka as ck

        self.ck = ck
        self.spec = spec
        producer: dict[str, Any] = {
            "bootstrap.servers": spec.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1,
            "request.timeout.ms": 2_000, "message.timeout.ms": int(INNER_TIMEOUT_S * 1000),
            "topic.metadata.refresh.interval.ms": 2_000, "log_level": LOG_LEVEL,
        }  # fmt: skip
        if spec.transactional:
            producer.update({"transactional.id": f"{spec.group_id}-{worker}", "transaction.timeout.ms": TXN_TIMEOUT_MS})
        self.producer = ck.Producer(producer)
        group = spec.group_id if spec.sub_via == "subscribe" else f"{spec.group_id}-assign-{process}"
        self.consumer = ck.Consumer({
            "bootstrap.servers": spec.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1_000, "log_level": LOG_LEVEL,
            "isolation.level": "read_committed" if spec.transactional else "read_uncommitted",
        })  # fmt: skip
        self.rebalances = RebalanceCount()

    def _tp(self, key: int, offset: int | None = None) -> Any:
        if offset is None:
            return self.ck.TopicPartition(self.spec.topic, key)
        return self.ck.TopicPartition(self.spec.topic, key, offset)

    def open(self) -> list[int]:
        if self.spec.transactional:
            self.producer.init_transactions(INNER_TIMEOUT_S)
        if self.spec.sub_via == "subscribe":
            moved = self.rebalances.moved
            self.consumer.subscribe(
                [self.spec.topic],
                on_assign=lambda _c, ps: moved(ps),
                on_revoke=lambda _c, ps: moved(ps),
                on_lost=lambda _c, ps: moved(ps),
            )
        else:
            self.consumer.assign([self._tp(k, self.ck.OFFSET_BEGINNING) for k in range(self.spec.keys)])
        return list(range(self.spec.keys))

    def send(self, key: int, value: str) -> int:
        delivered: list[Any] = []
        self.producer.produce(
            self.spec.topic, value.encode(), partition=key, on_delivery=lambda e, m: delivered.append((e, m))
        )
        if self.producer.flush(INNER_TIMEOUT_S + 1) or not delivered:
            raise TimeoutError(f"send of {value} not delivered within {INNER_TIMEOUT_S + 1} s")
        error, message = delivered[0]
        if error is not None:
            raise self.ck.KafkaException(error)
        return message.offset()

    def poll(self) -> list[tuple[int, int, str]]:
        out = []
        for m in consume_ready(self.consumer, 100, POLL_TIMEOUT_S):
            if m.error() is not None:
                if m.error().code() == self.ck.KafkaError._PARTITION_EOF:
                    continue
                raise self.ck.KafkaException(m.error())
            out.append((m.partition(), m.offset(), m.value().decode()))
        return out

    def commit_positions(self) -> None:
        self.consumer.commit(asynchronous=False)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send_offsets(self, offsets: dict[int, int]) -> None:
        tps = [self._tp(k, o) for k, o in offsets.items()]
        self.producer.send_offsets_to_transaction(tps, self.consumer.consumer_group_metadata(), INNER_TIMEOUT_S)

    def commit(self) -> None:
        self._end_txn(self.producer.commit_transaction)

    def abort(self) -> None:
        self._end_txn(self.producer.abort_transaction)

    def _end_txn(self, end: Any) -> None:
        """commit_transaction / abort_transaction, called again after a retriable error while time is left.

        librdkafka's documented pattern: a retriable error (its own timeout, a coordinator moving) leaves
        the commit in progress, to be resumed by calling again. Aborting instead after a commit the
        coordinator had completed was refused (INVALID_TXN_STATE: the transaction is CompleteCommit),
        fatal for librdkafka, and the transaction's outcome went into the history as unknown."""
        deadline = time.monotonic() + INNER_TIMEOUT_S
        while True:
            try:
                end(max(deadline - time.monotonic(), 0.1))
                return
            except self.ck.KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not (isinstance(error, self.ck.KafkaError) and error.retriable()) or time.monotonic() >= deadline:
                    raise

    def seek(self, offsets: dict[int, int]) -> None:
        for key, offset in offsets.items():
            self.consumer.seek(self._tp(key, offset))

    def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    def position(self, key: int) -> int:
        return max(self.consumer.position([self._tp(key)])[0].offset, 0)

    def end_offsets(self) -> dict[int, int]:
        return {k: self.consumer.get_watermark_offsets(self._tp(k), INNER_TIMEOUT_S)[1] for k in range(self.spec.keys)}

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.producer.purge()
            self.producer.flush(1.0)


def serve(sock: socket.socket, session: ConfluentSession) -> None:
    """Answer calls in order until `close` is answered or the parent's end of the socket closes."""
    splitter = FrameSplitter(MAX_CALL_FRAME_BYTES)
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for payload in splitter.feed(data):
            request = cbor2.loads(payload)
            name = request["call"]
            try:
                if name not in ConfluentSession.CALLS:
                    raise ValueError(f"no call {name!r}")
                reply: dict[str, Any] = {"result": getattr(session, name)(*request["args"])}
            except Exception as exc:
                reply = {"error": describe_error(exc)}
            reply["rebalances"] = session.rebalances.count
            sock.sendall(frame(cbor2.dumps(reply)))
            if name == "close":
                return


def main(argv: list[str]) -> None:
    fd, parent_pid, spec, worker, process = int(argv[0]), int(argv[1]), argv[2], int(argv[3]), int(argv[4])
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    sock = socket.socket(fileno=fd)
    serve(sock, ConfluentSession(ClientSpec(**cbor2.loads(bytes.fromhex(spec))), worker, process))
    sock.close()
    # librdkafka's handles are closed; skip the interpreter's teardown, which would destroy them again.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
