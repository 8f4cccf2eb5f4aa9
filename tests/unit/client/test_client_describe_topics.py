"""describe_topics: DescribeTopicPartitions paged by its cursor (bounded), else Metadata; ELR in the result.

The paging and the choice of source are pure (client/admin/describe_topics.py); the AdminClient is
then run against brokers with the real Kafka listener, dispatcher and DescribeTopicPartitions handler
(scripted_broker.py), one of which stops advertising key 75 as a broker before Kafka 3.8 does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kraftpy.client.admin import describe_topics as describe
from kraftpy.client.admin.types import PartitionDescription
from kraftpy.client.shell.admin import AdminClient
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import DESCRIBE_TOPIC_PARTITIONS, METADATA
from tests.unit.client.scripted_broker import scripted_brokers
from tests.unit.client.test_client_fixtures import fresh_metadata


def part(index: int, *, leader: int = 1, isr: list[int] | None = None, elr: list[int] | None = None) -> dict:
    return {
        "error_code": 0,
        "partition": index,
        "leader_id": leader,
        "leader_epoch": 2,
        "replica_nodes": [1, 2, 3],
        "isr_nodes": [1, 2, 3] if isr is None else isr,
        "elr": elr or [],
        "last_known_elr": [],
    }


def page(topics: list[tuple[str, list[dict]]], cursor: tuple[str, int] | None) -> dict[str, Any]:
    return {
        "error_code": 0,
        "topics": [{"error_code": 0, "name": n, "topic_id": f"id-{n}", "partitions": ps} for n, ps in topics],
        "next_cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }


# The choice of source -----------------------------------------------------------------------------


def test_the_api_is_used_only_when_the_broker_advertises_it() -> None:
    assert describe.uses_describe_topic_partitions({METADATA: 12, DESCRIBE_TOPIC_PARTITIONS: 0})
    # Kafka before 3.8: no key 75 in its ApiVersions answer.
    assert not describe.uses_describe_topic_partitions({METADATA: 12})


def test_metadata_gives_no_elr_and_a_missing_topic_raises_naming_it() -> None:
    cluster = fresh_metadata({("a", 0): (1, 3), ("a", 1): (2, 4)}).cluster
    described = describe.from_metadata(cluster, ["a"])["a"]
    assert described.topic_id == "id-a"
    assert described.partitions[1] == PartitionDescription(1, 2, 4, (1, 2, 3), (1, 2, 3), elr=(), last_known_elr=())
    with pytest.raises(KafkaError) as info:
        describe.from_metadata(cluster, ["a", "nope"])
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "'nope'" in info.value.message


# Paging -------------------------------------------------------------------------------------------


def test_pages_follow_the_cursor_and_gather_a_topic_split_between_them() -> None:
    paging = describe.TopicPartitionsPaging(["b", "a", "b"], page_limit=2)
    assert paging.request() == {"topics": ["b", "a"], "response_partition_limit": 2, "cursor": None}
    paging.on_answer(page([("a", [part(0), part(1)])], ("b", 0)))
    assert not paging.done
    assert paging.request()["cursor"] == {"topic_name": "b", "partition_index": 0}
    paging.on_answer(page([("b", [part(0), part(1, leader=-1, isr=[], elr=[3])])], ("b", 2)))
    assert paging.request()["cursor"] == {"topic_name": "b", "partition_index": 2}
    paging.on_answer(page([("b", [part(2)])], None))
    assert paging.done and paging.pages == 3
    described = paging.descriptions()
    assert list(described) == ["b", "a"]  # the order asked, duplicates dropped
    assert [p.partition for p in described["b"].partitions] == [0, 1, 2]
    leaderless = described["b"].partitions[1]
    assert (leaderless.leader, leaderless.isr, leaderless.elr) == (None, (), (3,))
    assert described["a"].topic_id == "id-a"


def test_a_broker_that_keeps_answering_a_cursor_is_stopped_after_max_pages() -> None:
    paging = describe.TopicPartitionsPaging(["a"], page_limit=1, max_pages=3)
    paging.on_answer(page([("a", [part(0)])], ("a", 1)))
    paging.on_answer(page([("a", [part(1)])], ("a", 2)))
    with pytest.raises(KafkaError) as info:
        paging.on_answer(page([("a", [part(2)])], ("a", 3)))  # each cursor moves on, but there is no end
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE and "after 3 pages" in info.value.message
    assert not paging.done


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a", 1), ("a", 1)), (("b", 0), ("a", 5))],
    ids=["same-cursor-again", "cursor-goes-back"],
)
def test_a_cursor_that_does_not_move_forward_ends_the_paging(first: tuple, second: tuple) -> None:
    paging = describe.TopicPartitionsPaging(["a", "b"])
    paging.on_answer(page([("a", [part(0)])], first))
    with pytest.raises(KafkaError) as info:
        paging.on_answer(page([], second))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE and "does not move past" in info.value.message


def test_a_cursor_outside_the_topics_asked_for_is_refused() -> None:
    paging = describe.TopicPartitionsPaging(["a"])
    with pytest.raises(KafkaError) as info:
        paging.on_answer(page([("a", [part(0)])], ("zzz", 0)))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_an_unknown_topic_raises_as_the_metadata_path_does() -> None:
    paging = describe.TopicPartitionsPaging(["a", "nope"])
    answer = page([("a", [part(0)])], None)
    answer["topics"].append({"error_code": 3, "message": "UNKNOWN_TOPIC_OR_PARTITION", "name": "nope"})
    paging.on_answer(answer)
    with pytest.raises(KafkaError) as info:
        paging.descriptions()
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert info.value.message == "topic 'nope' does not exist or has no partitions"


# The AdminClient over real listeners ---------------------------------------------------------------


async def test_describe_topics_pages_describe_topic_partitions_from_a_broker_that_serves_it(monkeypatch) -> None:
    monkeypatch.setattr(describe, "PAGE_PARTITION_LIMIT", 2)
    async with scripted_brokers(1, topics={"a": 3, "b": 2}) as (broker,):
        apis = broker.listener.apis
        async with AdminClient([broker.address], default_api_timeout_ms=5_000) as admin:
            described = await admin.describe_topics(["a", "b"])
            with pytest.raises(KafkaError) as info:
                await admin.describe_topics(["nope"])
    assert [len(described[n].partitions) for n in ("a", "b")] == [3, 2]
    assert all(p.leader == 1 and p.elr == () and p.last_known_elr == () for p in described["a"].partitions)
    # 5 partitions, pages of 2: three pages for the two topics, one for the unknown one.
    assert apis.requests_by_api[DESCRIBE_TOPIC_PARTITIONS] == 4
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_describe_topics_falls_back_to_metadata_when_the_broker_does_not_advertise_the_api() -> None:
    async with scripted_brokers(1, topics={"a": 3}) as (broker,):
        apis = broker.listener.apis
        # A broker before Kafka 3.8: no handler, so ApiVersions does not list key 75.
        del apis.handlers[DESCRIBE_TOPIC_PARTITIONS]
        apis.served = apis.served - {DESCRIBE_TOPIC_PARTITIONS}
        async with AdminClient([broker.address], default_api_timeout_ms=5_000) as admin:
            described = await admin.describe_topics(["a"])
    assert [p.partition for p in described["a"].partitions] == [0, 1, 2]
    assert all(p.elr == () and p.last_known_elr == () for p in described["a"].partitions)
    assert DESCRIBE_TOPIC_PARTITIONS not in apis.requests_by_api
    assert apis.requests_by_api[METADATA] >= 1


async def test_a_broker_looping_on_one_cursor_fails_the_call_at_once(monkeypatch) -> None:
    monkeypatch.setattr(describe, "PAGE_PARTITION_LIMIT", 1)
    async with scripted_brokers(1, topics={"a": 3}) as (broker,):
        apis = broker.listener.apis
        served = apis.handlers[DESCRIBE_TOPIC_PARTITIONS]

        async def stuck(apis_: Any, ctx: Any, request: Any) -> Any:
            answer = await served.handle(apis_, ctx, request)
            answer.next_cursor = type(answer).Cursor(topic_name="a", partition_index=1)  # always the same
            return answer

        apis.handlers[DESCRIBE_TOPIC_PARTITIONS] = dataclasses.replace(served, handle=stuck)
        async with AdminClient([broker.address], default_api_timeout_ms=5_000) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.describe_topics(["a"])
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE and "does not move past" in info.value.message
    assert apis.requests_by_api[DESCRIBE_TOPIC_PARTITIONS] == 2
