"""MetadataImage and MetadataDelta: replay rules, structural sharing, derived indexes, snapshots."""

from __future__ import annotations

import random
import uuid

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.image.metadata_delta import MetadataDelta, apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage, PartitionRegistration
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    Listener,
    MetadataRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    record_from_list,
    record_to_list,
)

TOPIC = int(ConfigResourceType.TOPIC)
BROKER = int(ConfigResourceType.BROKER)


def register(b: int, epoch: int, rack: str | None = None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(b, f"inc-{b}-{epoch}", epoch, (Listener("PLAINTEXT", "h", 9000 + b),), rack)


def brokers_image(n: int = 3) -> MetadataImage:
    records: list[MetadataRecord] = [register(b, b + 1) for b in range(n)]
    records += [UnfenceBrokerRecord(b, b + 1) for b in range(n)]
    return apply_records(MetadataImage.EMPTY, records, offset=len(records) - 1)


def topic_records(name: str, topic_id: uuid.UUID, assignments: list[tuple[int, ...]]) -> list[MetadataRecord]:
    out: list[MetadataRecord] = [TopicRecord(name, topic_id)]
    out += [PartitionRecord(topic_id, p, r, r, r[0]) for p, r in enumerate(assignments)]
    return out


T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def test_broker_lifecycle() -> None:
    image = apply_records(MetadataImage.EMPTY, [register(1, 5, "r1")], offset=10)
    b = image.broker(1)
    assert b is not None and b.fenced and not b.in_controlled_shutdown and b.registration_offset == 10
    assert image.cluster.next_broker_epoch == 6 and image.offset == 10
    image = apply_records(image, [UnfenceBrokerRecord(1, 5)])
    assert image.is_usable(1) and image.offset == 10  # uncommitted records keep the offset
    image = apply_records(image, [BrokerRegistrationChangeRecord(1, 5, in_controlled_shutdown=True)])
    assert not image.is_usable(1) and not image.broker(1).fenced
    image = apply_records(image, [FenceBrokerRecord(1, 5)])
    assert image.broker(1).fenced and image.cluster.usable_brokers() == []
    image = apply_records(image, [UnregisterBrokerRecord(1, 5)])
    assert image.broker(1) is None and image.cluster.next_broker_epoch == 6


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([FenceBrokerRecord(1, 1)], "not registered"),
        ([register(1, 1), UnfenceBrokerRecord(1, 2)], "epoch 2, but its epoch is 1"),
        ([TopicRecord("a", T1), TopicRecord("a", T2)], "already exists"),
        ([TopicRecord("a", T1), TopicRecord("b", T1)], "reuses topic id"),
        ([PartitionRecord(T1, 0, (1,), (1,), 1)], "unknown topic id"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 1, (1,), (1,), 1)], "gap"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 1), (1,), 1)], "distinct"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (), (), -1)], "non-empty"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (3,), 3)], "subset"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (), 1)], "not in isr"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (1,), 1, elr=(1,))], "outside isr"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (1,), 1, elr=(3,))], "elr \\[3\\] must be"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (1,), 1, elr=(2, 2))], "distinct replicas"),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (), -1, last_known_elr=(3,))], "last_known_elr"),
        (
            [TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (1,), 1), PartitionChangeRecord(T1, 0, elr=(1,))],
            "outside isr",
        ),
        ([TopicRecord("a", T1), PartitionRecord(T1, 0, (1, 2), (1,), 2)], "not in isr"),
        ([TopicRecord("a", T1), PartitionChangeRecord(T1, 0, leader=1)], "unknown partition"),
        ([RemoveTopicRecord(T1)], "unknown topic id"),
        ([ProducerIdsRecord(1, 1, 0)], "backwards"),
    ],
)
def test_replay_rejects_records_that_break_the_rules(records, message) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        apply_records(MetadataImage.EMPTY, records)


def test_a_change_to_a_partition_past_an_existing_topics_end_is_refused() -> None:
    """The partition one past the end of a topic already in the image: a corrupt log or a controller
    bug, refused as a record error (a mutant read past the base image's partitions instead)."""
    image = apply_records(brokers_image(), topic_records("a", T1, [(0, 1)]))
    with pytest.raises(MetadataRecordError, match="unknown partition"):
        apply_records(image, [PartitionChangeRecord(T1, 1, leader=1)])
    assert apply_records(image, [PartitionChangeRecord(T1, 0, leader=1)]).topic("a").partitions[0].leader == 1


def test_a_new_replica_set_moves_the_partition_between_brokers_replica_indexes() -> None:
    """partitions_on_broker (what each broker hosts) follows a replica set change (a PartitionRecord
    replacing a partition's registration, as replay allows): the broker left out no longer lists
    the partition, the new one does."""
    image = apply_records(brokers_image(), topic_records("a", T1, [(0, 1), (0, 1)]))
    image = apply_records(image, [PartitionRecord(T1, 1, (1, 2), (1, 2), 1)])  # a new registration replaces it

    def hosted(broker: int) -> list[int]:
        return sorted(p for _, p, _ in image.partitions_on_broker(broker))

    assert (hosted(0), hosted(1), hosted(2)) == ([0], [0, 1], [1])


def test_a_topic_record_alone_makes_a_topic_without_partitions() -> None:
    """Kafka's TopicsDelta: a TopicRecord whose partitions come in a later delta is in the image
    meanwhile, so those PartitionRecords find it."""
    image = apply_records(brokers_image(), [TopicRecord("a", T1)])
    assert image.topic("a") is not None and len(image.topic("a").partitions) == 0
    image = apply_records(image, [PartitionRecord(T1, 0, (0, 1), (0, 1), 0)])
    assert image.topic("a").partitions[0].replicas == (0, 1)


def test_eligible_leader_replicas_replay_and_survive_a_snapshot() -> None:
    """KIP-966's fields: an empty ISR without a leader, ELR and the last known leader, through a
    PartitionChange and a snapshot; partitions that do not use them keep their old encodings."""
    image = apply_records(
        MetadataImage.EMPTY,
        [
            TopicRecord("a", T1),
            PartitionRecord(T1, 0, (1, 2, 3), (1, 2, 3), 1),
            PartitionRecord(T1, 1, (1, 2, 3), (3,), 3, elr=(1,)),
            PartitionChangeRecord(T1, 1, leader=-1, isr=(), elr=(1, 3), last_known_elr=(3,)),
        ],
        offset=5,
    )
    part = image.partition(T1, 1)
    assert (part.isr, part.leader, part.elr, part.last_known_elr) == ((), -1, (1, 3), (3,))
    assert part.leader_epoch == 1 and part.partition_epoch == 1
    assert MetadataImage.decode(image.encode()) == image
    untouched = apply_records(MetadataImage.EMPTY, [TopicRecord("a", T1), PartitionRecord(T1, 0, (1,), (1,), 1)])
    assert [len(row) for row in cbor2.loads(untouched.encode())["topics"][0][2]] == [5]  # ELR-free row as before
    assert [len(row) for row in cbor2.loads(image.encode())["topics"][0][2]] == [5, 7]
    assert record_to_list(PartitionRecord(T1, 0, (1,), (1,), 1))[:2] == [3, 1]
    assert record_to_list(PartitionRecord(T1, 0, (1, 2), (1,), 1, elr=(2,)))[:2] == [3, 2]
    assert record_to_list(PartitionChangeRecord(T1, 0, isr=(1,)))[:2] == [5, 1]
    assert record_to_list(PartitionChangeRecord(T1, 0, elr=()))[:2] == [5, 2]  # clearing the ELR is a change


def test_a_version_1_partition_record_still_decodes() -> None:
    """Logs written before KIP-966's fields hold version-1 records: they decode with empty ELRs."""
    v1 = [3, 1, T1.bytes, 0, [1, 2], [1], 1, 4, 6]
    assert record_from_list(v1) == PartitionRecord(T1, 0, (1, 2), (1,), 1, 4, 6)
    change_v1 = [5, 1, T1.bytes, 0, None, [1]]
    assert record_from_list(change_v1) == PartitionChangeRecord(T1, 0, isr=(1,))
    with pytest.raises(MetadataRecordError, match="has 7 fields, got 9"):
        record_from_list([3, 1, T1.bytes, 0, [1, 2], [1], 1, 4, 6, [], []])


def test_partition_change_bumps_epochs_as_kraft_does() -> None:
    image = apply_records(brokers_image(), topic_records("a", T1, [(0, 1, 2)]))
    image = apply_records(image, [PartitionChangeRecord(T1, 0, isr=(0, 1))])
    assert image.partition(T1, 0) == PartitionRegistration((0, 1, 2), (0, 1), 0, 0, 1)
    image = apply_records(image, [PartitionChangeRecord(T1, 0, leader=1)])
    assert image.partition(T1, 0) == PartitionRegistration((0, 1, 2), (0, 1), 1, 1, 2)
    image = apply_records(image, [PartitionChangeRecord(T1, 0, leader=-1, isr=(1,))])
    assert image.partition(T1, 0) == PartitionRegistration((0, 1, 2), (1,), -1, 2, 3)
    assert image.partition(T1, 1) is None and image.partition(T2, 0) is None


def test_remove_topic_drops_partitions_configs_and_index_entries() -> None:
    image = apply_records(brokers_image(), topic_records("a.b", T1, [(0, 1), (1, 2)]))
    image = apply_records(image, [ConfigRecord(TOPIC, "a.b", "retention_ms", 5)])
    assert image.topic_config_overrides("a.b") == {"retention_ms": 5}
    assert image.topics.colliding_names("a_b") == ["a.b"]
    assert sorted((t.name, p) for t, p, _ in image.partitions_on_broker(1)) == [("a.b", 0), ("a.b", 1)]
    image = apply_records(image, [RemoveTopicRecord(T1)])
    assert image.topic("a.b") is None and image.topic_by_id(T1) is None
    assert image.topic_config_overrides("a.b") == {}
    assert image.topics.colliding_names("a_b") == []
    assert list(image.partitions_on_broker(1)) == []
    assert image.topics.replicas_by_broker == {}


def test_topic_recreated_in_one_delta_gets_fresh_configs() -> None:
    image = apply_records(
        brokers_image(), [*topic_records("a", T1, [(0,)]), ConfigRecord(TOPIC, "a", "retention_ms", 5)]
    )
    image = apply_records(image, [RemoveTopicRecord(T1), *topic_records("a", T2, [(1,)])])
    assert image.topic("a").topic_id == T2 and image.topic_config_overrides("a") == {}
    assert [p for _, p, _ in image.partitions_on_broker(0)] == []


def test_config_set_and_delete() -> None:
    image = apply_records(
        MetadataImage.EMPTY, [ConfigRecord(BROKER, "", "retention_ms", 7), ConfigRecord(BROKER, "", "segment_ms", 9)]
    )
    assert image.broker_config_overrides("") == {"retention_ms": 7, "segment_ms": 9}
    image = apply_records(image, [ConfigRecord(BROKER, "", "retention_ms", None)])
    assert image.broker_config_overrides("") == {"segment_ms": 9}
    image = apply_records(image, [ConfigRecord(BROKER, "", "segment_ms", None)])
    assert (BROKER, "") not in image.configs.resources
    assert image.topic_config("anything")["retention_ms"] == 604_800_000


def test_untouched_parts_are_shared_not_copied() -> None:
    image = brokers_image()
    rng = random.Random(0)
    records: list[MetadataRecord] = []
    for t in range(200):
        records += topic_records(f"t{t}", uuid.UUID(int=rng.getrandbits(128)), [(0, 1, 2)] * 5)
    image = apply_records(image, records)
    topic = image.topic("t7")
    after = apply_records(image, [PartitionChangeRecord(topic.topic_id, 3, isr=(0, 1))])
    assert after.cluster is image.cluster and after.configs is image.configs
    assert after.producer_ids is image.producer_ids
    assert after.topics.by_name is image.topics.by_name
    unchanged = [name for name in image.topics.by_name if after.topic(name) is image.topic(name)]
    assert len(unchanged) == 199
    new_topic = after.topic("t7")
    assert [new_topic.partitions[p] is topic.partitions[p] for p in range(5)] == [True, True, True, False, True]
    assert after.topics.replicas_by_broker is image.topics.replicas_by_broker  # replicas did not change


def test_delta_reads_see_its_own_changes() -> None:
    delta = MetadataDelta(brokers_image())
    delta.replay(FenceBrokerRecord(0, 1))
    assert delta.broker(0).fenced
    for r in topic_records("a", T1, [(0, 1)]):
        delta.replay(r)
    assert delta.topic_id("a") == T1 and delta.topic_draft(T1).get(0).leader == 0
    delta.replay(NoOpRecord(), 99)
    assert delta.apply().offset == 99


# --- snapshots --------------------------------------------------------------------------------


@st.composite
def images(draw) -> MetadataImage:
    """A random valid image built by replaying random valid records."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    n_brokers = draw(st.integers(1, 5))
    records: list[MetadataRecord] = []
    for b in range(n_brokers):
        records.append(register(b, b + 1, draw(st.sampled_from([None, "r1", "r2"]))))
        if draw(st.booleans()):
            records.append(UnfenceBrokerRecord(b, b + 1))
    image = apply_records(MetadataImage.EMPTY, records, offset=len(records))
    for t in range(draw(st.integers(0, 6))):
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        name = draw(st.sampled_from(["a", "a.b", "a_c", "x-y", "z"])) + str(t)
        rf = rng.randint(1, n_brokers)
        parts = [tuple(rng.sample(range(n_brokers), rf)) for _ in range(draw(st.integers(1, 8)))]
        recs = topic_records(name, topic_id, parts)
        for p, replicas in enumerate(parts):
            if draw(st.booleans()):
                isr = tuple(rng.sample(replicas, rng.randint(1, len(replicas))))
                recs.append(PartitionChangeRecord(topic_id, p, leader=rng.choice([*isr, -1]), isr=isr))
        if draw(st.booleans()):
            recs.append(ConfigRecord(TOPIC, name, "retention_ms", rng.randint(-1, 10**9)))
            recs.append(ConfigRecord(TOPIC, name, "min_cleanable_dirty_ratio", rng.random()))
        if draw(st.booleans()):
            recs.append(RemoveTopicRecord(topic_id))
        image = apply_records(image, recs, offset=image.offset + len(recs), epoch=draw(st.integers(0, 9)))
    extra: list[MetadataRecord] = [ConfigRecord(BROKER, "", "cleanup_policy", "compact,delete")]
    if draw(st.booleans()):
        extra.append(ProducerIdsRecord(0, 1, 1000 * draw(st.integers(1, 50))))
    if draw(st.booleans()):
        extra.append(BrokerRegistrationChangeRecord(0, 1, in_controlled_shutdown=True))
    return apply_records(image, extra, offset=image.offset + len(extra))


@settings(max_examples=60, deadline=None)
@given(images())
def test_snapshot_round_trips_exactly_and_deterministically(image) -> None:
    data = image.encode()
    decoded = MetadataImage.decode(data)
    assert decoded == image
    assert decoded.encode() == data
    for b in range(6):  # the derived replica index is rebuilt identically
        assert sorted((t.name, p) for t, p, _ in decoded.partitions_on_broker(b)) == sorted(
            (t.name, p) for t, p, _ in image.partitions_on_broker(b)
        )


def test_snapshot_errors_are_clear() -> None:
    with pytest.raises(MetadataRecordError, match="not valid CBOR"):
        MetadataImage.decode(b"\xff")
    with pytest.raises(MetadataRecordError, match="unsupported metadata snapshot format 9"):
        MetadataImage.decode(cbor2.dumps({"format": 9}))
    with pytest.raises(MetadataRecordError, match="malformed metadata snapshot"):
        MetadataImage.decode(cbor2.dumps({"format": 1, "brokers": []}))
    image = apply_records(brokers_image(), topic_records("a", T1, [(0, 1)]))
    body = cbor2.loads(image.encode())
    body["topics"][0][2][0][1] = [2]  # isr not a subset of the replicas
    with pytest.raises(MetadataRecordError, match="subset"):
        MetadataImage.decode(cbor2.dumps(body))


def test_empty_image_round_trips() -> None:
    assert MetadataImage.decode(MetadataImage.EMPTY.encode()) == MetadataImage.EMPTY


def test_a_change_in_a_big_topic_copies_one_chunk_of_its_partitions() -> None:
    image = apply_records(brokers_image(), topic_records("big", T1, [(0, 1, 2)] * 3000))
    after = apply_records(image, [PartitionChangeRecord(T1, 1234, isr=(0, 1))])
    old_parts, new_parts = image.topic("big").partitions, after.topic("big").partitions
    assert list(new_parts.changed_indices(old_parts)) == [1234]
    shared = sum(a is b for a, b in zip(old_parts._chunks, new_parts._chunks, strict=True))
    assert shared == len(old_parts._chunks) - 1
