"""Snapshot encoding: MetadataImage <-> bytes (CBOR), exact and deterministic.

Design notes: docs/metadata.md, section "metadata/image/snapshot.py".
"""

from __future__ import annotations

import uuid
from typing import Any

import cbor2

from kraftpy.metadata.bulk import gc_paused
from kraftpy.metadata.image.metadata_delta import check_partition
from kraftpy.metadata.image.metadata_image import (
    BrokerRegistration,
    ClusterImage,
    ConfigurationsImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
    collision_key,
    has_collision_chars,
)
from kraftpy.metadata.image.pmap import PMap, PVector
from kraftpy.metadata.records import Listener, MetadataRecordError, uuid_from_bytes

SNAPSHOT_FORMAT = 1


def encode_image(image: MetadataImage) -> bytes:
    with gc_paused():
        return _encode(image)


def _encode(image: MetadataImage) -> bytes:
    brokers = [
        [
            b.broker_id,
            b.incarnation_id,
            b.broker_epoch,
            [[x.name, x.host, x.port] for x in b.listeners],
            b.rack,
            b.fenced,
            b.in_controlled_shutdown,
            b.registration_offset,
        ]
        for _, b in sorted(image.cluster.brokers.items())
    ]
    topics = []
    by_id = image.topics.by_id
    for name, topic_id in sorted(image.topics.by_name.items()):
        topic = by_id[topic_id]
        topics.append([name, topic_id.bytes, [_partition_row(p) for p in topic.partitions]])
    configs = [
        [rtype, rname, sorted([k, v] for k, v in values.items())]
        for (rtype, rname), values in sorted(image.configs.resources.items())
    ]
    return cbor2.dumps(
        {
            "format": SNAPSHOT_FORMAT,
            "offset": image.offset,
            "epoch": image.epoch,
            "next_broker_epoch": image.cluster.next_broker_epoch,
            "next_producer_id": image.producer_ids.next_producer_id,
            "brokers": brokers,
            "topics": topics,
            "configs": configs,
            "registers": sorted([k, v] for k, v in image.registers.items()),
        }
    )


def _partition_row(p: PartitionRegistration) -> list[Any]:
    row = [list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch]
    if p.elr or p.last_known_elr:  # KIP-966's fields only where used: other rows keep their bytes
        row += [list(p.elr), list(p.last_known_elr)]
    return row


def _partition_from_row(row: Any) -> PartitionRegistration:
    if type(row) is not list or len(row) not in (5, 7):
        raise TypeError(f"bad partition row {row!r:.60}")
    replicas, isr, leader, leader_epoch, partition_epoch, *elr = row
    return PartitionRegistration(
        tuple(replicas), tuple(isr), _int(leader), _int(leader_epoch), _int(partition_epoch), *map(tuple, elr)
    )


def decode_image(data: bytes) -> MetadataImage:
    with gc_paused():
        return _decode(data)


def _decode(data: bytes) -> MetadataImage:
    try:
        body = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as e:
        raise MetadataRecordError(f"snapshot is not valid CBOR: {e}") from None
    if not isinstance(body, dict) or body.get("format") != SNAPSHOT_FORMAT:
        found = body.get("format") if isinstance(body, dict) else type(body).__name__
        raise MetadataRecordError(f"unsupported metadata snapshot format {found!r} (this node reads {SNAPSHOT_FORMAT})")
    try:
        return _decode_body(body)
    except MetadataRecordError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise MetadataRecordError(f"malformed metadata snapshot: {type(e).__name__}: {e}") from None


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError(f"expected an integer, got {v!r:.40}")
    return v


def _decode_body(body: dict[str, Any]) -> MetadataImage:
    brokers: dict[int, BrokerRegistration] = {}
    for bid, inc, epoch, listeners, rack, fenced, shutdown, reg_offset in body["brokers"]:
        brokers[_int(bid)] = BrokerRegistration(
            bid, str(inc), _int(epoch), tuple(Listener(n, h, _int(p)) for n, h, p in listeners),
            rack, bool(fenced), bool(shutdown), _int(reg_offset),
        )  # fmt: skip
    by_id = PMap.EMPTY.builder()
    by_name = PMap.EMPTY.builder()
    collisions: dict[str, set[str]] = {}
    index: dict[int, dict[uuid.UUID, list[int]]] = {}
    for name, raw_id, rows in body["topics"]:
        if type(name) is not str or type(raw_id) is not bytes or len(raw_id) != 16:
            raise TypeError(f"bad topic entry {name!r:.40}")
        topic_id = uuid_from_bytes(raw_id)
        parts = PVector([_partition_from_row(row) for row in rows])
        local: dict[int, list[int]] = {}
        for p, part in enumerate(parts):
            check_partition(part, f"snapshot partition {name}-{p}")
            for b in part.replicas:
                got = local.get(b)
                if got is None:
                    local[b] = [p]
                else:
                    got.append(p)
        for b, partition_ids in local.items():
            index.setdefault(b, {})[topic_id] = partition_ids
        if name in by_name or topic_id in by_id:
            raise MetadataRecordError(f"snapshot holds topic {name!r} / id {topic_id} twice")
        by_id[topic_id] = TopicImage(name, topic_id, parts)
        by_name[name] = topic_id
        if has_collision_chars(name):
            collisions.setdefault(collision_key(name), set()).add(name)
    topics = TopicsImage(
        by_id.build(),
        by_name.build(),
        PMap.from_dict({k: frozenset(v) for k, v in collisions.items()}),
        {b: PMap.from_dict({t: tuple(ps) for t, ps in per.items()}) for b, per in index.items()},
    )
    resources = PMap.from_dict(
        {(_int(rtype), str(rname)): {str(k): v for k, v in values} for rtype, rname, values in body["configs"]}
    )
    return MetadataImage(
        offset=_int(body["offset"]),
        epoch=_int(body["epoch"]),
        cluster=ClusterImage(brokers, _int(body["next_broker_epoch"])),
        topics=topics,
        configs=ConfigurationsImage(resources),
        producer_ids=ProducerIdsImage(_int(body["next_producer_id"])),
        registers=PMap.from_dict({str(k): _int(v) for k, v in body.get("registers", ())}),  # absent before them
    )
