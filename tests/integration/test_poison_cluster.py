"""Poison pills on a real 3-node cluster (`kraftpy cluster start`): internal topics, and a bad batch already stored.

- A client's produce to `__consumer_offsets` (a keyless record kept its partition loading forever)
  or `__cluster_metadata` is refused INVALID_TOPIC_EXCEPTION, while the group coordinator's own
  appends to `__consumer_offsets` go on working.
- A batch written before the leader validated records (simulated: appended straight into a stopped
  node's segment file, with a valid CRC around garbage zstd) does not cost a consumer the records
  before it: it gets them, then CorruptFetchError at the bad offset, and after a seek past it the
  records after it.
Every wait is a bounded poll; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftpy.broker.groups import partition_for
from kraftpy.broker.shell.log_manager import PARTITIONS_DIR
from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.client.errors import CorruptFetchError
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records import CompressionType, build_batch, iter_batches
from kraftpy.protocol.topics import CLUSTER_METADATA_TOPIC, OFFSETS_TOPIC
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.integration.test_groups_broker import commit, fetched, find_coordinator, join_and_sync, port_of, rpc
from tests.unit.protocol.test_records_validation import GARBAGE, forge

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("poison") / "cluster") as c:
        # The group's commits are for "orders": Kafka refuses commits for a topic that does not exist.
        c.ok("topics", "create", "orders", "--partitions", "1", "--replication-factor", "3")
        yield c


def produce_body(topic: str, partition: int, records: bytes) -> dict:
    return {
        "acks": -1,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": partition, "records": records}]}],
    }


def test_clients_may_not_produce_to_internal_topics_but_the_coordinator_still_appends(cluster: LocalCluster) -> None:
    group = "poison-group"
    coordinator = find_coordinator(cluster, group, via=1)
    port = port_of(cluster, coordinator["node_id"])  # the leader of the group's offsets partition
    member, generation = join_and_sync(port, group)
    assert commit(port, group, member, generation, {0: 5})["error_code"] == 0

    partitions = cluster.describe(OFFSETS_TOPIC)["partitions"]
    partition = partition_for(group, len(partitions))
    keyless = build_batch([(None, b"a keyless record kept the partition loading forever")])
    for topic in (OFFSETS_TOPIC, CLUSTER_METADATA_TOPIC):
        answer = rpc(port, "produce", produce_body(topic, partition if topic == OFFSETS_TOPIC else 0, keyless))
        (part,) = answer["topics"][0]["partitions"]
        assert part["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, answer
        assert part["message"] == f"Cannot append to internal topic {topic}"

    answer = commit(port, group, member, generation, {0: 9})  # the coordinator's own append
    assert [p["error_code"] for t in answer["topics"] for p in t["partitions"]] == [0], answer
    offsets = {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0]}]}
    assert fetched(rpc(port, "offset_fetch", offsets))[0][0] == 9


def _append_poison(cluster: LocalCluster, node_id: int, topic: str) -> int:
    """Append a CRC-valid batch of garbage zstd to the partition's last segment on a stopped node; its offset."""
    layout = cluster.layout()
    entry = next(n for n in layout.nodes if n.node_id == node_id)
    directory = layout.data_dir(entry) / PARTITIONS_DIR / f"{topic}-0"
    segment = max(directory.glob("*.log"))
    last = None
    for _, header in iter_batches(segment.read_bytes()):
        last = header
    assert last is not None
    template = build_batch([(b"k", b"v")] * 2, base_offset=last.next_offset)
    bad = forge(template, section=GARBAGE[CompressionType.ZSTD], attributes=CompressionType.ZSTD)
    bad = bad[:12] + last.partition_leader_epoch.to_bytes(4, "big") + bad[16:]  # outside the CRC, as a leader stamps it
    with segment.open("ab") as f:
        f.write(bad)
    return last.next_offset


async def _consume(bootstrap: str, topic: str, next_offset: int) -> tuple[list[int], CorruptFetchError, list[int]]:
    tp = TopicPartition(topic, 0)
    before: list[int] = []
    after: list[int] = []
    error: CorruptFetchError | None = None
    async with Consumer(bootstrap, fetch_max_wait_ms=100) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        for _ in range(300):  # bounded
            try:
                before += [r.offset for r in await consumer.poll(timeout_ms=100)]
            except CorruptFetchError as exc:
                error = exc
                break
        assert error is not None, f"no error after reading {before}"
        assert before == list(range(error.offset)), f"read {before} before the error at {error.offset}"
        consumer.seek(tp, error.next_offset)
        for _ in range(300):  # bounded
            after += [r.offset for r in await consumer.poll(timeout_ms=100)]
            if after and after[-1] >= next_offset - 1:
                break
    return before, error, after


def test_a_consumer_gets_the_records_before_a_stored_bad_batch_then_the_error(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "legacy"
    cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "1")
    bootstrap = cluster.layout().kafka_bootstrap_servers

    async def produce(values: list[bytes]) -> None:
        async with Producer(bootstrap, acks="all") as producer:
            for value in values:
                await producer.send(topic, value, partition=0)
            await producer.flush()

    asyncio.run(produce([b"before-%d" % i for i in range(5)]))
    leader = cluster.describe(topic)["partitions"][0]["leader"]
    cluster.cli("cluster", "stop", "--dir", str(cluster.dir), "--timeout-s", "30")
    bad_offset = _append_poison(cluster, leader, topic)
    assert bad_offset == 5
    cluster.start()
    wait_for("the partition led again", lambda: cluster.describe(topic)["partitions"][0]["leader"] >= 0)
    asyncio.run(produce([b"after-%d" % i for i in range(3)]))

    before, error, after = asyncio.run(_consume(bootstrap, topic, next_offset=10))
    assert before == [0, 1, 2, 3, 4]
    assert (error.offset, error.next_offset, error.code) == (5, 7, ErrorCode.CORRUPT_MESSAGE)
    assert "ZSTD" in str(error)
    assert after == [7, 8, 9]
