"""Replaying __consumer_offsets rebuilds the coordinator's groups and offsets (hypothesis), and the record codecs.

The property: drive the coordinator with a random sequence of requests from
random clients (dynamic and static members of two groups, simple commits,
deletes, expiry, session and rebalance timeouts, failed commit writes,
partitions unloaded and reloaded mid-way), then rebuild from the records it
wrote. Offsets must match exactly for every group; groups at rest (Stable or
Empty, past generation 0) must match member for member. Groups in the middle
of a rebalance are compared at the end, after every session has expired.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.broker.groups import GroupCoordinatorConfig, GroupState
from kraftpy.broker.groups.group import GroupMetadata
from kraftpy.broker.groups.loader import build_groups
from kraftpy.broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    MemberRecord,
    OffsetAndMetadata,
    OffsetCommitKey,
    decode_record,
    encode_key,
    group_metadata_record,
    java_string_hash,
    offset_commit_record,
    partition_for,
    tombstone,
)
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import Harness, protocols

E = ErrorCode
SLOTS = 6  # slots 0-3 dynamic, 4-5 static; even slots in g0, odd in g1
AT_REST = (GroupState.STABLE, GroupState.EMPTY)


# --- record codecs ----------------------------------------------------------------------------


def test_partition_for_uses_javas_string_hash_as_kafka_does() -> None:
    assert java_string_hash("") == 0 and java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Kafka's Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("é😀") == ((31 * 0xE9 + 0xD83D) * 31 + 0xDE00)  # UTF-16 code units


@given(
    group=st.text(max_size=20),
    topic=st.text(max_size=20),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    epoch=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    metadata=st.text(max_size=30),
    ts=st.integers(0, 2**48),
)
def test_offset_records_round_trip(group, topic, partition, offset, epoch, metadata, ts) -> None:
    value = OffsetAndMetadata(offset, epoch, metadata, ts)
    key, data = offset_commit_record(group, topic, partition, value)
    assert decode_record(key, data) == (OffsetCommitKey(group, topic, partition), value)
    assert decode_record(*tombstone(OffsetCommitKey(group, topic, partition))) == (
        OffsetCommitKey(group, topic, partition),
        None,
    )


member_records = st.builds(
    MemberRecord,
    member_id=st.text(max_size=10),
    group_instance_id=st.one_of(st.none(), st.text(max_size=10)),
    client_id=st.text(max_size=5),
    client_host=st.text(max_size=5),
    rebalance_timeout_ms=st.integers(1, 2**31 - 1),
    session_timeout_ms=st.integers(1, 2**31 - 1),
    subscription=st.binary(max_size=20),
    assignment=st.binary(max_size=20),
)


@given(
    value=st.builds(
        GroupMetadataValue,
        protocol_type=st.text(max_size=10),
        generation=st.integers(0, 2**31 - 1),
        protocol=st.one_of(st.none(), st.text(max_size=10)),
        leader=st.one_of(st.none(), st.text(max_size=10)),
        current_state_timestamp_ms=st.one_of(st.none(), st.integers(0, 2**48)),
        members=st.lists(member_records, max_size=3).map(tuple),
    )
)
def test_group_records_round_trip_and_keys_are_canonical(value) -> None:
    key, data = group_metadata_record("g", value)
    assert decode_record(key, data) == (GroupMetadataKey("g"), value)
    assert key == encode_key(GroupMetadataKey("g"))  # compaction compares key bytes


def test_malformed_records_are_refused_with_a_reason() -> None:
    key = encode_key(GroupMetadataKey("g"))
    for bad_key, bad_value in [
        (b"\xff", None),
        (encode_key(GroupMetadataKey("g"))[:-1], None),
        (b"\x82\x07\x61g", None),  # [7, "g"]: unknown key version
        (key, b"\xa1\x67version\x09"),  # {"version": 9}: a version from the future
        (key, b"\xa1\x67version\x03"),  # fields missing
    ]:
        try:
            decode_record(bad_key, bad_value)
        except GroupRecordError as err:
            assert err.code is E.CORRUPT_MESSAGE and str(err)
        else:
            raise AssertionError(f"{bad_key!r}/{bad_value!r} decoded")


# --- the replay property ----------------------------------------------------------------------


class Client:
    def __init__(self, slot: int) -> None:
        self.group = f"g{slot % 2}"
        self.instance = f"i{slot}" if slot >= 4 else None
        self.member_id = ""
        self.generation = -1
        self.leads: list[str] | None = None  # the members to assign when this client leads


def projection(group: GroupMetadata) -> tuple[Any, ...]:
    value = group.metadata_value()
    # When the group last changed state is only meaningful (and only stored as such) for an Empty group.
    timestamp = value.current_state_timestamp_ms if group.state is GroupState.EMPTY else None
    return (value.protocol_type, value.generation, value.protocol, value.leader, timestamp, value.members)


def rebuilt(h: Harness) -> dict[str, GroupMetadata]:
    out: dict[str, GroupMetadata] = {}
    for partition, records in h.log.items():
        out.update(build_groups(records, partition))
    return out


def assert_replay_matches(h: Harness, *, all_groups: bool = False) -> None:
    groups = rebuilt(h)
    live = dict(h.c.groups)
    assert {g: dict(x.offsets) for g, x in live.items() if x.offsets} == {
        g: dict(x.offsets) for g, x in groups.items() if x.offsets
    }
    for group_id, group in live.items():
        if group.generation_id == 0 or (group.state not in AT_REST and not all_groups):
            continue
        assert group_id in groups, f"{group_id} ({group.state.value}) was never written"
        assert projection(group) == projection(groups[group_id]), group_id
        assert groups[group_id].state is (GroupState.STABLE if group.members else GroupState.EMPTY)
    for group_id in groups:
        assert group_id in live, f"{group_id} was deleted but the log still has it"


# Joins and syncs are listed three times: rebalances need several of them in a row to complete.
member_op = st.tuples(st.sampled_from(["join", "join", "join", "sync", "sync", "sync"]), st.integers(0, SLOTS - 1))
ops = st.one_of(
    member_op,
    member_op,
    member_op,
    st.tuples(st.just("heartbeat"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("leave"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("commit"), st.integers(0, SLOTS - 1), st.integers(0, 2), st.booleans(), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([0, 100, 1_000, 3_000, 6_000, 10_000, 31_000])),
    st.tuples(st.just("delete"), st.integers(0, 1)),
    st.tuples(
        st.just("cleanup"),
    ),
    st.tuples(st.just("reload"), st.integers(0, 1)),
    st.tuples(st.just("restart"), st.integers(0, SLOTS - 1)),  # the process restarts: its member id is gone
)


def run(sequence: list[tuple], seed: int) -> Harness:
    config = GroupCoordinatorConfig(
        offsets_topic_num_partitions=2, offsets_retention_minutes=1, group_initial_rebalance_delay_ms=1_000
    )
    h = Harness(config, seed=seed)
    fail_next = {"on": False}
    h.append_outcome = lambda a: E.NOT_ENOUGH_REPLICAS if a.kind == "offset_commit" and fail_next["on"] else E.NONE
    clients = [Client(i) for i in range(SLOTS)]
    waiting: dict[int, tuple[Client, str]] = {}

    def settle() -> None:
        for rid, (client, api) in list(waiting.items()):
            answer = h.answers.get(rid)
            if answer is None:
                continue
            del waiting[rid]
            code = answer["error_code"]
            if api == "join":
                if code == E.MEMBER_ID_REQUIRED:
                    client.member_id = answer["member_id"]
                elif code == E.NONE:
                    client.member_id, client.generation = answer["member_id"], answer["generation_id"]
                    leads = answer["leader"] == client.member_id and not answer["skip_assignment"]
                    client.leads = [m["member_id"] for m in answer["members"]] if leads else None
                elif code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                    client.member_id, client.generation = "", -1
            elif code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                client.member_id, client.generation = "", -1

    for op in sequence:
        kind = op[0]
        if kind in ("join", "sync", "heartbeat", "leave", "commit"):
            client = clients[op[1]]
            if kind == "join":
                rid = h.join(client.group, client.member_id, instance=client.instance, protos=protocols("range"))
            elif kind == "sync":
                assignments = {m: f"{m}@{client.generation}".encode() for m in client.leads or []}
                rid = h.sync(client.member_id, client.generation, client.group, assignments, client.instance)
            elif kind == "heartbeat":
                body = {
                    "group_id": client.group,
                    "member_id": client.member_id,
                    "generation_id": client.generation,
                    "group_instance_id": client.instance,
                }
                rid = h.send("heartbeat", body)
            elif kind == "leave":
                member = {"member_id": client.member_id, "group_instance_id": client.instance}
                rid = h.send("leave_group", {"group_id": client.group, "members": [member]})
            else:
                _, _, partition, as_member, fails = op
                fail_next["on"] = fails
                offsets = {("t", partition): len(h.answers)}
                if as_member:
                    rid = h.commit(offsets, client.group, client.member_id, client.generation, instance=client.instance)
                else:
                    rid = h.commit(offsets, client.group)
                fail_next["on"] = False
            waiting[rid] = (client, kind)
        elif kind == "advance":
            h.advance(op[1])
        elif kind == "restart":
            client = clients[op[1]]
            client.member_id, client.generation, client.leads = "", -1, None
        elif kind == "delete":
            h.send("delete_groups", {"groups_names": [f"g{op[1]}"]})
        elif kind == "cleanup":
            h.apply(h.c.cleanup_group_metadata(h.now))
        elif kind == "reload":
            partition = op[1]
            before = {
                g: projection(x)
                for g, x in h.c.groups.items()
                if x.partition == partition and x.state in AT_REST and x.generation_id > 0
            }
            h.apply(h.c.unload(partition, h.now))
            h.c.begin_loading(partition)
            h.apply(h.c.complete_loading(partition, list(h.log.get(partition, [])), h.now))
            after = {
                g: projection(x) for g, x in h.c.groups.items() if x.partition == partition and x.generation_id > 0
            }
            assert {g: after.get(g) for g in before} == before
        settle()
        assert_replay_matches(h)
    return h


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40), st.integers(0, 2**16))
def test_replaying_the_written_records_rebuilds_the_same_groups_and_offsets(sequence, seed) -> None:
    h = run(sequence, seed)
    # Let every session and rebalance run out: every group comes to rest and must match in full.
    for _ in range(4):
        h.advance(31_000)
    h.apply(h.c.cleanup_group_metadata(h.now))
    assert all(g.state in AT_REST for g in h.c.groups.values())
    assert_replay_matches(h, all_groups=True)
    assert h.c.pending_appends() == 0


def test_a_scripted_sequence_through_rebalances_static_restarts_and_a_reload() -> None:
    sequence = [
        ("join", 0),
        ("join", 2),
        ("join", 4),
        ("join", 0),
        ("join", 2),
        ("advance", 3_000),
        ("sync", 0),
        ("sync", 2),
        ("sync", 4),
        ("commit", 0, 0, True, False),
        ("commit", 2, 1, True, True),
        ("reload", 0),
        ("reload", 1),
        ("heartbeat", 0),
        ("restart", 4),
        ("join", 4),
        ("sync", 4),
        ("leave", 2),
        ("join", 0),
        ("join", 4),
        ("advance", 31_000),
        ("commit", 1, 2, False, False),
        ("delete", 1),
    ]
    h = run(sequence, seed=7)
    assert h.c.group("g0") is not None
    assert_replay_matches(h)
