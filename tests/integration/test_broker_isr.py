"""ISR changes through AlterPartition, and what acks=all does while the ISR moves.

A follower that stops fetching is shrunk out after replica_lag_time_max_ms
and added back once it catches up, both through the controller; min ISR 2
refuses acks=all before the append (NOT_ENOUGH_REPLICAS) or reports it after
(NOT_ENOUGH_REPLICAS_AFTER_APPEND); a wait past timeout_ms is
REQUEST_TIMED_OUT; AlterPartition survives a missing controller and follows
NOT_CONTROLLER hints; consumers never see data above the high watermark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.requests import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    IncrementalAlterConfigsRequest,
)
from kraftpy.protocol.access import REPLICA_FETCH_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch, decode_batches
from kraftpy.protocol.shell.rpc import make_app
from tests.integration.test_broker_fixtures import BrokerCluster, free_socket, part_of, wait_until


def produce(topic: str, value: bytes, acks: int = -1, timeout_ms: int = 5000) -> dict[str, Any]:
    records = build_batch([(None, value)])
    return {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": [{"name": topic, "partitions": [{"partition": 0, "records": records}]}],
    }


def fetch(topic: str, offset: int, replica_id: int = -1, epoch: int = -1) -> dict[str, Any]:
    part = {"partition": 0, "fetch_offset": offset, "current_leader_epoch": epoch, "partition_max_bytes": 1 << 20}
    return {
        "replica_id": replica_id,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [{"name": topic, "partitions": [part]}],
    }


async def test_a_follower_that_stops_fetching_leaves_the_isr_and_rejoins_when_caught_up(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("isr", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        assert part_of(await cluster.call(1, "/kafka/produce", produce("isr", b"a")))["error_code"] == 0
        await cluster.rm(3).fetchers.pause()
        # A follower at the leader's log end stays in sync (Kafka's rule); a new write leaves it behind.
        assert part_of(await cluster.call(1, "/kafka/produce", produce("isr", b"a2", acks=1)))["error_code"] == 0
        await cluster.wait_for_isr("isr", 0, {1, 2})
        # Two in-sync replicas still satisfy min ISR 2.
        for i in range(5):
            answer = part_of(await cluster.call(1, "/kafka/produce", produce("isr", f"b{i}".encode())))
            assert answer["error_code"] == ErrorCode.NONE
        assert cluster.hosted(3, "isr").log.log_end_offset < 7
        cluster.rm(3).fetchers.resume()
        await cluster.wait_for_isr("isr", 0, {1, 2, 3})
        await cluster.wait_for_replicas_caught_up("isr")
        assert cluster.alter_partition_requests >= 2


async def test_min_isr_refuses_before_and_holds_the_hw_after_the_append(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("minisr", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        await cluster.rm(2).fetchers.pause()
        await cluster.rm(3).fetchers.pause()
        # Sent while the ISR is still {1, 2, 3}: appended, then the ISR shrinks to {1} while it waits.
        # Below min ISR the HW stands still (Kafka 4.x, KIP-966), so the batch is not committed by the
        # leader alone: the wait ends in a timeout, the batch still in the leader's log.
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("minisr", b"during-shrink", timeout_ms=3_000)))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.REQUEST_TIMED_OUT, 0)
        assert set(cluster.partition("minisr").isr) == {1}
        assert cluster.rm(1).status()["under_min_isr"] == 1  # what an operator sees: its HW stands still
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("minisr", b"refused")))
        assert answer["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert cluster.hosted(1, "minisr").log.log_end_offset == 1  # nothing appended for the refused one
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("minisr", b"acks-1", acks=1)))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.NONE, 1)
        epoch = cluster.partition("minisr").leader_epoch
        consumer_view = part_of(await cluster.call(1, "/kafka/fetch", fetch("minisr", 0, epoch=epoch)))
        assert (consumer_view["high_watermark"], consumer_view["records"]) == (0, b"")  # neither visible yet
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()
        await cluster.wait_for_isr("minisr", 0, {1, 2, 3})
        await cluster.wait_for_replicas_caught_up("minisr")
        # The leader applies the ISR's image a moment after the controller's view.
        await wait_until(lambda: cluster.rm(1).status()["under_min_isr"] == 0, timeout_s=5, what="under_min_isr 0")
        consumer_view = part_of(await cluster.call(1, "/kafka/fetch", fetch("minisr", 0, epoch=epoch)))
        values = [r.value for b in decode_batches(consumer_view["records"]) for r in b.records]
        assert values == [b"during-shrink", b"acks-1"]


async def test_acks_all_times_out_but_the_batch_stays_and_commits_later(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:  # lag 10 s: the ISR does not shrink during this test
        cluster.create_topic("slow", assignments=[(1, 2, 3)])
        await cluster.rm(2).fetchers.pause()
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("slow", b"late", timeout_ms=200)))
        assert (answer["error_code"], answer["base_offset"]) == (ErrorCode.REQUEST_TIMED_OUT, 0)
        # Consumers see nothing above the HW, followers fetch up to the log end.
        epoch = cluster.partition("slow").leader_epoch
        consumer_view = part_of(await cluster.call(1, "/kafka/fetch", fetch("slow", 0, epoch=epoch)))
        assert (consumer_view["high_watermark"], consumer_view["records"]) == (0, b"")
        cluster.rm(2).fetchers.resume()
        await cluster.wait_for_replicas_caught_up("slow")
        consumer_view = part_of(await cluster.call(1, "/kafka/fetch", fetch("slow", 0, epoch=epoch)))
        assert [r.value for b in decode_batches(consumer_view["records"]) for r in b.records] == [b"late"]


async def test_alter_partition_waits_out_a_missing_controller_and_follows_not_controller(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=200) as cluster:
        cluster.create_topic("ctl", assignments=[(1, 2, 3)])
        real = ("127.0.0.1", cluster.controller_port)
        # A node that lost the controller election answers NOT_CONTROLLER with a hint to the real one.
        stale = web.AppRunner(make_app({"/controller/alter_partition": _not_controller(real)}), access_log=None)
        await stale.setup()
        sock = free_socket()
        await web.SockSite(stale, sock).start()
        stale_address = sock.getsockname()[:2]
        try:
            cluster.controller_up = False
            await cluster.rm(3).fetchers.pause()
            manager = cluster.rm(1).alter_partitions
            sent_before = manager.requests_sent
            assert part_of(await cluster.call(1, "/kafka/produce", produce("ctl", b"x", acks=1)))["error_code"] == 0
            # several shrink proposals find no controller: nothing changes
            await wait_until(lambda: manager.requests_sent >= sent_before + 3, what="three AlterPartition attempts")
            assert manager.last_error is not None
            assert set(cluster.partition("ctl").isr) == {1, 2, 3}
            assert cluster.rm(1).alter_partitions.pending == 1
            cluster.controller_address_override = stale_address
            cluster.controller_up = True
            await cluster.wait_for_isr("ctl", 0, {1, 2})
        finally:
            await stale.cleanup()


def _not_controller(real: tuple[str, int]):
    async def handler(body: dict[str, Any]) -> dict[str, Any]:
        raise KafkaError(
            "not the active controller", ErrorCode.NOT_CONTROLLER, leader_id=100, leader_address=f"{real[0]}:{real[1]}"
        )

    return handler


async def test_fetch_from_a_replica_sees_the_log_end_a_consumer_only_the_hw(tmp_path: Path) -> None:
    async with BrokerCluster(tmp_path) as cluster:
        cluster.create_topic("hw", assignments=[(1, 2, 3)])
        await cluster.rm(2).fetchers.pause()
        await cluster.rm(3).fetchers.pause()
        assert (
            part_of(await cluster.call(1, "/kafka/produce", produce("hw", b"uncommitted", acks=1)))["error_code"] == 0
        )
        epoch = cluster.partition("hw").leader_epoch
        consumer = part_of(await cluster.call(1, "/kafka/fetch", fetch("hw", 0, epoch=epoch)))
        assert consumer["records"] == b"" and consumer["high_watermark"] == 0
        body = fetch("hw", 0, replica_id=3, epoch=epoch)
        body["replica_epoch"] = cluster.brokers[3].epoch
        follower = part_of(await cluster.call_internal(1, REPLICA_FETCH_PATH, body))
        assert follower["error_code"] == 0 and follower["log_end_offset"] == 1 and follower["records"] != b""
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()
        await cluster.wait_for_replicas_caught_up("hw")


async def test_lowering_min_isr_below_the_isr_lets_the_hw_move_at_once(tmp_path: Path) -> None:
    """The config change goes from the metadata image through the replica manager to the leader's core."""
    async with BrokerCluster(tmp_path, replica_lag_time_max_ms=300) as cluster:
        cluster.create_topic("lower", assignments=[(1, 2, 3)], configs={"min_insync_replicas": 2})
        await cluster.settled()
        await cluster.rm(2).fetchers.pause()
        await cluster.rm(3).fetchers.pause()
        # A follower at the leader's log end stays in sync: the write leaves them behind.
        answer = part_of(await cluster.call(1, "/kafka/produce", produce("lower", b"alone", acks=1)))
        assert answer["error_code"] == ErrorCode.NONE
        await cluster.wait_for_isr("lower", 0, {1})
        assert cluster.hosted(1, "lower").log.high_watermark == 0
        resource = ConfigResource(ConfigResourceType.TOPIC, "lower")
        request = IncrementalAlterConfigsRequest(
            (AlterConfigsResource(resource, (AlterConfigOp("min_insync_replicas", value="1"),)),)
        )
        assert cluster.harness.send(request).response.results[0].error is None
        cluster.publish()
        assert cluster.hosted(1, "lower").log.high_watermark == 1  # applied with the image, no fetch needed
        cluster.rm(2).fetchers.resume()
        cluster.rm(3).fetchers.resume()
