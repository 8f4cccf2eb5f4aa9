"""Every error path of the data plane answers with Kafka's code, and the node keeps serving.

Fencing (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER
with a leader hint), unknown partitions, offsets out of range, DivergingEpoch
for a consumer, bad batches (CORRUPT_MESSAGE, INVALID_RECORD,
MESSAGE_TOO_LARGE), invalid acks, and malformed requests (INVALID_REQUEST
naming the field; HTTP 400 on the internal RPC) - after all of which the same
broker still produces and fetches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import cbor2
import pytest

from kraftpy.protocol.access import REPLICA_FETCH_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch
from tests.integration.test_broker_fixtures import BrokerCluster, error_of, part_of


def produce(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout_ms": 5000,
        "topics": [{"name": topic, "partitions": [{"partition": partition, "records": records}]}],
    }


def fetch(topic: str, offset: int, epoch: int = -1, last_fetched_epoch: int = -1) -> dict[str, Any]:
    part = {
        "partition": 0,
        "fetch_offset": offset,
        "current_leader_epoch": epoch,
        "last_fetched_epoch": last_fetched_epoch,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [{"name": topic, "partitions": [part]}],
    }


def list_offsets(topic: str, epoch: int, timestamp: int = -1) -> dict[str, Any]:
    part = {"partition": 0, "current_leader_epoch": epoch, "timestamp": timestamp}
    return {"replica_id": -1, "topics": [{"name": topic, "partitions": [part]}]}


def epoch_query(topic: str, current: int, wanted: int) -> dict[str, Any]:
    part = {"partition": 0, "current_leader_epoch": current, "leader_epoch": wanted}
    return {"topics": [{"name": topic, "partitions": [part]}]}


async def test_fencing_and_routing_errors(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("fence", assignments=[(1, 2, 3)])
        assert error_of(await cluster.call(1, "/kafka/produce", produce("fence", build_batch([(None, b"x")])))) == 0
        await cluster.wait_for_replicas_caught_up("fence")
        cluster.fence(1)
        cluster.unfence(1)
        epoch = cluster.partition("fence").leader_epoch
        leader = cluster.leader("fence")
        follower = next(b for b in (1, 2, 3) if b != leader)

        stale = part_of(await cluster.call(leader, "/kafka/fetch", fetch("fence", 0, epoch - 1)))
        assert stale["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        newer = part_of(await cluster.call(leader, "/kafka/fetch", fetch("fence", 0, epoch + 1)))
        assert newer["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
        not_leader = part_of(await cluster.call(follower, "/kafka/fetch", fetch("fence", 0, epoch)))
        assert not_leader["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # Kafka's hint (Fetch's current_leader): the leader and its epoch; the client finds its address in metadata.
        assert not_leader["details"] == {"leader_id": leader, "leader_epoch": epoch}
        answer = part_of(await cluster.call(follower, "/kafka/produce", produce("fence", build_batch([(None, b"y")]))))
        assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and answer["details"]["leader_id"] == leader
        assert error_of(await cluster.call(leader, "/kafka/list_offsets", list_offsets("fence", epoch - 1))) == (
            ErrorCode.FENCED_LEADER_EPOCH
        )
        assert error_of(await cluster.call(follower, "/kafka/list_offsets", list_offsets("fence", epoch))) == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        assert error_of(
            await cluster.call(leader, "/kafka/offsets_for_leader_epoch", epoch_query("fence", epoch + 1, 0))
        ) == (ErrorCode.UNKNOWN_LEADER_EPOCH)
        assert (
            error_of(await cluster.call(leader, "/kafka/fetch", fetch("fence", 99, epoch)))
            == ErrorCode.OFFSET_OUT_OF_RANGE
        )
        # A consumer that read up to offset 5 in the old epoch (from a leader that lost those records) is told
        # where that epoch ends here instead of getting data (KIP-320).
        diverging = part_of(
            await cluster.call(leader, "/kafka/fetch", fetch("fence", 5, epoch, last_fetched_epoch=epoch - 1))
        )
        assert diverging["error_code"] == 0 and diverging["records"] == b""
        assert diverging["diverging_epoch"] == {"epoch": epoch - 1, "end_offset": 1}
        unknown = await cluster.call(leader, "/kafka/produce", produce("nope", build_batch([(None, b"z")])))
        assert error_of(unknown) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        beyond = await cluster.call(
            leader, "/kafka/produce", produce("fence", build_batch([(None, b"z")]), partition=7)
        )
        assert error_of(beyond, partition=7) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_bad_batches_are_refused_per_partition(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("strict", assignments=[(1, 2, 3)], configs={"max_message_bytes": 300})
        good = build_batch([(None, b"ok")])
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # a flipped bit in the records: the CRC32C no longer matches
        cases = {
            bytes(corrupt): ErrorCode.CORRUPT_MESSAGE,
            good + good: ErrorCode.INVALID_RECORD,  # two batches in one partition
            good[:40]: ErrorCode.CORRUPT_MESSAGE,  # cut short
            build_batch([(None, b"x" * 400)]): ErrorCode.MESSAGE_TOO_LARGE,
            build_batch([(None, b"c")], is_control=True): ErrorCode.INVALID_RECORD,
            b"": ErrorCode.CORRUPT_MESSAGE,
        }
        for records, expected in cases.items():
            assert error_of(await cluster.call(1, "/kafka/produce", produce("strict", records))) == expected
        assert error_of(await cluster.call(1, "/kafka/produce", produce("strict", good, acks=2))) == (
            ErrorCode.INVALID_REQUIRED_ACKS
        )
        assert cluster.hosted(1, "strict").log.log_end_offset == 0
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("strict", good)))
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)  # the partition took nothing bad


async def test_a_batch_larger_than_a_segment_is_refused_and_the_partition_stays_online(tmp_path: Path) -> None:
    """Kafka answers RECORD_LIST_TOO_LARGE; taking the partition offline let any client stop it for good."""
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("small-segments", assignments=[(1, 2, 3)], configs={"segment_bytes": 2048})
        big = build_batch([(None, b"x" * 100)] * 40)  # about 4.6 KiB, under max_message_bytes
        assert len(big) > 2048
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("small-segments", big)))
        assert answer["error_code"] == ErrorCode.RECORD_LIST_TOO_LARGE
        assert "segment_bytes 2048" in answer["message"]
        assert cluster.hosted(1, "small-segments").offline is None
        answer = part_of(
            await cluster.call(1, "/kafka/produce", produce("small-segments", build_batch([(None, b"ok")])))
        )
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)


async def test_a_stop_says_whether_every_log_was_flushed(tmp_path: Path) -> None:
    """What lets the broker record a clean shutdown (broker/shell/restart_record.py): an offline log is
    discarded unflushed, so a broker that had one does not claim it."""
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("flushed", assignments=[(1, 2, 3)])
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("flushed", build_batch([(None, b"v")]))))
        assert answer["error_code"] == 0
        cluster.hosted(2, "flushed").go_offline("a disk error, as a test says")
        healthy, broken = cluster.rm(1), cluster.rm(2)
        await cluster.stop_broker(1)
        await cluster.stop_broker(2)
        assert healthy.logs_flushed and not broken.logs_flushed


MALFORMED = [
    ("produce", {"timeout_ms": 10, "topics": []}, "'acks'"),
    (
        "produce",
        {"acks": -1, "timeout_ms": 10, "topics": [{"name": "t", "partitions": [{"partition": 0, "records": "text"}]}]},
        "topics[0].partitions[0]: field 'records'",
    ),
    ("produce", {"acks": -1, "timeout_ms": -5, "topics": []}, "'timeout_ms'"),
    (
        "fetch",
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 10,
            "topics": [{"name": "t", "partitions": [{"partition": 0}]}],
        },
        "'fetch_offset'",
    ),
    ("fetch", {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10, "topics": "t"}, "'topics'"),
    ("fetch", {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10, "topics": [7]}, "topics[0]"),
    (
        "list_offsets",
        {"topics": [{"name": "t", "partitions": [{"partition": -1, "timestamp": -1}]}]},
        "'partition'",
    ),
    (
        "list_offsets",
        {"topics": [{"name": "t", "partitions": [{"partition": 0, "timestamp": -7}]}]},
        "'timestamp'",
    ),
    (
        "offsets_for_leader_epoch",
        {"topics": [{"name": "t", "partitions": [{"partition": 0, "current_leader_epoch": 0}]}]},
        "'leader_epoch'",
    ),
    ("metadata", {"topics": [1, 2]}, "topics[0]"),
    ("init_producer_id", {"transactional_id": None, "producer_id": 5}, "'producer_id'"),
    (
        "produce",
        {
            "acks": -1,
            "timeout_ms": 10,
            "topics": [
                {"name": "t", "partitions": [{"partition": 0, "records": b""}, {"partition": 0, "records": b""}]}
            ],
        },
        "listed twice",
    ),
]


async def test_malformed_requests_are_answered_and_the_node_keeps_serving(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("t", assignments=[(1, 2, 3)])
        await cluster.settled()
        # The handlers behind the Kafka APIs check what the dispatcher's translation hands them.
        for name, body, named in MALFORMED:
            with pytest.raises(KafkaError) as raised:
                await cluster.rm(1).handlers()[name](body)
            assert raised.value.code == ErrorCode.INVALID_REQUEST, (name, body)
            assert named in raised.value.message, (named, raised.value.message)
        url = f"http://127.0.0.1:{cluster.brokers[1].port}"
        async with aiohttp.ClientSession() as session:
            for path, data in [
                (REPLICA_FETCH_PATH, b"\xff\x00 not cbor"),
                (REPLICA_FETCH_PATH, cbor2.dumps([1, 2])),
                ("/kafka/nope", cbor2.dumps({})),
            ]:
                async with session.post(url + path, data=data, headers={"Content-Type": "application/cbor"}) as resp:
                    assert resp.status == 400
                    assert cbor2.loads(await resp.read())["error_code"] == ErrorCode.INVALID_REQUEST
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("t", build_batch([(None, b"still")]))))
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)
        metadata = await cluster.call(2, "/kafka/metadata", {"topics": None})
        assert [t["name"] for t in metadata["topics"]] == ["t"]
        assert {b["node_id"] for b in metadata["brokers"]} == {1, 2, 3}
        # As a KRaft broker: the controller a client sees is a broker, which forwards admin requests.
        assert metadata["cluster_id"] and metadata["controller_id"] == 2
        missing = await cluster.call(2, "/kafka/metadata", {"topics": ["absent"]})
        assert missing["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


CLIENT_ROUTES = ["/kafka/metadata", "/kafka/produce", "/kafka/fetch", "/kafka/join_group", "/kafka/end_txn"]


async def test_the_internal_rpc_serves_no_client_request(tmp_path: Path) -> None:
    """Clients speak Kafka's protocol only: the internal RPC refuses the old client routes and a consumer's
    fetch, while followers still fetch there and the same handlers answer on the Kafka listener."""
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("t", assignments=[(1, 2, 3)])
        assert error_of(await cluster.call(1, "/kafka/produce", produce("t", build_batch([(None, b"x")])))) == 0
        for path in CLIENT_ROUTES:
            with pytest.raises(KafkaError) as raised:
                await cluster.call_internal(1, path, {})
            assert raised.value.code == ErrorCode.INVALID_REQUEST, path
            assert f"unknown request POST {path}" in raised.value.message, raised.value.message
        with pytest.raises(KafkaError) as raised:
            await cluster.call_internal(1, REPLICA_FETCH_PATH, fetch("t", 0))  # replica_id -1: a consumer's
        assert raised.value.code == ErrorCode.INVALID_REQUEST and "Kafka listener" in raised.value.message
        follower = {**fetch("t", 0), "replica_id": 2, "replica_epoch": cluster.brokers[2].epoch}
        assert part_of(await cluster.call_internal(1, REPLICA_FETCH_PATH, follower))["records"] != b""
        assert part_of(await cluster.call(1, "/kafka/fetch", fetch("t", 0)))["records"] != b""
