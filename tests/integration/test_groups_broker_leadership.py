"""The group coordinator follows `__consumer_offsets` leadership, on real brokers in one process.

BrokerCluster (test_broker_fixtures.py) runs three real ReplicaManagers behind real HTTP servers
with the real controller decisions; the test moves the leadership of the group's offsets partition
by fencing its leader: the old coordinator unloads the group (a member waiting in a rebalance is
answered NOT_COORDINATOR at once), the new leader loads it from its replica of the log and serves
the committed offsets; moved back (preferred election), the first broker loads again at its new
epoch and sees what was committed meanwhile.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kraftpy.broker.groups import PartitionStatus, partition_for
from kraftpy.protocol.errors import ErrorCode
from tests.integration.test_broker_fixtures import BrokerCluster, wait_for, wait_until

OFFSETS = "__consumer_offsets"
GROUP = "leadership"
RETRIABLE = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def join_body(member_id: str, client_id: str) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
        "client_id": client_id,
        "reason": "",
    }


def commit_body(member: str, generation: int, offset: int) -> dict[str, Any]:
    partition = {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1}
    return {
        "group_id": GROUP,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": [partition]}],
    }


FETCH = {"group_id": GROUP, "topics": [{"name": "orders", "partition_indexes": [0]}]}


def committed(answer: dict[str, Any]) -> int | None:
    if answer["error_code"] != 0:
        return None
    return answer["topics"][0]["partitions"][0]["committed_offset"]


async def test_the_coordinator_follows_offsets_partition_leadership(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as c:
        c.create_topic(OFFSETS, 50, 3, configs={"cleanup_policy": "compact"})
        c.create_topic("orders")  # Kafka answers UNKNOWN_TOPIC_OR_PARTITION to a commit for a missing topic
        partition = partition_for(GROUP, 50)
        first = c.leader(OFFSETS, partition)

        def serving(broker: int) -> bool:
            return c.rm(broker).groups.coordinator.partition_status(partition) is PartitionStatus.ACTIVE

        await wait_until(lambda: serving(first), what=f"broker {first} to load {OFFSETS}-{partition}")
        address = c.brokers[first].kafka_address

        async def call(addr: tuple[str, int], api: str, body: dict[str, Any]) -> dict[str, Any]:
            return await c.kafka.call(addr, f"/kafka/{api}", body, raise_errors=False)

        member = (await call(address, "join_group", join_body("", "a")))["member_id"]
        joined = await call(address, "join_group", join_body(member, "a"))
        generation = joined["generation_id"]
        sync = {"group_id": GROUP, "generation_id": generation, "member_id": member, "assignments": []}
        assert (await call(address, "sync_group", sync))["error_code"] == 0
        assert (await call(address, "offset_commit", commit_body(member, generation, 7)))["error_code"] == 0

        # A second member's join waits for the first to rejoin (PreparingRebalance)...
        second = (await call(address, "join_group", join_body("", "b")))["member_id"]
        waiting = asyncio.create_task(call(address, "join_group", join_body(second, "b")))
        await wait_until(lambda: c.rm(first).groups.status()["waiting_requests"] == 1, what="the join to wait")
        assert not waiting.done()

        # ...until the partition moves: the old coordinator answers it NOT_COORDINATOR and forgets the group.
        c.fence(first)
        answer = await asyncio.wait_for(waiting, timeout=10)
        assert answer["error_code"] == ErrorCode.NOT_COORDINATOR, answer
        assert c.rm(first).groups.coordinator.partition_status(partition) is None
        assert GROUP not in c.rm(first).groups.coordinator.groups

        second_leader = c.leader(OFFSETS, partition)
        assert second_leader != first
        found = await call(c.brokers[first].kafka_address, "find_coordinator", {"key": GROUP, "key_type": 0})
        assert (found["error_code"], found["node_id"]) == (0, second_leader)
        new_address = c.brokers[second_leader].kafka_address

        async def fetch_from(addr: tuple[str, int]) -> dict[str, Any]:
            return await call(addr, "offset_fetch", FETCH)

        answer = await wait_for(lambda: fetch_from(new_address), lambda a: a["error_code"] not in RETRIABLE)
        assert committed(answer) == 7, answer
        # Offsets-only commits (generation -1) are refused while the loaded group still has members.
        refused = await call(new_address, "offset_commit", commit_body("", -1, 9))
        assert refused["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID, refused
        assert (await call(new_address, "offset_commit", commit_body(member, generation, 9)))["error_code"] == 0

        # Back to the first broker (a new epoch there): it loads again and sees the commit made meanwhile.
        c.unfence(first)
        await wait_until(lambda: first in c.partition(OFFSETS, partition).isr, what=f"broker {first} back in the ISR")
        c.elect_preferred(OFFSETS, partition)
        assert c.leader(OFFSETS, partition) == first  # the first replica of a new partition leads it
        answer = await wait_for(lambda: fetch_from(address), lambda a: a["error_code"] not in RETRIABLE)
        assert committed(answer) == 9, answer
        assert c.rm(second_leader).groups.coordinator.partition_status(partition) is None


async def test_a_write_of_unknown_fate_reloads_the_partition_from_the_log(tmp_path: Path) -> None:
    # Followers that stop fetching leave the ISR after 1.5 s; the coordinator's writes time out sooner.
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=1_500) as c:
        c.create_topic(OFFSETS, 50, 3, configs={"cleanup_policy": "compact"})
        c.create_topic("orders")  # Kafka answers UNKNOWN_TOPIC_OR_PARTITION to a commit for a missing topic
        partition = partition_for(GROUP, 50)
        leader = c.leader(OFFSETS, partition)
        shell = c.rm(leader).groups
        # Every partition this broker leads, not just ours: logs open in a thread and leaderships start as
        # they open, so other partitions' loads may still be completing (they would count as reloads).
        led = [p for p in range(50) if c.leader(OFFSETS, p) == leader]
        await wait_until(
            lambda: all(shell.coordinator.partition_status(p) is PartitionStatus.ACTIVE for p in led),
            what="the partitions loaded",
        )
        # The fixture writes the node configs itself; this is offsets_commit_timeout_ms.
        shell.appender.timeout_ms = 300
        for follower in c.partition(OFFSETS, partition).replicas:
            if follower != leader:
                await c.rm(follower).fetchers.pause()
        loads = shell.loader.loads_completed

        address = c.brokers[leader].kafka_address
        answer = await c.kafka.call(address, "/kafka/offset_commit", commit_body("", -1, 42), raise_errors=False)
        code = answer["topics"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.COORDINATOR_NOT_AVAILABLE, answer  # acks=all did not come in time
        assert shell.appender.failed == 1

        # The write is in the leader's log and commits once the ISR shrinks: the coordinator reloads the
        # partition from the log instead of guessing, and then serves what the log says.
        answer = await wait_for(
            lambda: c.kafka.call(address, "/kafka/offset_fetch", FETCH, raise_errors=False),
            lambda a: a["error_code"] not in RETRIABLE,
        )
        assert committed(answer) == 42, answer
        assert shell.loader.loads_completed == loads + 1
        assert c.partition(OFFSETS, partition).isr == (leader,)
