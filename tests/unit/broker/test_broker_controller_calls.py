"""The broker's calls to the controller: AlterPartition wire format, NOT_CONTROLLER hints, producer-id blocks."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kraftpy.broker.replication import AlterPartitionRequest, BrokerState
from kraftpy.broker.shell.alter_partition_manager import _Item, decode_alter_partition_answer, encode_alter_partition
from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.broker.shell.producer_id_manager import ProducerIdManager
from kraftpy.metadata.controller import wire
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import parse_address


class FakeRpc:
    """Answers by address; records every call."""

    def __init__(self, answers: dict[tuple[str, int], Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, int], str, dict[str, Any]]] = []

    async def call(self, address, path, body, *, timeout_ms=None, raise_errors=True):
        self.calls.append((tuple(address), path, dict(body)))
        answer = self.answers[tuple(address)]
        if callable(answer):
            answer = answer(body)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_alter_partition_requests_decode_with_the_controllers_own_codec() -> None:
    topic_id = uuid.uuid4()
    hosted = SimpleNamespace(topic_id=topic_id, partition=2)
    request = AlterPartitionRequest(1, 4, 9, (BrokerState(1, -1), BrokerState(3, 17)))
    body = encode_alter_partition(1, 55, [_Item(hosted, request)])  # type: ignore[arg-type]
    decoded = wire.decode_request("alter_partition", body)
    assert (decoded.broker_id, decoded.broker_epoch) == (1, 55)
    item = decoded.partitions[0]
    assert (item.topic_id, item.partition, item.leader_epoch, item.new_isr, item.partition_epoch) == (
        topic_id,
        2,
        4,
        (1, 3),
        9,
    )


def test_alter_partition_answers_decode_and_malformed_items_count_as_unanswered() -> None:
    topic_id = uuid.uuid4()
    answer = {
        "topics": [
            {
                "topic_id": str(topic_id),
                "partitions": [
                    {
                        "partition": 0,
                        "error_code": 0,
                        "leader_id": 1,
                        "leader_epoch": 4,
                        "isr": [1, 3],
                        "partition_epoch": 10,
                    },
                    {
                        "partition": 1,
                        "error_code": 74,
                        "leader_id": -1,
                        "leader_epoch": -1,
                        "isr": [],
                        "partition_epoch": -1,
                    },
                    {"partition": "x"},
                ],
            },
            {"topic_id": "not-a-uuid", "partitions": [{"partition": 0}]},
        ]
    }
    decoded = decode_alter_partition_answer(answer)
    assert set(decoded) == {(topic_id, 0), (topic_id, 1)}
    assert decoded[(topic_id, 0)].isr == (1, 3) and decoded[(topic_id, 0)].partition_epoch == 10
    assert decoded[(topic_id, 1)].error == ErrorCode.FENCED_LEADER_EPOCH
    assert decode_alter_partition_answer({"topics": "nope"}) == {}


@pytest.mark.parametrize(("host", "hint_address"), [("127.0.0.1", "127.0.0.1:2"), ("::1", "[::1]:2")])
async def test_the_channel_follows_one_not_controller_hint(host: str, hint_address: str) -> None:
    """An IPv6 hint comes in brackets; the channel calls the host without them."""
    stale, real = (host, 1), (host, 2)
    hint = KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=2, leader_address=hint_address)
    rpc = FakeRpc({stale: hint, real: {"ok": True}})
    channel = ControllerChannel(rpc, lambda: stale, request_timeout_ms=100)  # type: ignore[arg-type]
    assert await channel.call("/controller/x", {}) == {"ok": True}
    assert [c[0] for c in rpc.calls] == [stale, real]


async def test_the_channel_without_a_usable_hint_raises() -> None:
    stale = ("127.0.0.1", 1)
    no_hint = ControllerChannel(
        FakeRpc({stale: KafkaError("not me", ErrorCode.NOT_CONTROLLER)}), lambda: stale, request_timeout_ms=100
    )  # type: ignore[arg-type]
    with pytest.raises(KafkaError):
        await no_hint.call("/controller/x", {})
    unknown = ControllerChannel(FakeRpc({}), lambda: None, request_timeout_ms=100)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as raised:
        await unknown.call("/controller/x", {})
    assert raised.value.code == ErrorCode.NOT_CONTROLLER
    assert parse_address("h:9") == ("h", 9) and parse_address("h") is None and parse_address(None) is None


async def test_producer_ids_come_from_blocks_prefetched_before_they_run_out() -> None:
    starts = iter([0, 1000, 2000])
    rpc = FakeRpc({("c", 1): lambda body: {"producer_id_start": next(starts), "producer_id_len": 10}})
    manager = ProducerIdManager(ControllerChannel(rpc, lambda: ("c", 1), request_timeout_ms=100), 1, lambda: 7)  # type: ignore[arg-type]
    ids = [await manager.generate(1000) for _ in range(10)]
    assert ids == list(range(10))
    await asyncio.sleep(0)  # the prefetch of the next block ran meanwhile
    assert await manager.generate(1000) == 1000
    assert rpc.calls[0][2] == {"broker_id": 1, "broker_epoch": 7}
    await manager.stop()


async def test_no_block_means_coordinator_load_in_progress() -> None:
    rpc = FakeRpc({("c", 1): KafkaError("down", ErrorCode.NOT_CONTROLLER)})
    manager = ProducerIdManager(ControllerChannel(rpc, lambda: ("c", 1), request_timeout_ms=100), 1, lambda: 7)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as raised:
        await manager.generate(200)
    assert raised.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await manager.stop()
