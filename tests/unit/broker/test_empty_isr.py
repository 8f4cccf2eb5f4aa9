"""A partition whose ISR is empty and leader -1 (KIP-966: its last member was fenced or restarted uncleanly).

The controller writes such registrations now; every broker path must take them: the replication core, the
replica manager's conversion of the image, both Metadata answers and `kraftpy topics describe`.
"""

from __future__ import annotations

import io
import uuid
from types import SimpleNamespace

import pytest
from rich.console import Console

from kraftpy.broker.api.metadata import topic_answer
from kraftpy.broker.kafka import metadata
from kraftpy.broker.replication import (
    CompleteProduce,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ReplicationConfig,
    Role,
)
from kraftpy.broker.replication.model import CONSUMER_REPLICA_ID, NO_LEADER
from kraftpy.broker.shell.replica_manager import _registration
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import (
    Listener,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_response
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import parse_header
from kraftpy.tools.commands.topics import render_topic, topic_json

TOPIC_ID = uuid.UUID(int=11)
REPLICAS = (0, 1, 2)
LOG = LogState(0, 5, 3, 1)


def reg(leader: int, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int) -> PartitionRegistration:
    return PartitionRegistration(REPLICAS, isr, leader, leader_epoch, partition_epoch)


EMPTY = reg(NO_LEADER, (), 3, 3)


def image_with_an_empty_isr() -> MetadataImage:
    """Partition 0 led by broker 1; partition 1 after its last ISR member, broker 3, was fenced."""
    records: list[MetadataRecord] = []
    for b in (1, 2, 3):
        listeners = (Listener("PLAINTEXT", "127.0.0.1", 9091 + b),)
        records += [RegisterBrokerRecord(b, f"inc-{b}", b, listeners, None), UnfenceBrokerRecord(b, b)]
    records.append(TopicRecord("t", TOPIC_ID))
    records += [PartitionRecord(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), 1), PartitionRecord(TOPIC_ID, 1, (1, 2, 3), (3,), 3)]
    records.append(PartitionChangeRecord(TOPIC_ID, 1, leader=NO_LEADER, isr=()))
    return apply_records(MetadataImage.EMPTY, records, offset=len(records) - 1)


def test_the_image_holds_what_the_test_means() -> None:
    part = image_with_an_empty_isr().topic("t").partitions[1]
    assert (part.leader, tuple(part.isr)) == (NO_LEADER, ())


def test_a_leader_whose_isr_empties_fails_its_waiting_produces_and_serves_nothing() -> None:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=2))
    partition.apply_registration(reg(0, (0, 1), 2, 2), LOG, 0)
    header = parse_header(build_batch([(None, b"v", (), 1)]))
    partition.handle_produce(ProduceRequest("waiting", header, acks=-1, timeout_ms=5_000), 0)
    actions = partition.apply_registration(EMPTY, LOG, 1)
    assert [(a.request_id, a.error) for a in actions if isinstance(a, CompleteProduce)] == [
        ("waiting", ErrorCode.NOT_LEADER_OR_FOLLOWER)
    ]
    assert partition.role is Role.NONE and partition.high_watermark is None
    [refused] = partition.handle_produce(ProduceRequest("new", header, acks=1), 2)
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    consumer = partition.handle_fetch(FetchPartition(CONSUMER_REPLICA_ID, 0, 3), None, 2)
    assert consumer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert partition.list_offsets_latest(3) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    assert partition.tick(10_000) == []


def test_a_follower_whose_isr_empties_stops_fetching_and_follows_the_elected_eligible_replica() -> None:
    partition = Partition(0)
    partition.apply_registration(reg(1, (1,), 2, 2), LOG, 0)
    assert partition.build_fetch(LOG, 0) is not None
    assert partition.apply_registration(EMPTY, LOG, 1) == []
    assert partition.role is Role.NONE and partition.build_fetch(LOG, 1) is None
    partition.apply_registration(reg(2, (2,), 4, 4), LOG, 2)  # an eligible leader replica is elected
    assert partition.role is Role.FOLLOWER and partition.follower.leader_id == 2


def test_an_eligible_replica_elected_out_of_an_empty_isr_leads_but_commits_nothing_alone() -> None:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=2))
    partition.apply_registration(EMPTY, LOG, 0)
    partition.apply_registration(reg(0, (0,), 4, 4), LOG, 1)
    assert partition.role is Role.LEADER
    assert partition.high_watermark == 3  # its follower-time HW: LEO 5 is not committed by one replica


def test_the_replica_manager_hands_the_core_an_empty_isr_as_it_is() -> None:
    part = image_with_an_empty_isr().topic("t").partitions[1]
    converted = _registration(part)
    assert (converted.leader, converted.isr, converted.replicas) == (NO_LEADER, (), (1, 2, 3))


@pytest.mark.parametrize("version", range(SUPPORTED_APIS[3].min_version, SUPPORTED_APIS[3].max_version + 1))
def test_kafka_metadata_answers_leader_not_available_with_an_empty_isr(version: int) -> None:
    ask = metadata.MetadataAsk(("t",), (), False)
    response = metadata.metadata_response(
        image_with_an_empty_isr(), ask, listener_name="PLAINTEXT", cluster_id="c", controller_id=1
    )
    header = RequestHeader(3, version, 5, "client")
    _, out = decode_response(header, encode_response(header, response)[4:])
    answered = {p.partition_index: p for p in out.topics[0].partitions}
    assert answered[0].error_code == 0 and answered[0].leader_id == 1
    empty = answered[1]
    assert (empty.error_code, empty.leader_id, list(empty.isr_nodes), list(empty.replica_nodes)) == (
        int(ErrorCode.LEADER_NOT_AVAILABLE),
        NO_LEADER,
        [],
        [1, 2, 3],
    )


def test_the_internal_metadata_answer_says_leader_not_available_with_an_empty_isr() -> None:
    answered = topic_answer(image_with_an_empty_isr(), "t")["partitions"][1]
    assert (answered["error_code"], answered["leader_id"], answered["isr_nodes"]) == (
        int(ErrorCode.LEADER_NOT_AVAILABLE),
        NO_LEADER,
        [],
    )


def test_topics_describe_shows_an_empty_isr_as_none() -> None:
    description = SimpleNamespace(
        name="t",
        topic_id=TOPIC_ID,
        partitions=[
            SimpleNamespace(
                partition=0, leader=1, leader_epoch=1, replicas=(1, 2, 3), isr=(1, 2), elr=(), last_known_elr=()
            ),
            # KIP-966: the fenced last member joins the ELR.
            SimpleNamespace(
                partition=1, leader=None, leader_epoch=4, replicas=(1, 2, 3), isr=(), elr=(3,), last_known_elr=()
            ),
        ],
    )
    described = topic_json(description, {})
    assert described["partitions"][1] == {
        "partition": 1,
        "leader": -1,
        "leader_epoch": 4,
        "replicas": [1, 2, 3],
        "isr": [],
        "elr": [3],
        "last_known_elr": [],
    }
    _, table = render_topic(described)
    console = Console(width=120, file=io.StringIO(), record=True)
    console.print(table)
    cells = [line.split() for line in console.export_text().splitlines()]
    assert ["0", "1", "1", "1,2,3", "1,2", "-", "-"] in cells
    assert ["1", "none", "4", "1,2,3", "none", "3", "-"] in cells
