"""The broker's group shell, its pure parts: FindCoordinator answers, the creation of __consumer_offsets
against the real controller decisions, reading an offsets partition from a real log, settings."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kraftpy.broker.api.find_coordinator import FindCoordinatorHandler, find_coordinator
from kraftpy.broker.groups import Append, GroupCoordinator, GroupCoordinatorConfig, partition_for
from kraftpy.broker.groups.shell.partition_loader import read_records
from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.broker.shell.offsets_topic import OffsetsTopicCreator, creation_request
from kraftpy.metadata.controller import wire
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.node.config import build_config
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records import CompressionType, build_batch
from kraftpy.protocol.topics import OFFSETS_TOPIC, is_internal
from kraftpy.storage import PartitionLog
from tests.unit.protocol.test_records_validation import GARBAGE, forge

SETTINGS = GroupShellSettings()


def cluster(brokers: int = 3) -> ControllerHarness:
    h = ControllerHarness()
    h.start_brokers(range(1, brokers + 1))
    return h


def controller_call(h: ControllerHarness):
    """The controller's decisions behind its wire codec, as /controller/create_topics serves them."""

    async def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
        route = path.rsplit("/", 1)[-1]
        return wire.encode_response(route, h.send(wire.decode_request(route, body)).response)

    return call


def test_find_coordinator_before_the_topic_exists_is_coordinator_not_available() -> None:
    with pytest.raises(KafkaError) as info:
        find_coordinator(cluster().committed, "g", 50)
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "being created" in info.value.message


def test_two_brokers_racing_to_create_the_topic_create_it_once() -> None:
    h = cluster()

    async def race() -> tuple[OffsetsTopicCreator, OffsetsTopicCreator]:
        a = OffsetsTopicCreator(controller_call(h), lambda: h.committed, SETTINGS)
        b = OffsetsTopicCreator(controller_call(h), lambda: h.committed, SETTINGS)
        for _ in range(3):  # repeated FindCoordinators while one creation runs start no other
            a.ensure_created()
            b.ensure_created()
        await asyncio.gather(a._task, b._task)  # type: ignore[arg-type]
        return a, b

    a, b = asyncio.run(race())
    assert (a.attempts, b.attempts) == (1, 1)
    topics = [name for name in h.committed.topics.by_name if name == OFFSETS_TOPIC]
    assert topics == [OFFSETS_TOPIC]
    topic = h.committed.topic(OFFSETS_TOPIC)
    assert len(topic.partitions) == 50 and topic.replication_factor == 3
    overrides = h.committed.topic_config_overrides(OFFSETS_TOPIC)
    assert overrides == {"cleanup_policy": "compact", "segment_bytes": 104_857_600}
    second = h.send(wire.decode_request("create_topics", creation_request(h.committed, SETTINGS)))
    assert second.response.results[0].error.code == ErrorCode.TOPIC_ALREADY_EXISTS  # what a loser of the race sees


def test_the_replication_factor_is_capped_by_the_live_brokers() -> None:
    assert creation_request(cluster(2).committed, SETTINGS)["topics"][0]["replication_factor"] == 2
    small = dataclasses.replace(SETTINGS, offsets_topic_replication_factor=1)
    assert creation_request(cluster(3).committed, small)["topics"][0]["replication_factor"] == 1
    assert creation_request(cluster(0).committed, SETTINGS)["topics"][0]["replication_factor"] == 1


def test_find_coordinator_answers_the_leader_of_the_groups_partition() -> None:
    h = cluster()
    h.send(wire.decode_request("create_topics", creation_request(h.committed, SETTINGS)))
    image = h.committed
    for group in ("orders", "billing", "", "ünïcode"):
        partition = partition_for(group, 50)
        leader = image.topic(OFFSETS_TOPIC).partitions[partition].leader
        answer = find_coordinator(image, group, 50)
        assert answer == {"error_code": 0, "node_id": leader, "host": "127.0.0.1", "port": 9092 + leader}
    # A broker configured with more partitions than the topic has cannot map every group.
    with pytest.raises(KafkaError) as info:
        find_coordinator(image, "g-of-a-high-partition", 10_000)
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "must match" in info.value.message


def test_a_partition_without_a_leader_is_coordinator_not_available() -> None:
    h = cluster(1)
    h.send(wire.decode_request("create_topics", creation_request(h.committed, SETTINGS)))
    h.now_ms += 10 * h.config.broker_session_timeout_ms
    h.tick()  # the only broker's session lapses: fenced, every partition leaderless
    assert h.committed.topic(OFFSETS_TOPIC).partitions[partition_for("g", 50)].leader == -1
    with pytest.raises(KafkaError) as info:
        find_coordinator(h.committed, "g", 50)
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "no leader" in info.value.message


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"key": "g", "key_type": 1}, "key_type"),  # a handler without a transaction coordinator
        ({"key": "g", "key_type": 2}, "key_type must be 0"),
        ({"key_type": 0}, "'key'"),
        ({"key": 3}, "'key'"),
        ({"key": "g" * 2000}, "'key'"),
    ],
)
def test_malformed_find_coordinator_is_invalid_request(body: dict[str, Any], words: str) -> None:
    h = cluster()
    creator = OffsetsTopicCreator(controller_call(h), lambda: h.committed, SETTINGS)
    handler = FindCoordinatorHandler(lambda: h.committed, creator, 50, 1024)
    with pytest.raises(KafkaError) as info:
        asyncio.run(handler(body))
    assert info.value.code == ErrorCode.INVALID_REQUEST and words in info.value.message
    assert creator.attempts == 0 and h.committed.topic(OFFSETS_TOPIC) is None  # nothing was started


def test_internal_topics_are_kafkas() -> None:
    assert is_internal(OFFSETS_TOPIC) and is_internal("__transaction_state")
    assert not is_internal("__my_topic") and not is_internal("orders")


# --- loading: a real log -------------------------------------------------------------------------


def commits_of(coordinator: GroupCoordinator, group: str, offsets: dict[int, int], now: int) -> list[Append]:
    partitions = [{"partition_index": p, "committed_offset": o} for p, o in offsets.items()]
    body = {
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "topics": [{"name": "t", "partitions": partitions}],
    }
    return [a for a in coordinator.handle(("commit", group, now), "offset_commit", body, now) if isinstance(a, Append)]


def fetch(coordinator: GroupCoordinator, group: str) -> dict[int, int]:
    actions = coordinator.handle("fetch", "offset_fetch", {"group_id": group, "topics": None}, 0)
    (body,) = [a.body for a in actions]
    return {p["partition_index"]: p["committed_offset"] for t in body["topics"] for p in t["partitions"]}


def test_a_partition_read_from_its_log_rebuilds_the_groups(tmp_path: Path) -> None:
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=0)
    writer = GroupCoordinator(config)
    writer.complete_loading(0, [], 0)
    plog = PartitionLog.open(tmp_path / f"{OFFSETS_TOPIC}-0")
    try:
        for now, (group, offsets) in enumerate([("a", {0: 1, 1: 2}), ("b", {0: 5}), ("a", {0: 9})], start=1):
            for append in commits_of(writer, group, offsets, now):
                plog.append_as_leader(build_batch(append.records), 0, now_ms=now)
                writer.append_completed(append.append_id, ErrorCode.NONE, now)
        high_watermark = plog.log_end_offset
        plog.append_as_leader(build_batch([(b"not", b"committed")]), 0, now_ms=9)  # above the HW: not read

        records = read_records(plog, high_watermark, buffer_bytes=64)  # a small buffer: many reads
        reader = GroupCoordinator(config)
        reader.begin_loading(0)
        reader.complete_loading(0, records, 10)
        assert fetch(reader, "a") == {0: 9, 1: 2} and fetch(reader, "b") == {0: 5}
        assert fetch(reader, "a") == fetch(writer, "a")

    finally:
        plog.close()


def test_records_the_coordinator_cannot_use_are_skipped_and_the_load_completes(tmp_path: Path, caplog) -> None:
    """Records written before produce refused them (or by a lying disk) never block a load."""
    config = GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=0)
    writer = GroupCoordinator(config)
    writer.complete_loading(0, [], 0)
    plog = PartitionLog.open(tmp_path / f"{OFFSETS_TOPIC}-0")
    try:

        def commit(group: str, offsets: dict[int, int], now: int) -> None:
            for append in commits_of(writer, group, offsets, now):
                plog.append_as_leader(build_batch(append.records), 0, now_ms=now)
                writer.append_completed(append.append_id, ErrorCode.NONE, now)

        commit("a", {0: 1}, 1)
        plog.append_as_leader(build_batch([(None, b"keyless")]), 0, now_ms=2)
        plog.append_as_leader(build_batch([(b"\xff\xfe not cbor", b"value")]), 0, now_ms=3)
        plog.append_as_leader(build_batch([(b"\x82\x07\x61a", b"")]), 0, now_ms=4)  # [7, "a"]: unknown key version
        garbage = forge(build_batch([(b"k", b"v")]), section=GARBAGE[CompressionType.ZSTD], attributes=4)
        plog.append_as_leader(garbage, 0, now_ms=5)  # a valid CRC around records that do not decode
        commit("a", {0: 9, 1: 4}, 6)
        commit("b", {0: 5}, 7)

        records = read_records(plog, plog.log_end_offset, buffer_bytes=64)
        reader = GroupCoordinator(config)
        reader.begin_loading(0)
        reader.complete_loading(0, records, 10)
        assert reader.partition_status(0).value == "active"
        assert fetch(reader, "a") == {0: 9, 1: 4} and fetch(reader, "b") == {0: 5}
        assert "without a key at offset 1" in caplog.text and "do not decode" in caplog.text
        assert "does not parse" in caplog.text
    finally:
        plog.close()


# --- settings -------------------------------------------------------------------------------------


def node(**values: Any):
    return build_config({"node_id": 1, "controller_quorum_voters": "1@127.0.0.1:9092", "data_dir": "/tmp/x", **values})


def test_group_settings_come_from_the_node_config_with_kafkas_defaults() -> None:
    defaults = GroupShellSettings.from_node_config(node())
    assert defaults == GroupShellSettings()
    assert defaults.coordinator.group_initial_rebalance_delay_ms == 3000
    assert defaults.coordinator.offsets_topic_num_partitions == 50 and defaults.offsets_topic_replication_factor == 3
    tuned = GroupShellSettings.from_node_config(
        node(**{"group.initial.rebalance.delay.ms": 0, "offsets_topic_num_partitions": 4, "group_max_size": 10})
    )
    assert tuned.coordinator.group_initial_rebalance_delay_ms == 0
    assert tuned.coordinator.offsets_topic_num_partitions == 4 and tuned.coordinator.group_max_size == 10


@pytest.mark.parametrize(
    "bad",
    [
        {"group_min_session_timeout_ms": 7000, "group_max_session_timeout_ms": 6000},
        {"offsets_topic_num_partitions": 0},
        {"offsets_topic_replication_factor": 0},
        {"group_max_size": 0},
        {"offsets_retention_minutes": 0},
        {"offsets_topic_segment_bytes": 10},
        {"offsets_commit_timeout_ms": 0},
        {"group_initial_rebalance_delay_ms": -1},
        {"offset_metadata_max_bytes": "big"},
    ],
)
def test_bad_group_settings_are_invalid_config(bad: dict[str, Any]) -> None:
    with pytest.raises(KafkaError) as info:
        node(**bad)
    assert info.value.code == ErrorCode.INVALID_CONFIG and next(iter(bad)).split("_")[0] in info.value.message
