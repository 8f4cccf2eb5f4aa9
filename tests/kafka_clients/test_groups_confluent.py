"""Consumer groups through librdkafka (confluent-kafka): a 3-member group that changes, and the admin calls.

The consumers are polled in turn from one thread, so the rebalance callbacks
of all members run in one order and the test can check, at every assignment
and every record, that one member owns a partition at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.integration.test_cluster_support import LocalCluster, wait_for

PARTITIONS = 6
PER_PHASE = 300
TIMEOUT_S = 90


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still unacknowledged after 30 s"
    assert not failures, failures


class Member:
    """One consumer of the group, with what it was assigned and consumed."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topic: str, owners: dict[int, str], **extra: object
    ) -> None:
        self.name = name
        self.owners = owners
        self.owned: set[int] = set()
        self.revocations = 0
        self.consumed: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
                "partition.assignment.strategy": "range",
                **extra,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            holder = self.owners.get(tp.partition)
            if holder is not None:  # eager rebalancing: the old owner revoked before this generation formed
                self.errors.append(f"{self.name} got partition {tp.partition} still owned by {holder}")
            self.owners[tp.partition] = self.name
            self.owned.add(tp.partition)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revocations += 1
        self.commit()
        for tp in partitions:
            if self.owners.get(tp.partition) == self.name:
                del self.owners[tp.partition]
            self.owned.discard(tp.partition)

    def commit(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing consumed yet since the last commit
            if getattr(exc.args[0], "code", lambda: None)() != KafkaError._NO_OFFSET:
                self.errors.append(f"{self.name} commit failed: {exc}")

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        if msg.error() is not None:
            self.errors.append(f"{self.name}: {msg.error()}")
            return
        if msg.partition() not in self.owned:
            self.errors.append(f"{self.name} got a record of partition {msg.partition()} it does not own")
        self.consumed.append((msg.partition(), msg.offset(), msg.value()))

    def close(self) -> None:
        self._revoked(self.consumer, [TopicPartition("", p) for p in list(self.owned)])
        self.consumer.close()


def poll_until(members: list[Member], what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        for m in members:
            m.poll()


def values(members: list[Member]) -> set[bytes]:
    return {v for m in members for _, _, v in m.consumed}


def test_a_group_of_three_with_a_late_joiner_and_a_leaver_consumes_everything(kafka_cluster: LocalCluster) -> None:
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, "grp-events", "cg-three"
    kafka_cluster.ok("topics", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    owners: dict[int, str] = {}
    produce(bootstrap, topic, 0, PER_PHASE)
    a = Member("a", bootstrap, group, topic, owners)
    b = Member("b", bootstrap, group, topic, owners)
    members = [a, b]
    everyone = [a, b]
    try:
        poll_until(
            members, "a and b to share the partitions", lambda: len(owners) == PARTITIONS and a.owned and b.owned
        )
        poll_until(members, "the first records", lambda: len(values(members)) >= PER_PHASE // 3)
        c = Member("c", bootstrap, group, topic, owners)  # joins late
        members.append(c)
        everyone.append(c)
        produce(bootstrap, topic, PER_PHASE, PER_PHASE)
        poll_until(members, "three members", lambda: all(m.owned for m in members) and len(owners) == PARTITIONS)
        poll_until(members, "the first two phases", lambda: len(values(members)) >= 2 * PER_PHASE)
        b.close()  # leaves: LeaveGroup, and a and c take its partitions
        members.remove(b)
        produce(bootstrap, topic, 2 * PER_PHASE, PER_PHASE)
        poll_until(members, "a and c to own everything", lambda: len(owners) == PARTITIONS and not b.owned)
        poll_until(members, "every record", lambda: len(values(everyone)) >= 3 * PER_PHASE)
        for m in members:
            m.commit()
        assert [e for m in everyone for e in m.errors] == []
        assert values(everyone) == {f"v{i}".encode() for i in range(3 * PER_PHASE)}
        # At least once overall; never twice by one member of one generation: no (partition, offset) is
        # read twice by a member that kept the partition (duplicates only follow an ownership change).
        for m in everyone:
            seen = [(p, o) for p, o, _ in m.consumed]
            assert len(seen) == len(set(seen)), f"{m.name} read a record twice"
        ends = {p: a.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        assert sum(ends.values()) == 3 * PER_PHASE
        committed = a.consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        for m in members:
            m.consumer.close()
    # The same offsets through kraftpy's own CLI (its RPC path): the two surfaces share one coordinator.
    described = kafka_cluster.ok("groups", "describe", group, "--json").json()
    assert described["state"] == "Empty"
    assert {p["partition"]: p["committed_offset"] for p in described["partitions"]} == ends


def test_admin_lists_describes_alters_and_deletes_groups(kafka_cluster: LocalCluster) -> None:
    bootstrap, topic = kafka_cluster.bootstrap_servers, "grp-admin"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "3")
    produce(bootstrap, topic, 0, 30)
    owners: dict[int, str] = {}
    member = Member("solo", bootstrap, "cg-admin", topic, owners)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        poll_until([member], "the records", lambda: len(member.consumed) >= 30)
        member.commit()
        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
        assert "cg-admin" in {g.group_id for g in listed.valid}, listed.errors
        described = admin.describe_consumer_groups(["cg-admin"], request_timeout=30)["cg-admin"].result(timeout=30)
        assert str(described.state).endswith("STABLE")
        (info,) = described.members
        assert info.client_id == "solo" and info.host
        assert {tp.partition for tp in info.assignment.topic_partitions} == {0, 1, 2}
        # A non-empty group is not deleted.
        refused = admin.delete_consumer_groups(["cg-admin"], request_timeout=30)["cg-admin"]
        assert "NON_EMPTY_GROUP" in str(refused.exception(timeout=30))
    finally:
        member.close()
    request = [ConsumerGroupTopicPartitions("cg-admin", [TopicPartition(topic, p) for p in range(3)])]
    offsets = admin.list_consumer_group_offsets(request, request_timeout=30)["cg-admin"].result(timeout=30)
    committed = {tp.partition: tp.offset for tp in offsets.topic_partitions}
    assert sum(committed.values()) == 30 and OFFSET_INVALID not in committed.values()
    moved = [ConsumerGroupTopicPartitions("cg-admin", [TopicPartition(topic, 0, 1)])]
    admin.alter_consumer_group_offsets(moved, request_timeout=30)["cg-admin"].result(timeout=30)
    offsets = admin.list_consumer_group_offsets(request, request_timeout=30)["cg-admin"].result(timeout=30)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {**committed, 0: 1}
    admin.delete_consumer_groups(["cg-admin"], request_timeout=30)["cg-admin"].result(timeout=30)
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
    assert "cg-admin" not in {g.group_id for g in listed.valid}


def test_a_static_member_restarts_without_a_rebalance(kafka_cluster: LocalCluster) -> None:
    """KIP-345 through JoinGroup v5+: the restarted instance gets its partitions back, the other keeps its own."""
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, "grp-static", "cg-static"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "4", "--replication-factor", "3")
    owners: dict[int, str] = {}
    static = {"session.timeout.ms": 30_000}
    a = Member("a", bootstrap, group, topic, owners, **{"group.instance.id": "inst-a"}, **static)
    b = Member("b", bootstrap, group, topic, owners, **{"group.instance.id": "inst-b"}, **static)
    restarted: Member | None = None
    try:
        poll_until([a, b], "a and b to share the partitions", lambda: len(owners) == 4 and a.owned and b.owned)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
        assert {m.group_instance_id for m in described.members} == {"inst-a", "inst-b"}
        kept, before = set(b.owned), b.revocations
        a_had = set(a.owned)
        a.consumer.close()  # a static member sends no LeaveGroup: its place is kept for its session
        owners.clear()
        owners.update(dict.fromkeys(kept, "b"))
        restarted = Member("a2", bootstrap, group, topic, owners, **{"group.instance.id": "inst-a"}, **static)
        poll_until([restarted, b], "the restarted instance's partitions", lambda: restarted.owned == a_had)
        for _ in range(40):  # a while longer: a rebalance would revoke b's partitions now
            b.poll()
            restarted.poll()
        assert (b.revocations, b.owned) == (before, kept)
        assert [e for m in (a, b, restarted) for e in m.errors] == []
    finally:
        b.consumer.close()
        if restarted is not None:
            restarted.consumer.close()


def _committed(consumer: Consumer, tp: TopicPartition) -> bool:
    try:
        consumer.commit(offsets=[tp], asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].retriable():
            return False
        raise
    return True


def test_the_offsets_topic_holds_kafkas_record_layouts(kafka_cluster: LocalCluster) -> None:
    """A tool that reads `__consumer_offsets` (lag monitors do) finds Kafka's OffsetCommit key and value.

    The bytes are taken apart here by hand, from Kafka's OffsetCommitKey (version 1: group, topic,
    partition) and OffsetCommitValue (version 3: offset, leader epoch, metadata, commit timestamp).
    """
    import struct

    topic, group = "layout-check", "layout-check-group"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3")
    committer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": group})
    try:
        # The offsets topic may still be loading right after the cluster starts (retriable).
        wait_for("the commit", lambda: _committed(committer, TopicPartition(topic, 0, 17, metadata="note")), TIMEOUT_S)
    finally:
        committer.close()

    def string(data: bytes, pos: int) -> tuple[str, int]:
        (n,) = struct.unpack_from(">h", data, pos)
        return data[pos + 2 : pos + 2 + n].decode(), pos + 2 + n

    reader = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": "layout-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    found: list[tuple[int, str, str, int, tuple]] = []
    try:
        partitions = reader.list_topics("__consumer_offsets", timeout=TIMEOUT_S).topics["__consumer_offsets"].partitions
        reader.assign([TopicPartition("__consumer_offsets", p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + TIMEOUT_S
        while not found and time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is None or msg.error() or msg.key() is None or msg.value() is None:
                continue
            key = msg.key()
            (version,) = struct.unpack_from(">h", key)
            if version != 1:
                continue
            g, pos = string(key, 2)
            t, pos = string(key, pos)
            (partition,) = struct.unpack_from(">i", key, pos)
            if g != group:
                continue
            value = msg.value()
            value_version, offset, epoch = struct.unpack_from(">hqi", value)
            metadata, pos = string(value, 14)
            metadata = metadata.removesuffix("\x00")  # confluent-kafka sends the C string's terminator too
            found.append((version, g, t, partition, (value_version, offset, epoch, metadata, len(value) - pos)))
    finally:
        reader.close()
    assert found == [(1, group, topic, 0, (3, 17, -1, "note", 8))]
