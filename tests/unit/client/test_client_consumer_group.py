"""The consumer's group plumbing without a broker: SubscriptionState as the group's AssignmentStore, the
fetcher holding back partitions pending revocation, and the Consumer/SyncConsumer group API's misuse errors.

Rebalances against a real coordinator are in tests/unit/test_group_membership_*.py (the core) and
tests/integration/test_groups_consumer*.py (this shell, on a real cluster).
"""

from __future__ import annotations

import re

import pytest

from kraftpy.client import ConsumerRebalanceListener, OffsetAndMetadata
from kraftpy.client.consumer.subscription import FetchPosition, OffsetResetStrategy, SubscriptionState
from kraftpy.client.errors import IllegalStateError, KafkaTimeoutError
from kraftpy.client.group.errors import InvalidGroupIdError
from kraftpy.client.shell.consumer import Consumer
from kraftpy.client.shell.sync import SyncConsumer
from kraftpy.protocol.types import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_assign_and_subscribe_are_mutually_exclusive() -> None:
    subs = SubscriptionState(OffsetResetStrategy.EARLIEST)
    subs.subscribe(["t"])
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subs.assign_from_user([T0])
    subs.unsubscribe()
    subs.assign_from_user([T0])
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        subs.subscribe(pattern="t.*")
    subs.assign_from_user([])  # no partitions: free to subscribe again
    assert isinstance(subs.subscribe(pattern="t.*"), re.Pattern)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "either topics or pattern"),
        ((["t"],), {"pattern": "t"}, "either topics or pattern"),
        (("t",), {}, "a list of topics, not one string"),
        (([],), {}, "at least one topic"),
        ((["t", ""],), {}, "non-empty strings"),
        ((), {"pattern": "orders-("}, "invalid subscription pattern"),
    ],
)
def test_bad_subscriptions_are_refused(args: tuple, kwargs: dict, message: str) -> None:
    subs = SubscriptionState()
    with pytest.raises(ValueError, match=message):
        subs.subscribe(*args, **kwargs)
    assert not subs.is_subscribed


def test_assignment_store_keeps_positions_and_commits_only_fetching_partitions() -> None:
    subs = SubscriptionState()
    with pytest.raises(IllegalStateError, match="needs a subscription"):
        subs.assign_from_subscribed([T0])
    subs.subscribe(["t"])
    subs.assign_from_subscribed([T0, T1])
    subs.seek_unvalidated(T0, FetchPosition(7, 3))
    subs.request_offset_reset(T1)
    assert subs.all_consumed() == {T0: OffsetAndMetadata(7, "", 3)}, "a partition awaiting a reset has nothing"
    subs.assign_from_subscribed([T0, T2])
    assert subs.assigned_partitions() == {T0, T2}
    assert subs.position(T0) == FetchPosition(7, 3), "a kept partition keeps its position"
    assert subs.initializing_partitions() == [T2]


def test_pending_revocation_stops_fetching_but_still_commits() -> None:
    subs = SubscriptionState()
    subs.subscribe(["t"])
    subs.assign_from_subscribed([T0, T1])
    subs.seek(T0, 4)
    subs.seek(T1, 9)
    subs.mark_pending_revocation([T0, TopicPartition("other", 0)])
    assert subs.fetchable_partitions() == [T1]
    assert not subs.is_fetchable(T0) and subs.is_fetchable(T1)
    assert subs.all_consumed() == {T0: OffsetAndMetadata(4), T1: OffsetAndMetadata(9)}


def test_reset_of_chosen_initializing_partitions_only() -> None:
    subs = SubscriptionState(OffsetResetStrategy.NONE)
    subs.subscribe(["t"])
    subs.assign_from_subscribed([T0, T1])
    assert subs.reset_initializing_positions([T1]) == [T1], "policy none: stuck, and only the one asked for"
    subs.default_reset = OffsetResetStrategy.LATEST
    assert subs.reset_initializing_positions([T1]) == []
    assert subs.initializing_partitions() == [T0]


async def test_group_apis_need_a_group_id(closed_port: str) -> None:
    async with Consumer(closed_port) as consumer:
        with pytest.raises(InvalidGroupIdError, match="valid group_id") as info:
            consumer.subscribe(["t"])
        assert info.value.code.name == "INVALID_GROUP_ID"
        with pytest.raises(InvalidGroupIdError):
            await consumer.commit()
        with pytest.raises(InvalidGroupIdError):
            consumer.commit_async()
        with pytest.raises(InvalidGroupIdError):
            await consumer.committed([T0])
        assert consumer.subscription() == set()


async def test_group_consumer_without_a_coordinator_times_out_clearly(closed_port: str) -> None:
    consumer = Consumer(closed_port, group_id="g", retry_backoff_ms=10)
    try:
        with pytest.raises(IllegalStateError, match="not subscribed"):
            await consumer.poll(0)
        consumer.subscribe(["t"], listener=ConsumerRebalanceListener())
        assert consumer.subscription() == {"t"}
        with pytest.raises(IllegalStateError, match="mutually exclusive"):
            consumer.assign([T0])
        assert await consumer.poll(50) == [], "no coordinator yet: an empty poll, not an error"
        assert consumer.assignment() == set()
        with pytest.raises(KafkaTimeoutError, match="lookup of committed offsets"):
            await consumer.committed([T0], timeout_ms=100)
        with pytest.raises(KafkaTimeoutError):
            await consumer.commit({T0: 5}, timeout_ms=100)
    finally:
        await consumer.close(timeout_ms=200)
    await consumer.close()  # twice is fine


def test_sync_consumer_has_the_group_methods(closed_port: str) -> None:
    with SyncConsumer(closed_port, group_id="g", retry_backoff_ms=10) as consumer:
        consumer.subscribe(pattern=r"t-.*")
        assert consumer.subscription() == set(), "nothing known matches yet"
        assert consumer.poll(20) == []
        with pytest.raises(KafkaTimeoutError):
            consumer.committed([T0], timeout_ms=100)
        consumer.commit_async({T0: OffsetAndMetadata(1)})
        consumer.unsubscribe()
        assert consumer.subscription() == set()
        consumer.assign([T0])
        assert consumer.assignment() == {T0}


async def test_a_waiting_poll_waits_instead_of_spinning(closed_port: str) -> None:
    """A poll() with nothing to do must sleep until something happens; counting its passes catches a busy loop
    (thousands of passes) without timing anything."""
    consumer = Consumer(closed_port, group_id="g")
    passes = 0
    try:
        consumer.subscribe(["t"])
        assert consumer._group is not None
        shell_poll = consumer._group.app_poll

        async def counted() -> None:
            nonlocal passes
            passes += 1
            await shell_poll()

        consumer._group.app_poll = counted  # type: ignore[method-assign]
        assert await consumer.poll(300) == []
    finally:
        await consumer.close(timeout_ms=100)
    assert 1 <= passes < 100, f"poll() went round {passes} times in 300 ms"


async def test_unsubscribe_before_start_forgets_the_subscription_everywhere(closed_port: str) -> None:
    consumer = Consumer(closed_port, group_id="g")
    consumer.subscribe(["t"])
    await consumer.unsubscribe()
    assert consumer._group is not None and not consumer._group.core.subscription.active
    consumer.assign([T0])  # now a manual assignment, which the group core does not join for
    consumer.seek(T0, 3)
    try:
        assert await consumer.poll(20) == []
        assert consumer.assignment() == {T0} and consumer.subscription() == set()
    finally:
        await consumer.close(timeout_ms=100)
