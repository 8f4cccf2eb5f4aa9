"""Unclean leader election and its trade-off, end to end.

The ISR shrinks to the leader alone, which then commits records nobody else
has, and dies. Without unclean election the partition stays leaderless until
that replica returns, and nothing is lost. With it (the topic's
unclean_leader_election_enable), an out-of-sync replica leads at once with its
shorter log; when the old leader returns it truncates to the new leader's
history (DivergingEpoch): those committed, acknowledged records are gone from
every replica. docs/replication.md, "Unclean leader election".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.integration.test_broker_fixtures import BrokerCluster, log_bytes, part_of


def produce(value: bytes, acks: int = -1) -> dict[str, Any]:
    records = build_batch([(None, value)])
    return {
        "acks": acks,
        "timeout_ms": 5000,
        "topics": [{"name": "u", "partitions": [{"partition": 0, "records": records}]}],
    }


def values(cluster: BrokerCluster, broker: int) -> list[bytes]:
    hosted = cluster.hosted(broker, "u")
    return [r.value for b in decode_batches(log_bytes(hosted, hosted.log.log_end_offset)) for r in b.records]


async def shrink_to_leader_and_commit_alone(cluster: BrokerCluster) -> None:
    for i in range(3):
        assert part_of(await cluster.call(1, "/kafka/produce", produce(f"shared-{i}".encode())))["error_code"] == 0
    await cluster.wait_for_replicas_caught_up("u")
    await cluster.rm(2).fetchers.pause()
    await cluster.rm(3).fetchers.pause()
    assert part_of(await cluster.call(1, "/kafka/produce", produce(b"only-on-1", acks=1)))["error_code"] == 0
    await cluster.wait_for_isr("u", 0, {1})
    # With the ISR {1} the record is committed (HW 4) and acknowledged to acks=all producers from now on.
    answer = part_of(await cluster.call(1, "/kafka/produce", produce(b"acked-on-1")))
    assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 4)


async def test_without_unclean_election_the_partition_waits_for_its_last_in_sync_replica(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("u", assignments=[(1, 2, 3)])
        await shrink_to_leader_and_commit_alone(cluster)
        cluster.fence(1)
        assert cluster.leader("u") == -1  # no in-sync replica left to elect
        answer = part_of(await cluster.call(2, "/kafka/produce", produce(b"refused")))
        assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()
        cluster.unfence(1)
        assert cluster.leader("u") == 1
        await cluster.wait_for_isr("u", 0, {1, 2, 3})
        await cluster.wait_for_replicas_caught_up("u")
        expected = [b"shared-0", b"shared-1", b"shared-2", b"only-on-1", b"acked-on-1"]
        assert all(values(cluster, b) == expected for b in (1, 2, 3))


async def test_unclean_election_makes_the_partition_available_and_loses_what_only_the_old_leader_had(
    tmp_path: Path,
) -> None:
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("u", assignments=[(1, 2, 3)], configs={"unclean_leader_election_enable": True})
        await shrink_to_leader_and_commit_alone(cluster)
        cluster.fence(1)
        new_leader = cluster.leader("u")
        assert new_leader in (2, 3)  # out of the ISR, elected because the topic allows it
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()
        answer = part_of(await cluster.call(new_leader, "/kafka/produce", produce(b"after", acks=1)))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 3)
        cluster.unfence(1)
        await cluster.wait_for_isr("u", 0, {1, 2, 3})
        await cluster.wait_for_replicas_caught_up("u")
        expected = [b"shared-0", b"shared-1", b"shared-2", b"after"]
        # The old leader truncated by epoch to the new leader's history: "acked-on-1" is lost everywhere.
        assert all(values(cluster, b) == expected for b in (1, 2, 3))
