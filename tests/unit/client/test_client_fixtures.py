"""Builders shared by the client core tests: metadata answers and a wired producer core.

The producer core is the real accumulator, buffer pool, idempotence manager
and sender; only time is driven by the test (an integer `now` in ms).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.metadata import Metadata
from kraftpy.client.producer.accumulator import RecordAccumulator
from kraftpy.client.producer.buffer_pool import BufferPool
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.client.producer.sender import Sender
from kraftpy.client.types import RecordMetadata
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.types import TopicPartition

BROKERS = {1: ("b1", 9001), 2: ("b2", 9002), 3: ("b3", 9003)}


def metadata_body(
    leaders: dict[tuple[str, int], tuple[int, int]],
    *,
    brokers: dict[int, tuple[str, int]] | None = None,
    controller_id: int = 1,
    topic_errors: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A `/kafka/metadata` answer: leaders maps (topic, partition) -> (leader_id, leader_epoch)."""
    brokers = BROKERS if brokers is None else brokers
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (leader, epoch) in sorted(leaders.items()):
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "leader_id": leader,
                "leader_epoch": epoch,
                "replica_nodes": sorted(brokers),
                "isr_nodes": sorted(brokers),
                "error_code": 0,
            }
        )
    answer_topics = [{"name": t, "topic_id": f"id-{t}", "error_code": 0, "partitions": ps} for t, ps in topics.items()]
    for name, code in (topic_errors or {}).items():
        answer_topics.append({"name": name, "topic_id": None, "error_code": code, "partitions": []})
    return {
        "error_code": 0,
        "cluster_id": "test-cluster",
        "controller_id": controller_id,
        "brokers": [{"node_id": i, "host": h, "port": p, "rack": None} for i, (h, p) in sorted(brokers.items())],
        "topics": answer_topics,
    }


def fresh_metadata(leaders: dict[tuple[str, int], tuple[int, int]], now_ms: int = 0, **kwargs: Any) -> Metadata:
    md = Metadata([("boot", 9000)], **kwargs)
    md.set_topics({t for t, _ in leaders})
    md.update(metadata_body(leaders), now_ms)
    return md


@dataclass
class Delivery:
    """Collects callback outcomes in the order the core reported them."""

    results: list[tuple[RecordMetadata, BaseException | None]] = field(default_factory=list)

    def callback(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        self.results.append((metadata, error))

    @property
    def offsets(self) -> list[int]:
        return [md.offset for md, err in self.results if err is None]

    @property
    def errors(self) -> list[BaseException]:
        return [err for _, err in self.results if err is not None]


@dataclass
class ProducerCore:
    metadata: Metadata
    pool: BufferPool
    idempotence: IdempotenceManager | None
    accumulator: RecordAccumulator
    sender: Sender
    delivery: Delivery

    def send(self, tp: TopicPartition, value: bytes, now_ms: int, key: bytes | None = None) -> None:
        result = self.accumulator.append(tp, 1_000 + now_ms, key, value, (), self.delivery.callback, now_ms)
        assert result.appended, result


def producer_core(
    leaders: dict[tuple[str, int], tuple[int, int]],
    *,
    idempotent: bool = True,
    acks: int = -1,
    batch_size: int = 16_384,
    linger_ms: int = 0,
    buffer_memory: int = 1 << 25,
    delivery_timeout_ms: int = 120_000,
    retries: int = 2**31 - 1,
    retry_backoff_ms: int = 100,
    retry_backoff_max_ms: int = 1_000,
    max_in_flight: int = 5,
    max_request_size: int = 1 << 20,
    compression: CompressionType = CompressionType.NONE,
    with_producer_id: bool = True,
) -> ProducerCore:
    md = fresh_metadata(leaders)
    pool = BufferPool(buffer_memory)
    idem = IdempotenceManager() if idempotent else None
    if idem is not None and with_producer_id:
        idem.set_producer_id_and_epoch(1000, 0)
    acc = RecordAccumulator(
        batch_size=batch_size,
        linger_ms=linger_ms,
        compression=compression,
        delivery_timeout_ms=delivery_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_backoff_max_ms=retry_backoff_max_ms,
        max_in_flight=max_in_flight,
        pool=pool,
        idempotence=idem,
        rng=random.Random(7),
    )
    sender = Sender(
        acc,
        md,
        idempotence=idem,
        acks=acks,
        retries=retries,
        max_request_size=max_request_size,
        max_in_flight=max_in_flight,
        guarantee_message_order=max_in_flight == 1,
    )
    return ProducerCore(md, pool, idem, acc, sender, Delivery())


def produce_answer(parts: dict[TopicPartition, dict[str, Any]]) -> dict[str, Any]:
    """A `/kafka/produce` answer with one entry per partition (error_code 0 unless given)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, fields in parts.items():
        entry = {"partition": tp.partition, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1}
        entry["log_start_offset"] = 0
        entry.update(fields)
        topics.setdefault(tp.topic, []).append(entry)
    return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def test_metadata_body_builds_the_cluster_it_describes() -> None:
    md = fresh_metadata({("t", 0): (1, 5), ("t", 1): (2, 3)})
    assert md.cluster.num_partitions("t") == 2
    assert md.cluster.leader_for(TopicPartition("t", 1)).address == ("b2", 9002)
    assert md.current_leader(TopicPartition("t", 0)).epoch == 5


def test_producer_core_wires_one_pool_and_one_idempotence_manager() -> None:
    core = producer_core({("t", 0): (1, 0)}, buffer_memory=50_000)
    assert core.accumulator.pool is core.pool
    assert core.sender.idempotence is core.accumulator.idempotence is core.idempotence
    core.send(TopicPartition("t", 0), b"x", now_ms=0)
    assert core.pool.used == 16_384
