"""The asyncio and sync shells without a broker: config errors up front, clear errors when nothing answers.

End-to-end behaviour against real brokers is tested in tests/integration once
the broker exists; here the only "server" is a closed port.
"""

from __future__ import annotations

import asyncio

import pytest

from kraftpy.client.errors import ConfigError, IllegalStateError, KafkaTimeoutError, ProducerClosedError
from kraftpy.client.shell.admin import AdminClient
from kraftpy.client.shell.consumer import Consumer
from kraftpy.client.shell.loop_thread import LoopThread
from kraftpy.client.shell.producer import Producer
from kraftpy.client.shell.sync import SyncConsumer, SyncProducer
from kraftpy.protocol.types import TopicPartition


def test_bad_config_fails_before_any_connection() -> None:
    with pytest.raises(ConfigError, match="linger_ms"):
        Producer("127.0.0.1:1", linger_ms="soon")
    with pytest.raises(ConfigError, match="value_serializer: unknown serializer 'yaml'"):
        Producer("127.0.0.1:1", value_serializer="yaml")
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        Consumer("nowhere")
    with pytest.raises(ConfigError, match="key_deserializer"):
        Consumer("127.0.0.1:1", key_deserializer=42)


class Recorder:
    def __init__(self) -> None:
        self.sent: list = []
        self.acks: list = []

    def on_send(self, record):
        self.sent.append(record)
        return record

    def on_acknowledgement(self, metadata, error):
        self.acks.append((metadata, error))


async def test_send_without_a_reachable_server_times_out_clearly(closed_port: str) -> None:
    recorder = Recorder()
    producer = Producer(closed_port, max_block_ms=200, interceptors=[recorder])
    try:
        with pytest.raises(KafkaTimeoutError, match="topic 'events' not present in metadata after 200 ms"):
            await producer.send("events", b"v")
        assert len(recorder.sent) == 1
        ((metadata, error),) = recorder.acks
        assert metadata.topic == "events" and metadata.offset == -1 and isinstance(error, KafkaTimeoutError)
    finally:
        await producer.close()
    with pytest.raises(ProducerClosedError):
        await producer.send("events", b"v")


async def test_close_without_use_and_twice_is_fine() -> None:
    producer = Producer("127.0.0.1:1")
    await producer.close()
    await producer.close()
    async with Producer("127.0.0.1:1") as p:
        assert p is not None


async def test_consumer_api_misuse_is_an_illegal_state(closed_port: str) -> None:
    consumer = Consumer(closed_port)
    try:
        with pytest.raises(IllegalStateError, match="assign"):
            await consumer.poll(0)
        with pytest.raises(IllegalStateError, match="assigned"):
            await consumer.position(("t", 0))
        consumer.assign([("t", 0), TopicPartition("t", 1)])
        assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
        consumer.seek(("t", 0), 5)
        assert await consumer.position(("t", 0)) == 5, "a seek sets the position without a round trip"
        assert await consumer.poll(50) == [], "nothing reachable: an empty poll, not an error"
        with pytest.raises(KafkaTimeoutError, match="position of t-1"):
            await consumer.position(("t", 1), timeout_ms=100)
    finally:
        await consumer.close()


async def test_admin_without_a_reachable_server_times_out(closed_port: str) -> None:
    async with AdminClient(closed_port) as admin:
        with pytest.raises(KafkaTimeoutError, match="no metadata within 100 ms"):
            await admin.describe_cluster(timeout_ms=100)
        with pytest.raises(KafkaTimeoutError, match="create_topics did not complete within 150 ms"):
            await admin.create_topics([], timeout_ms=150)


def test_sync_producer_runs_the_async_one_on_its_own_thread(closed_port: str) -> None:
    with SyncProducer(closed_port, max_block_ms=100) as producer:
        with pytest.raises(KafkaTimeoutError):
            producer.send("t", b"v")
        producer.flush()
    with pytest.raises(RuntimeError, match="event loop has stopped"):
        producer.send("t", b"v")


def test_sync_consumer(closed_port: str) -> None:
    with SyncConsumer(closed_port) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 3)
        assert consumer.position(("t", 0)) == 3
        assert consumer.poll(10) == []
        consumer.pause(("t", 0))
        assert consumer.assignment() == {TopicPartition("t", 0)}


def test_sync_wrapper_constructor_errors_propagate() -> None:
    with pytest.raises(ConfigError, match="acks"):
        SyncProducer("127.0.0.1:1", acks=7)


def test_loop_thread_bridges_futures_to_other_threads() -> None:
    thread = LoopThread()
    try:

        async def make() -> asyncio.Future[int]:
            future = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(future.set_result, 42)
            return future

        async def bridged():
            return thread.bridge(await make())

        assert thread.run(bridged()).result(timeout=5) == 42

        async def boom() -> None:
            raise ValueError("from the loop")

        with pytest.raises(ValueError, match="from the loop"):
            thread.run(boom())
    finally:
        thread.stop()
