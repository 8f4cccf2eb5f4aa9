"""The group APIs' translation (broker/kafka/groups.py): every version, through the real codec, both ways."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

from kraftpy.broker.kafka import groups as g
from kraftpy.broker.kafka.shell import group_apis
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import (
    Listener,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader, decode_request, decode_response, encode_request, encode_response

E = ErrorCode
TOPIC_ID = uuid.UUID(int=0xABC)
GONE_ID = uuid.UUID(int=0xDEAD)
# Protocol metadata and assignments are the clients' bytes: any bytes at all must come back unchanged.
OPAQUE = bytes(range(256)) + b"\x00\xff"


def versions(api_key: int) -> list[int]:
    api = SUPPORTED_APIS[api_key]
    return list(range(api.min_version, api.max_version + 1))


def wire_request(api_key: int, version: int, request):
    """`request` as the broker sees it: encoded by the client library, decoded by our codec."""
    frame = encode_request(RequestHeader(api_key, version, 1, "c"), request)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version) == (api_key, version)
    return decoded


def wire_response(api_key: int, version: int, response):
    """`response` as the client reads it: encoded by our codec, decoded by the client library."""
    header = RequestHeader(api_key, version, 9, "c")
    correlation_id, decoded = decode_response(header, encode_response(header, response)[4:])
    assert correlation_id == 9
    return decoded


def image() -> MetadataImage:
    records = [
        RegisterBrokerRecord(1, "inc-1", 1, (Listener("RPC", "10.0.0.1", 19092), Listener("PLAINTEXT", "k1", 9092))),
        RegisterBrokerRecord(2, "inc-2", 2, (Listener("RPC", "10.0.0.2", 19093),)),
        UnfenceBrokerRecord(1, 1),
        UnfenceBrokerRecord(2, 2),
        TopicRecord("orders", TOPIC_ID),
        PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1),
        PartitionRecord(TOPIC_ID, 1, (1,), (1,), 1),
    ]
    return apply_records(MetadataImage.EMPTY, records, offset=len(records) - 1)


# --- FindCoordinator ------------------------------------------------------------------------------


def find_request(version: int, keys: list[str], key_type: int = 0) -> FindCoordinatorRequest:
    if version >= 4:
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys, version=version)
    return FindCoordinatorRequest(key=keys[0], key_type=key_type, version=version)


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_every_version(version: int) -> None:
    keys = ["g1", "g2"] if version >= 4 else ["g1"]
    request = wire_request(10, version, find_request(version, keys))
    assert g.coordinator_keys(request, version) == (0, keys)
    answers = [g.coordinator_at_listener(image(), k, 1, "PLAINTEXT") for k in keys]
    response = wire_response(10, version, g.find_coordinator_response(version, answers))
    found = response.coordinators if version >= 4 else [response]
    assert [(c.node_id, c.host, c.port, c.error_code) for c in found] == [(1, "k1", 9092, 0)] * len(keys)
    if version >= 4:
        assert [c.key for c in found] == keys


def test_find_coordinator_names_the_kafka_listener_or_is_not_available() -> None:
    # Broker 1's first listener is its RPC address: the client must get the listener it came in on.
    assert g.coordinator_at_listener(image(), "g", 1, "PLAINTEXT") == g.CoordinatorAnswer(
        "g", E.NONE, None, 1, "k1", 9092
    )
    missing = g.coordinator_at_listener(image(), "g", 2, "PLAINTEXT")
    assert (missing.error, missing.node_id, missing.port) == (E.COORDINATOR_NOT_AVAILABLE, -1, -1)
    assert g.coordinator_at_listener(image(), "g", 7, "PLAINTEXT").error is E.COORDINATOR_NOT_AVAILABLE


def test_find_coordinator_key_types() -> None:
    assert g.key_type_refusal(0) is None
    assert g.key_type_refusal(1) is None  # transactions
    assert g.key_type_refusal(2).code is E.INVALID_REQUEST
    request = wire_request(10, 0, FindCoordinatorRequest(key="g", version=0))
    assert g.coordinator_keys(request, 0) == (0, ["g"])  # v0 has no key type: a group


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_error_names_every_key(version: int) -> None:
    keys = ["a", "b"] if version >= 4 else ["a"]
    request = wire_request(10, version, find_request(version, keys, key_type=1))
    error = KafkaError("no transactions", E.UNSUPPORTED_VERSION)
    response = wire_response(10, version, g.find_coordinator_error(request, version, error))
    found = response.coordinators if version >= 4 else [response]
    assert [c.error_code for c in found] == [35] * len(keys)
    if version >= 4:
        assert [c.key for c in found] == keys


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------------


@pytest.mark.parametrize("version", versions(11))
def test_join_group_every_version(version: int) -> None:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    request = JoinGroupRequest(
        group_id="grp",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        member_id="m-1",
        group_instance_id="i-1",
        protocol_type="consumer",
        protocols=[P(name="range", metadata=OPAQUE), P(name="sticky", metadata=b"")],
        reason="because",
        version=version,
    )
    body = g.join_group_body(wire_request(11, version, request), version, "client", "10.1.1.1")
    assert body["protocols"] == [{"name": "range", "metadata": OPAQUE}, {"name": "sticky", "metadata": b""}]
    assert body["rebalance_timeout_ms"] == (60_000 if version >= 1 else 10_000)
    assert body["group_instance_id"] == ("i-1" if version >= 5 else None)
    assert body.get("reason") == ("because" if version >= 8 else None)
    assert (body["client_id"], body["client_host"], body["member_id"]) == ("client", "10.1.1.1", "m-1")
    answer = {
        "error_code": 0,
        "generation_id": 3,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": "m-1",
        "skip_assignment": False,
        "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": "i-1", "metadata": OPAQUE}],
    }
    response = wire_response(11, version, g.join_group_response(version, answer))
    assert (response.error_code, response.generation_id, response.protocol_name) == (0, 3, "range")
    assert (response.leader, response.member_id) == ("m-1", "m-1")
    assert [(m.member_id, m.metadata) for m in response.members] == [("m-1", OPAQUE)]
    if version >= 5:
        assert response.members[0].group_instance_id == "i-1"
    if version >= 7:
        assert response.protocol_type == "consumer"


@pytest.mark.parametrize("version", versions(11))
def test_join_group_failure_has_no_protocol_and_encodes(version: int) -> None:
    answer = {"error_code": int(E.UNKNOWN_MEMBER_ID), "member_id": "m", "protocol_name": None, "members": []}
    response = wire_response(11, version, g.join_group_response(version, answer))
    assert response.error_code == E.UNKNOWN_MEMBER_ID
    # Before v7 the protocol name is not nullable: Kafka writes "".
    assert response.protocol_name == ("" if version < 7 else None)


@pytest.mark.parametrize("version", versions(11))
def test_member_id_required_is_answered_for_old_clients(version: int) -> None:
    body = {"group_id": "g", "member_id": ""}
    answer = {"error_code": int(E.MEMBER_ID_REQUIRED), "member_id": "new-id"}
    again = g.rejoin_with_member_id(version, body, answer)
    if version < 4:  # before KIP-394 the broker makes the second join itself
        assert again == {"group_id": "g", "member_id": "new-id"}
    else:
        assert again is None
    assert g.rejoin_with_member_id(version, body, {"error_code": 0, "member_id": "x"}) is None


@pytest.mark.parametrize("version", versions(14))
def test_sync_group_every_version(version: int) -> None:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    request = SyncGroupRequest(
        group_id="grp",
        generation_id=4,
        member_id="m-1",
        group_instance_id="i-1",
        protocol_type="consumer",
        protocol_name="range",
        assignments=[A(member_id="m-1", assignment=OPAQUE), A(member_id="m-2", assignment=b"\x01")],
        version=version,
    )
    body = g.sync_group_body(wire_request(14, version, request), version)
    assert body["assignments"] == [
        {"member_id": "m-1", "assignment": OPAQUE},
        {"member_id": "m-2", "assignment": b"\x01"},
    ]
    assert (body["group_id"], body["generation_id"], body["member_id"]) == ("grp", 4, "m-1")
    assert body["group_instance_id"] == ("i-1" if version >= 3 else None)
    assert (body.get("protocol_type"), body.get("protocol_name")) == (
        ("consumer", "range") if version >= 5 else (None, None)
    )
    answer = {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range", "assignment": OPAQUE}
    response = wire_response(14, version, g.sync_group_response(version, answer))
    assert (response.error_code, response.assignment) == (0, OPAQUE)
    if version >= 5:
        assert (response.protocol_type, response.protocol_name) == ("consumer", "range")


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat_every_version(version: int) -> None:
    request = HeartbeatRequest(group_id="grp", generation_id=2, member_id="m", group_instance_id="i", version=version)
    body = g.heartbeat_body(wire_request(12, version, request), version)
    assert body == {
        "group_id": "grp",
        "generation_id": 2,
        "member_id": "m",
        "group_instance_id": "i" if version >= 3 else None,
    }
    answer = {"error_code": int(E.REBALANCE_IN_PROGRESS)}
    assert wire_response(12, version, g.heartbeat_response(version, answer)).error_code == E.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("version", versions(13))
def test_leave_group_every_version(version: int) -> None:
    M = LeaveGroupRequest.MemberIdentity
    if version < 3:
        request = LeaveGroupRequest(group_id="grp", member_id="m-1", version=version)
        expected = [{"member_id": "m-1", "group_instance_id": None}]
    else:
        members = [M(member_id="m-1", group_instance_id=None, reason="bye"), M(member_id="", group_instance_id="i-2")]
        request = LeaveGroupRequest(group_id="grp", members=members, version=version)
        expected = [
            {"member_id": "m-1", "group_instance_id": None, **({"reason": "bye"} if version >= 5 else {})},
            {"member_id": "", "group_instance_id": "i-2"},
        ]
    body = g.leave_group_body(wire_request(13, version, request), version)
    assert body == {"group_id": "grp", "members": expected}
    answer = {
        "error_code": 0,
        "members": [
            {"member_id": "m-1", "group_instance_id": None, "error_code": int(E.UNKNOWN_MEMBER_ID)},
            {"member_id": "m-2", "group_instance_id": "i-2", "error_code": 0},
        ],
    }
    response = wire_response(13, version, g.leave_group_response(version, answer))
    if version < 3:  # one member, no list: its error is the answer's
        assert response.error_code == E.UNKNOWN_MEMBER_ID
    else:
        assert response.error_code == 0
        got = [(m.member_id, m.group_instance_id, m.error_code) for m in response.members]
        assert got == [("m-1", None, E.UNKNOWN_MEMBER_ID), ("m-2", "i-2", 0)]


# --- OffsetCommit / OffsetFetch ------------------------------------------------------------------


def commit_request(version: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    parts = [
        P(partition_index=0, committed_offset=42, committed_leader_epoch=7, committed_metadata="md"),
        P(partition_index=1, committed_offset=5, committed_leader_epoch=-1, committed_metadata=None),
    ]
    topics = [T(name="orders", topic_id=TOPIC_ID, partitions=parts)]
    topics.append(
        T(name="gone", topic_id=GONE_ID, partitions=[P(partition_index=3, committed_offset=1, committed_metadata=None)])
    )
    return OffsetCommitRequest(
        group_id="grp",
        generation_id_or_member_epoch=6,
        member_id="m",
        group_instance_id="i",
        retention_time_ms=-1,
        topics=topics,
        version=version,
    )


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit_every_version(version: int) -> None:
    request = wire_request(8, version, commit_request(version))
    body, refs = g.offset_commit_body(request, version, image())
    epoch = {"committed_leader_epoch": 7} if version >= 6 else {}
    epoch_none = {"committed_leader_epoch": -1} if version >= 6 else {}
    orders = {
        "name": "orders",
        "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_metadata": "md", **epoch},
            {"partition_index": 1, "committed_offset": 5, "committed_metadata": None, **epoch_none},
        ],
    }
    # "gone" is not in the image: answered here (by id from v10, by name before), never committed.
    assert body["topics"] == [orders]
    assert (refs.unknown, refs.missing) == (({GONE_ID: [3]}, {}) if version >= 10 else ({}, {"gone": [3]}))
    assert (body["group_id"], body["generation_id"], body["member_id"]) == ("grp", 6, "m")
    assert body["group_instance_id"] == ("i" if version >= 7 else None)
    answer = {
        "error_code": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [{"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 12}],
            }
        ],
    }
    response = wire_response(8, version, g.offset_commit_response(version, answer, refs))
    got = {
        (t.topic_id if version >= 10 else t.name, p.partition_index): p.error_code
        for t in response.topics
        for p in t.partitions
    }
    key = TOPIC_ID if version >= 10 else "orders"
    expected = {(key, 0): 0, (key, 1): 12}
    if version >= 10:
        expected[(GONE_ID, 3)] = E.UNKNOWN_TOPIC_ID
    else:
        expected[("gone", 3)] = E.UNKNOWN_TOPIC_OR_PARTITION
    assert got == expected


def fetch_request(version: int, topics_null: bool = False) -> OffsetFetchRequest:
    if version < 8:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        topics = None if topics_null else [T(name="orders", partition_indexes=[0, 1])]
        return OffsetFetchRequest(group_id="grp", topics=topics, require_stable=True, version=version)
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    T = G.OffsetFetchRequestTopics
    topics = [T(name="orders", topic_id=TOPIC_ID, partition_indexes=[0, 1])]
    if version >= 10:
        topics.append(T(topic_id=GONE_ID, partition_indexes=[2]))
    groups = [G(group_id="grp", member_id=None, member_epoch=-1, topics=None if topics_null else topics)]
    groups.append(G(group_id="other", member_id=None, member_epoch=-1, topics=None))
    return OffsetFetchRequest(groups=groups, require_stable=True, version=version)


FETCHED = {
    "error_code": 0,
    "topics": [
        {
            "name": "orders",
            "partitions": [
                {
                    "partition_index": 0,
                    "committed_offset": 42,
                    "committed_leader_epoch": 7,
                    "metadata": "md",
                    "error_code": 0,
                },
                {
                    "partition_index": 1,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": 0,
                },
            ],
        }
    ],
}


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch_every_version(version: int) -> None:
    groups = g.offset_fetch_groups(wire_request(9, version, fetch_request(version)), version, image())
    stable = version >= 7
    assert groups[0].body == {
        "group_id": "grp",
        "require_stable": stable,
        "topics": [{"name": "orders", "partition_indexes": [0, 1]}],
    }
    if version >= 8:  # several groups per request (KIP-709); null topics: every committed offset
        assert [x.body for x in groups[1:]] == [{"group_id": "other", "require_stable": True}]
    else:
        assert len(groups) == 1
    if version >= 10:
        assert groups[0].refs.unknown == {GONE_ID: [2]}
    other = {"error_code": int(E.NOT_COORDINATOR), "topics": []}
    answers = [(groups[0], FETCHED)] + [(x, other) for x in groups[1:]]
    response = wire_response(9, version, g.offset_fetch_response(version, answers))
    read = response.groups[0] if version >= 8 else response
    key = TOPIC_ID if version >= 10 else "orders"
    rows = {
        (t.topic_id if version >= 10 else t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in read.topics
        for p in t.partitions
    }
    expected = {(key, 0): (42, "md", 0), (key, 1): (-1, "", 0)}
    if version >= 10:
        expected[(GONE_ID, 2)] = (-1, "", E.UNKNOWN_TOPIC_ID)
    assert rows == expected
    if version >= 5:
        assert [p.committed_leader_epoch for t in read.topics for p in t.partitions][:2] == [7, -1]
    if version >= 8:
        assert [(x.group_id, x.error_code) for x in response.groups] == [("grp", 0), ("other", E.NOT_COORDINATOR)]


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch_group_error(version: int) -> None:
    groups = g.offset_fetch_groups(wire_request(9, version, fetch_request(version)), version, image())
    answer = {"error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS), "topics": []}
    response = wire_response(9, version, g.offset_fetch_response(version, [(x, answer) for x in groups]))
    read = response.groups[0] if version >= 8 else response
    if version < 2:  # no group-level error yet: it is on every partition asked for
        assert [p.error_code for t in read.topics for p in t.partitions] == [14, 14]
    else:
        assert read.error_code == E.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize("version", [v for v in versions(9) if v >= 2])
def test_offset_fetch_null_topics_asks_for_every_offset(version: int) -> None:
    groups = g.offset_fetch_groups(wire_request(9, version, fetch_request(version, topics_null=True)), version, image())
    assert "topics" not in groups[0].body


# --- DescribeGroups / ListGroups / DeleteGroups --------------------------------------------------


def described(state: str, members: list[dict]) -> dict:
    return {
        "error_code": 0,
        "group_id": "grp",
        "group_state": state,
        "protocol_type": "consumer" if members else "",
        "protocol_data": "range" if members else "",
        "members": members,
    }


MEMBER = {
    "member_id": "m-1",
    "group_instance_id": "i-1",
    "client_id": "cl",
    "client_host": "10.0.0.9",
    "member_metadata": OPAQUE,
    "member_assignment": OPAQUE[::-1],
}


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups_every_version(version: int) -> None:
    request = wire_request(
        15, version, DescribeGroupsRequest(groups=["grp", "gone"], include_authorized_operations=True, version=version)
    )
    assert g.describe_groups_body(request, version) == {"groups": ["grp", "gone"]}
    answer = {"groups": [described("Stable", [MEMBER]), {**described("Dead", []), "group_id": "gone"}]}
    response = wire_response(15, version, g.describe_groups_response(version, request, answer))
    stable, gone = response.groups
    assert (stable.error_code, stable.group_state, stable.protocol_data) == (0, "Stable", "range")
    m = stable.members[0]
    assert (m.member_id, m.client_id, m.client_host) == ("m-1", "cl", "10.0.0.9")
    assert (m.member_metadata, m.member_assignment) == (OPAQUE, OPAQUE[::-1])
    if version >= 4:
        assert m.group_instance_id == "i-1"
    if version >= 3:
        assert stable.authorized_operations == {3, 6, 8}  # READ, DELETE, DESCRIBE: no authorizer
    # KIP-1043: from v6 a group that does not exist is GROUP_ID_NOT_FOUND, before it is "Dead".
    assert gone.error_code == (E.GROUP_ID_NOT_FOUND if version >= 6 else 0)
    assert gone.group_state == "Dead"


@pytest.mark.parametrize("version", versions(16))
def test_list_groups_every_version(version: int) -> None:
    request = wire_request(
        16, version, ListGroupsRequest(states_filter=["stable", "Empty"], types_filter=["Classic"], version=version)
    )
    ask = g.list_groups_ask(request, version)
    assert ask.body == ({"states_filter": ["stable", "Empty"]} if version >= 4 else {})
    answer = {"error_code": 0, "groups": [{"group_id": "grp", "protocol_type": "consumer", "group_state": "Stable"}]}
    response = wire_response(16, version, g.list_groups_response(version, answer))
    (listed,) = response.groups
    assert (listed.group_id, listed.protocol_type) == ("grp", "consumer")
    if version >= 4:
        assert listed.group_state == "Stable"
    if version >= 5:
        assert listed.group_type == "classic"


def test_list_groups_filters_that_match_nothing_are_not_forwarded() -> None:
    ask = g.list_groups_ask(ListGroupsRequest(states_filter=[], types_filter=["consumer"], version=5), 5)
    assert ask.body is None  # only classic groups here
    assert g.list_groups_ask(ListGroupsRequest(states_filter=["Assigning"], version=4), 4).body is None
    # An unknown state next to a known one is dropped, as Kafka matches it against nothing.
    assert g.list_groups_ask(ListGroupsRequest(states_filter=["Assigning", "Empty"], version=4), 4).body == {
        "states_filter": ["Empty"]
    }


@pytest.mark.parametrize("version", versions(42))
def test_delete_groups_every_version(version: int) -> None:
    request = wire_request(42, version, DeleteGroupsRequest(groups_names=["a", "b"], version=version))
    assert g.delete_groups_body(request, version) == {"groups_names": ["a", "b"]}
    answer = {"results": [{"group_id": "a", "error_code": 0}, {"group_id": "b", "error_code": int(E.NON_EMPTY_GROUP)}]}
    response = wire_response(42, version, g.delete_groups_response(version, answer))
    assert [(r.group_id, r.error_code) for r in response.results] == [("a", 0), ("b", E.NON_EMPTY_GROUP)]


def test_offset_delete_v0() -> None:
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    P = T.OffsetDeleteRequestPartition
    request = OffsetDeleteRequest(
        group_id="grp", topics=[T(name="t", partitions=[P(partition_index=0), P(partition_index=4)])]
    )
    body = g.offset_delete_body(wire_request(47, 0, request), 0)
    assert body == {
        "group_id": "grp",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 4}]}],
    }
    answer = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "error_code": 0}, {"partition_index": 4, "error_code": 67}],
            }
        ],
    }
    response = wire_response(47, 0, g.offset_delete_response(0, answer))
    assert response.error_code == 0
    assert [(p.partition_index, p.error_code) for t in response.topics for p in t.partitions] == [(0, 0), (4, 67)]


# --- error responses: every API, every version, the error on every item ------------------------------

REQUESTS = {
    10: lambda v: find_request(v, ["a", "b"] if v >= 4 else ["a"]),
    11: lambda v: JoinGroupRequest(
        group_id="g", session_timeout_ms=1, member_id="m", protocol_type="c", protocols=[], version=v
    ),
    14: lambda v: SyncGroupRequest(group_id="g", generation_id=1, member_id="m", assignments=[], version=v),
    12: lambda v: HeartbeatRequest(group_id="g", generation_id=1, member_id="m", version=v),
    13: lambda v: LeaveGroupRequest(group_id="g", member_id="m", members=[], version=v),
    8: commit_request,
    9: fetch_request,
    15: lambda v: DescribeGroupsRequest(groups=["a", "b"], version=v),
    16: lambda v: ListGroupsRequest(version=v),
    42: lambda v: DeleteGroupsRequest(groups_names=["a", "b"], version=v),
    47: lambda v: OffsetDeleteRequest(group_id="g", topics=[], version=v),
}


def error_codes(message) -> list[int]:
    """Every error_code in a decoded response, depth first."""
    out = []
    for name in type(message).fields if hasattr(type(message), "fields") else []:
        value = getattr(message, name, None)
        if name == "error_code" and value is not None:
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                out += error_codes(item)
    return out


@pytest.mark.parametrize(("api_key", "version"), [(k, v) for k in sorted(group_apis.HANDLERS) for v in versions(k)])
def test_every_error_response_encodes_and_carries_the_error(api_key: int, version: int) -> None:
    request = wire_request(api_key, version, REQUESTS[api_key](version))
    error = KafkaError("bad", E.GROUP_AUTHORIZATION_FAILED)
    response = wire_response(api_key, version, group_apis.HANDLERS[api_key].error_response(request, version, error))
    codes = error_codes(response)
    assert codes and set(codes) <= {0, int(E.GROUP_AUTHORIZATION_FAILED)}, codes
    assert int(E.GROUP_AUTHORIZATION_FAILED) in codes
