"""`kraftpy topics describe` shows each partition's ELR and last known ELR (KIP-966), as Kafka 3.8's tool does.

An image with an ELR goes the whole way a describe takes, with no sockets: the broker's
DescribeTopicPartitions answer, Kafka's codec, the client's wire translator and paging, the CLI's
JSON; it must come out as the image's own view (kraftpy.metadata.image.views.topic_description)
says, field for field. The table gains two narrow columns.
"""

from __future__ import annotations

import io
import uuid

from rich.console import Console

from kraftpy.broker.kafka.topic_partitions import describe_topic_partitions_response
from kraftpy.client.admin.describe_topics import TopicPartitionsPaging
from kraftpy.client.wire.admin import build_describe_topic_partitions, read_describe_topic_partitions
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.image.views import topic_description
from kraftpy.metadata.records import (
    Listener,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_response
from kraftpy.tools.commands.topics import render_topic, topic_json
from kraftpy.tools.tables import MAX_WIDTH

TOPIC_ID = uuid.UUID(int=7)
DTP = 75


def image_with_an_elr() -> MetadataImage:
    """Partition 0 healthy; partition 1 with broker 2 out of the ISR {1} below min ISR (ELR {2});
    partition 2 whose ISR emptied (ELR {3}, last known ELR {1})."""
    records: list[MetadataRecord] = []
    for b in (1, 2, 3):
        records += [
            RegisterBrokerRecord(b, f"inc-{b}", b, (Listener("PLAINTEXT", "127.0.0.1", 9091 + b),), None),
            UnfenceBrokerRecord(b, b),
        ]
    records.append(TopicRecord("t", TOPIC_ID))
    records += [PartitionRecord(TOPIC_ID, p, (1, 2, 3), (1, 2, 3), 1) for p in range(3)]
    records.append(PartitionChangeRecord(TOPIC_ID, 1, isr=(1, 3), elr=(2,)))
    records.append(PartitionChangeRecord(TOPIC_ID, 2, leader=-1, isr=(), elr=(3,), last_known_elr=(1,)))
    return apply_records(MetadataImage.EMPTY, records, offset=len(records) - 1)


def described_through_the_wire(image: MetadataImage, page_limit: int) -> dict:
    paging = TopicPartitionsPaging(["t"], page_limit=page_limit)
    while not paging.done:
        request = build_describe_topic_partitions(paging.request(), 0)
        header = RequestHeader(DTP, 0, 1, "kraftpy")
        response = describe_topic_partitions_response(image, request)
        _, decoded = decode_response(header, encode_response(header, response)[4:])
        paging.on_answer(read_describe_topic_partitions(decoded, 0))
    return topic_json(paging.descriptions()["t"], {})


def test_describe_json_is_the_images_view_elr_included() -> None:
    image = image_with_an_elr()
    expected = topic_description(image, "t")
    assert expected is not None
    for page_limit in (2000, 1):  # one page, and a page per partition
        described = described_through_the_wire(image, page_limit)
        assert described == expected
    partitions = expected["partitions"]
    assert (partitions[1]["elr"], partitions[2]["elr"], partitions[2]["last_known_elr"]) == ([2], [3], [1])


def test_the_table_shows_elr_and_last_known_elr_and_stays_narrow() -> None:
    topic = topic_description(image_with_an_elr(), "t")
    assert topic is not None
    _, table = render_topic(topic)
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    assert lines[0].split() == [
        "partition",
        "leader",
        "leader",
        "epoch",
        "replicas",
        "isr",
        "elr",
        "last",
        "known",
        "elr",
    ]
    cells = [line.split() for line in lines[2:]]
    assert cells == [
        ["0", "1", "0", "1,2,3", "1,2,3", "-", "-"],
        ["1", "1", "0", "1,2,3", "1,3", "2", "-"],
        ["2", "none", "1", "1,2,3", "none", "3", "1"],
    ]
    assert max(len(line.rstrip()) for line in lines) <= MAX_WIDTH  # fits an 80-column terminal, unfolded
