"""Consumer groups through kafka-python, aiokafka and kafkajs, and the group protocol driven by hand.

The hand-driven part speaks the wire with kafka-python's message classes, so
each old and new version of FindCoordinator, JoinGroup, SyncGroup, Heartbeat
and LeaveGroup is seen exactly as a client of that version sends it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import threading
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from kraftpy.protocol.errors import ErrorCode
from tests.integration.test_cluster_support import LocalCluster, wait_for
from tests.kafka_clients.raw import Raw, coordinator, wait_until_every_broker_leads

TIMEOUT_S = 60


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30_000)
    try:
        for i in range(count):
            producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def find_coordinator(cluster: LocalCluster, group: str) -> str:
    answer = coordinator(cluster.bootstrap_servers, group, timeout_s=TIMEOUT_S)
    return f"{answer.host}:{answer.port}"


def test_find_coordinator_answers_kafka_listeners_at_every_version(kafka_cluster: LocalCluster) -> None:
    kafka_ports = {a.rsplit(":", 1)[1] for a in kafka_cluster.bootstrap_servers.split(",")}
    find_coordinator(kafka_cluster, "warm-up")  # __consumer_offsets exists and has leaders
    for address in kafka_cluster.bootstrap_servers.split(","):
        wire = Raw(address)
        try:
            for version in range(0, 4):
                request = FindCoordinatorRequest(key="fc-group", key_type=0, version=version)
                answer = wire.call(10, version, request)
                assert answer.error_code == 0 and str(answer.port) in kafka_ports, answer
            batch = FindCoordinatorRequest(key_type=0, coordinator_keys=["fc-a", "fc-b", "fc-c"], version=6)
            answer = wire.call(10, 6, batch)
            assert [c.key for c in answer.coordinators] == ["fc-a", "fc-b", "fc-c"]
            assert all(c.error_code == 0 and str(c.port) in kafka_ports for c in answer.coordinators), answer
        finally:
            wire.close()


def test_join_sync_heartbeat_leave_by_hand_old_and_new_versions(kafka_cluster: LocalCluster) -> None:
    group = "by-hand"
    wire = Raw(find_coordinator(kafka_cluster, group))
    P = JoinGroupRequest.JoinGroupRequestProtocol
    opaque = bytes(range(256))  # the protocol metadata is the client's bytes
    try:
        # v0 predates MEMBER_ID_REQUIRED: the first join gets a member id and a generation at once.
        join0 = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            member_id="",
            protocol_type="mine",
            protocols=[P(name="p", metadata=opaque)],
            version=0,
        )
        # The coordinator may still be loading its offsets partition: retry as clients do.
        loading = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

        def join() -> object | None:
            answer = wire.call(11, 0, join0)
            return None if answer.error_code == loading else answer

        joined = wait_for("the coordinator to load", join, timeout_s=TIMEOUT_S)
        assert joined.error_code == 0 and joined.member_id and joined.leader == joined.member_id
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, opaque)]
        A = SyncGroupRequest.SyncGroupRequestAssignment
        sync = SyncGroupRequest(
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[A(member_id=joined.member_id, assignment=opaque[::-1])],
            version=0,
        )
        synced = wire.call(14, 0, sync)
        assert (synced.error_code, synced.assignment) == (0, opaque[::-1])
        beat = HeartbeatRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, version=0
        )
        assert wire.call(12, 0, beat).error_code == 0
        # v9: a new member is told MEMBER_ID_REQUIRED first (KIP-394), then joins with that id.
        join9 = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type="mine",
            protocols=[P(name="p", metadata=b"second")],
            reason=None,
            version=9,
        )
        first = wire.call(11, 9, join9)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        # The rebalance this starts needs the v0 member to rejoin too: do both on two connections.
        other = Raw(find_coordinator(kafka_cluster, group))
        try:
            join9.member_id = first.member_id
            pending = other.send(11, 9, join9)
            join0.member_id = joined.member_id
            rejoined = wire.call(11, 0, join0)
            second = other.read(pending)
            assert rejoined.error_code == 0 and second.error_code == 0
            assert second.generation_id == rejoined.generation_id == joined.generation_id + 1
            assert second.protocol_type == "mine" and second.protocol_name == "p"
            # v3+ leaves a batch of members; each gets its own answer.
            M = LeaveGroupRequest.MemberIdentity
            members = [M(member_id=joined.member_id), M(member_id=first.member_id), M(member_id="nobody")]
            left = wire.call(13, 5, LeaveGroupRequest(group_id=group, members=members, version=5))
            codes = {m.member_id: m.error_code for m in left.members}
            assert codes == {joined.member_id: 0, first.member_id: 0, "nobody": ErrorCode.UNKNOWN_MEMBER_ID}
        finally:
            other.close()
    finally:
        wire.close()


def test_kafka_python_consumer_group_commits_and_admin(kafka_cluster: LocalCluster) -> None:
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, "kp-group", "kp-group"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "3")
    produce(bootstrap, topic, 90)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
        session_timeout_ms=10_000,
    )
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 90 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(90))
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(3)}
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
        assert committed == {tp.partition: offset for tp, offset in ends.items()}
        assert group in {g["group_id"] for g in admin.list_groups()}
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Stable" and described["protocol_type"] == "consumer"
        assert len(described["members"]) == 1
    finally:
        consumer.close()
    try:
        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == committed
        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        # OffsetDelete: an Empty group's offsets may go, one partition at a time.
        removed = admin.delete_group_offsets(group, [TopicPartition(topic, 0)])
        assert {tp: err.__name__ for tp, err in removed.items()} == {TopicPartition(topic, 0): "NoError"}
        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {1: committed[1], 2: committed[2]}
        deleted = admin.delete_groups([group])
        assert deleted == {group: "OK"}, deleted
        assert group not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def test_aiokafka_consumer_group_commits(kafka_cluster: LocalCluster) -> None:
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, "aio-group", "aio-group"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "3")
    produce(bootstrap, topic, 60)

    async def consume() -> tuple[list[bytes], dict[int, int], dict[int, int]]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(got) < 60:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
            await consumer.commit()
            parts = [TopicPartition(topic, p) for p in range(3)]
            committed = {tp.partition: await consumer.committed(tp) for tp in parts}
            ends = {tp.partition: offset for tp, offset in (await consumer.end_offsets(parts)).items()}
            return got, committed, ends
        finally:
            await consumer.stop()

    got, committed, ends = asyncio.run(consume())
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(60))
    assert committed == ends and sum(ends.values()) == 60


def test_kafkajs_produces_and_consumes_in_a_group(kafka_cluster: LocalCluster, kafkajs_dir: Path) -> None:
    topic, group = "js-group", "js-group"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "3")
    out = subprocess.run(
        ["node", "group_consume.js", kafka_cluster.bootstrap_servers, topic, group, "50"],
        cwd=kafkajs_dir,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(result["consumed"]) == sorted(f"v{i}" for i in range(50))
    assert sum(result["committed"].values()) == 50
    described = kafka_cluster.ok("groups", "describe", group, "--json").json()
    assert {p["partition"]: p["committed_offset"] for p in described["partitions"]} == {
        int(p): o for p, o in result["committed"].items()
    }


def test_a_malformed_group_request_gets_invalid_request_and_the_connection_goes_on(kafka_cluster: LocalCluster) -> None:
    wire = Raw(find_coordinator(kafka_cluster, "fine"))
    P = JoinGroupRequest.JoinGroupRequestProtocol
    try:
        too_long = "g" * 5_000  # beyond the coordinator's max_id_length
        join = JoinGroupRequest(
            group_id=too_long,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[P(name="range", metadata=b"")],
            version=5,
        )
        assert wire.call(11, 5, join).error_code == ErrorCode.INVALID_REQUEST
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        groups = [G(group_id=too_long, topics=None), G(group_id="fine", topics=None)]
        answer = wire.call(9, 8, OffsetFetchRequest(groups=groups, require_stable=False, version=8))
        codes = {g.group_id: g.error_code for g in answer.groups}
        # One group's bad id costs that group only.
        assert codes[too_long] == ErrorCode.INVALID_REQUEST
        assert codes["fine"] in (0, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    finally:
        wire.close()


def test_kafka_python_pinned_to_kafka_1_0_versions_consumes_and_commits(kafka_cluster: LocalCluster) -> None:
    """api_version=(1, 0, 0): JoinGroup v2, SyncGroup v1, OffsetCommit v3, OffsetFetch v3 from a real client.

    (kafka-python copes with MEMBER_ID_REQUIRED at any version, so the broker's own round trip for
    v0-v3 is proven by the hand-driven v0 test, not here.)
    """
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, "kp-old", "kp-old"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "2", "--replication-factor", "3")
    produce(bootstrap, topic, 20)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        api_version=(1, 0, 0),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
        session_timeout_ms=10_000,
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
        consumer.commit()
        assert sum(consumer.committed(TopicPartition(topic, p)) for p in range(2)) == 20
    finally:
        consumer.close()


def test_kraftpy_and_kafka_python_consumers_share_one_group(kafka_cluster: LocalCluster) -> None:
    """Members of two clients split the partitions, and describe reads the Kafka client's assignment."""
    from kraftpy.client.shell.sync import SyncConsumer

    topic, group = "mixed-group", "mixed-group"
    kafka_cluster.ok("topics", "create", topic, "--partitions", "4", "--replication-factor", "3")
    wait_until_every_broker_leads(kafka_cluster.bootstrap_servers, topic, 4, timeout_s=TIMEOUT_S)
    # kafka-python 3.0.12 can orphan its own join: a leader whose first assignment ran before it knew
    # the topic's partitions rejoins when they arrive; its new assignment clears need_rejoin() while its
    # SyncGroup is in flight, and a poll() timing out just then returns without ever completing the
    # join (no assignment, no heartbeats: the coordinator expires it). A full suite hit it once
    # (kafka-python's log: SyncGroup answered, then need_rejoin False for ever). So it subscribes once
    # its metadata holds the topic, and polls in 1 s slices, not 100 ms: that rejoin does not happen,
    # and a poll that ends mid-join is rarer.
    theirs = KafkaConsumer(
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        group_id=group,
        partition_assignment_strategy=[RangePartitionAssignor],
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
    )
    ours = SyncConsumer(
        kafka_cluster.bootstrap_servers,
        group_id=group,
        partition_assignment_strategy=["range"],
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
    )
    # Each member polls on its own thread, as applications do: a rebalance waits for every member's
    # next poll, so polling them in turn from one thread would make each wait for the other. Neither
    # consumer is thread-safe, so only its poller touches it; this thread reads what the poller saw.
    stop = threading.Event()
    seen: dict[str, set[int]] = {"theirs": set(), "ours": set()}

    def keep_polling(name: str, consumer) -> None:
        while not stop.is_set():
            consumer.poll(timeout_ms=1_000 if name == "theirs" else 100)
            seen[name] = {tp.partition for tp in consumer.assignment()}

    pollers = [
        threading.Thread(target=keep_polling, args=(name, c), daemon=True)
        for name, c in (("theirs", theirs), ("ours", ours))
    ]
    # kafka-python's coordinator at DEBUG: a member that stops talking to the group shows where it stands.
    coordinator_log = logging.getLogger("kafka.coordinator")
    level_before = coordinator_log.level
    coordinator_log.setLevel(logging.DEBUG)
    try:
        assert wait_for(
            "kafka-python's metadata for the topic", lambda: theirs.partitions_for_topic(topic), timeout_s=TIMEOUT_S
        ) == {0, 1, 2, 3}
        theirs.subscribe([topic])
        ours.subscribe([topic])
        for poller in pollers:
            poller.start()

        def split() -> tuple[set[int], set[int]] | None:
            a, b = seen["theirs"], seen["ours"]
            return (a, b) if a and b and a | b == {0, 1, 2, 3} and not a & b else None

        try:
            their_parts, our_parts = wait_for("both members assigned, disjointly", split, timeout_s=TIMEOUT_S)
        except AssertionError as failure:
            # What the coordinator holds tells a coordinator fault from a client that never rejoined.
            said = kafka_cluster.cli("groups", "describe", group, "--json")
            history = [
                line
                for entry in kafka_cluster.layout().nodes
                for line in kafka_cluster.log_text(entry.node_id).splitlines()
                if f"group {group}:" in line
            ]
            raise AssertionError(
                f"{failure}; kafka-python held {seen['theirs']}, kraftpy held {seen['ours']}; "
                f"the coordinator says: {said}; its log of the group: {history[-20:]}"
            ) from None
        assert len(their_parts) == len(our_parts) == 2  # range over 4 partitions and 2 members

        def described() -> dict | None:
            result = kafka_cluster.cli("groups", "describe", group, "--json")
            if result.code != 0:
                return None
            body = result.json()
            return body if len(body["members"]) == 2 and body["state"] == "Stable" else None

        body = wait_for("the group described with both members", described, timeout_s=TIMEOUT_S)
        assignments = sorted(sorted(p["partition"] for p in m["assignment"]) for m in body["members"])
        assert assignments == sorted([sorted(their_parts), sorted(our_parts)])
    finally:
        stop.set()
        for poller in pollers:
            poller.join(TIMEOUT_S)
        coordinator_log.setLevel(level_before)
        ours.close()
        theirs.close()
