"""The broker side of consumer groups on a real 3-node cluster (`kraftpy cluster start`), request by
request on the Kafka listeners (through the client's transport, kraftpy.client.shell.kafka_transport).

FindCoordinator creates `__consumer_offsets` once even when every broker is asked at the same
moment; a member joins, syncs, heartbeats, commits and fetches its offsets; a bad request is
answered INVALID_REQUEST, the nodes' RPC serves no group request, and the broker keeps serving;
and when the coordinator's node is SIGKILLed, FindCoordinator points at the partition's new
leader, which has reloaded the group and its committed offsets from the log. Every wait is a
bounded poll; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import cbor2
import pytest

from kraftpy.broker.groups import partition_for
from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.protocol.errors import ErrorCode
from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow
OFFSETS_TOPIC = "__consumer_offsets"
SESSION_MS = 10_000
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.REQUEST_TIMED_OUT,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups") / "cluster") as c:
        # Kafka refuses commits for a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION).
        c.ok("topics", "create", "orders", "--partitions", "4", "--replication-factor", "3")
        yield c


def port_of(cluster: LocalCluster, node_id: int) -> int:
    """The node's Kafka listener."""
    return next(n.kafka_port for n in cluster.layout().nodes if n.node_id == node_id)


async def call(port: int, api: str, body: dict[str, Any]) -> dict[str, Any]:
    client = KafkaTransport(request_timeout_ms=15_000)
    try:
        return await client.call(("127.0.0.1", port), f"/kafka/{api}", body, raise_errors=False)
    except Exception as exc:  # a node that is dying or restarting
        return {"error_code": int(getattr(exc, "code", ErrorCode.NETWORK_EXCEPTION)), "message": str(exc)}
    finally:
        await client.close()


def rpc(port: int, api: str, body: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(call(port, api, body))


def until_ok(port: int, api: str, body: dict[str, Any], what: str) -> dict[str, Any]:
    """Call until the answer is not a retriable coordinator error; return it (bounded)."""

    def probe() -> dict[str, Any] | None:
        answer = rpc(port, api, body)
        return None if answer["error_code"] in RETRIABLE else answer

    return wait_for(what, probe, timeout_s=60)


def find_coordinator(cluster: LocalCluster, group: str, via: int) -> dict[str, Any]:
    return until_ok(port_of(cluster, via), "find_coordinator", {"key": group, "key_type": 0}, f"coordinator of {group}")


def join_body(group: str, member_id: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": SESSION_MS,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"subscription"}],
        "client_id": "groups-it",
        "reason": "",
    }


def join_and_sync(port: int, group: str) -> tuple[str, int]:
    """A one-member group, Stable: (member id, generation)."""
    first = until_ok(port, "join_group", join_body(group, ""), f"first join of {group}")
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, first
    member = first["member_id"]
    joined = rpc(port, "join_group", join_body(group, member))
    assert joined["error_code"] == 0 and joined["leader"] == member, joined
    generation = joined["generation_id"]
    synced = rpc(
        port,
        "sync_group",
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"assignment"}],
        },
    )
    assert synced["error_code"] == 0 and synced["assignment"] == b"assignment", synced
    return member, generation


def commit(port: int, group: str, member: str, generation: int, offsets: dict[int, int]) -> dict[str, Any]:
    partitions = [
        {"partition_index": p, "committed_offset": o, "committed_leader_epoch": 3, "committed_metadata": f"m{p}"}
        for p, o in offsets.items()
    ]
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": partitions}],
    }
    return rpc(port, "offset_commit", body)


def fetched(answer: dict[str, Any]) -> dict[int, tuple[int, int, str]]:
    assert answer["error_code"] == 0, answer
    return {
        p["partition_index"]: (p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
        for t in answer["topics"]
        if t["name"] == "orders"
        for p in t["partitions"]
    }


def test_concurrent_first_find_coordinator_creates_the_offsets_topic_once(cluster: LocalCluster) -> None:
    ports = [n.kafka_port for n in cluster.layout().nodes]

    async def everyone_at_once() -> list[dict[str, Any]]:
        return await asyncio.gather(*(call(p, "find_coordinator", {"key": "race", "key_type": 0}) for p in ports))

    first = asyncio.run(everyone_at_once())
    assert all(a["error_code"] in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE) for a in first), first

    answers = [find_coordinator(cluster, "race", via=n.node_id) for n in cluster.layout().nodes]
    assert len({(a["node_id"], a["host"], a["port"]) for a in answers}) == 1, answers  # every broker agrees

    topic = cluster.describe(OFFSETS_TOPIC)
    assert len(topic["partitions"]) == 50
    assert {len(p["replicas"]) for p in topic["partitions"]} == {3}
    assert topic["configs"]["cleanup_policy"] == "compact"
    assert int(topic["configs"]["segment_bytes"]) == 104_857_600
    assert topic["partitions"][partition_for("race", 50)]["leader"] == answers[0]["node_id"]
    assert cluster.ok("topics", "list", "--json").json()["topics"].count(OFFSETS_TOPIC) == 1
    metadata = rpc(ports[0], "metadata", {"topics": [OFFSETS_TOPIC, "nope"]})
    assert [t["is_internal"] for t in metadata["topics"]] == [True, False]
    for node in cluster.layout().nodes:  # every broker's creation attempt ended in success or "already exists"
        log = cluster.log_text(node.node_id)
        assert "creating __consumer_offsets failed: {" not in log, log[-2000:]


def test_join_sync_heartbeat_commit_fetch_round_trip(cluster: LocalCluster) -> None:
    group = "round-trip"
    coordinator = find_coordinator(cluster, group, via=1)
    port = coordinator["port"]
    member, generation = join_and_sync(port, group)

    heartbeat = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None}
    assert rpc(port, "heartbeat", heartbeat)["error_code"] == 0
    stale = rpc(port, "heartbeat", {**heartbeat, "generation_id": generation - 1})
    assert stale["error_code"] == ErrorCode.ILLEGAL_GENERATION

    answer = commit(port, group, member, generation, {0: 10, 1: 20})
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0, 0], answer
    got = fetched(rpc(port, "offset_fetch", {"group_id": group, "topics": None, "require_stable": True}))
    assert got == {0: (10, 3, "m0"), 1: (20, 3, "m1")}

    described = rpc(port, "describe_groups", {"groups": [group]})["groups"][0]
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    assert [(m["member_id"], m["client_host"]) for m in described["members"]] == [(member, "127.0.0.1")]

    # Every broker answers ListGroups for its own groups: only the coordinator lists this one.
    for node in cluster.layout().nodes:
        groups = rpc(node.kafka_port, "list_groups", {})
        assert groups["error_code"] == 0, groups
        listed = group in [g["group_id"] for g in groups["groups"]]
        assert listed == (node.kafka_port == port), (node.node_id, groups)

    # Another broker is not the coordinator.
    other = next(n.kafka_port for n in cluster.layout().nodes if n.kafka_port != port)
    assert rpc(other, "heartbeat", heartbeat)["error_code"] == ErrorCode.NOT_COORDINATOR

    status = cluster.status(coordinator["node_id"])
    groups_status = status["broker"]["replicas"]["groups"]
    assert groups_status["groups"] >= 1 and groups_status["partitions_loaded"] >= 1, groups_status


def raw_post(port: int, path: str, data: bytes) -> tuple[int, dict[str, Any]]:
    async def post() -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{port}{path}", data=data, timeout=aiohttp.ClientTimeout(total=10)) as resp,
        ):
            return resp.status, cbor2.loads(await resp.read())

    return asyncio.run(post())


def test_bad_requests_are_refused_and_the_broker_keeps_serving(cluster: LocalCluster) -> None:
    group = "malformed"
    port = find_coordinator(cluster, group, via=2)["port"]
    refused = rpc(port, "find_coordinator", {"key": group, "key_type": 7})
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST and refused["message"], refused
    # The group APIs are the Kafka listener's only: the node's RPC port answers them as unknown routes.
    node = next(n for n in cluster.layout().nodes if n.kafka_port == port)
    for path in ("/kafka/join_group", "/kafka/offset_commit"):
        status, answer = raw_post(node.port, path, cbor2.dumps(join_body(group, "")))
        assert (status, answer["error_code"]) == (400, ErrorCode.INVALID_REQUEST), answer
        assert f"unknown request POST {path}" in answer["message"], answer

    # Still serving, and nothing of the bad requests was kept.
    member, generation = join_and_sync(port, group)
    assert commit(port, group, member, generation, {0: 1})["topics"][0]["partitions"][0]["error_code"] == 0
    described = rpc(port, "describe_groups", {"groups": [group]})["groups"][0]
    assert [m["member_id"] for m in described["members"]] == [member]


def test_sigkill_the_coordinator_moves_the_group_with_its_offsets(cluster: LocalCluster) -> None:
    group = "failover"
    before = find_coordinator(cluster, group, via=1)
    victim = before["node_id"]
    member, generation = join_and_sync(before["port"], group)
    offsets = {p: 100 + p for p in range(4)}
    answer = commit(before["port"], group, member, generation, offsets)
    assert all(p["error_code"] == 0 for p in answer["topics"][0]["partitions"]), answer

    cluster.kill(victim)
    survivor = next(n.node_id for n in cluster.layout().nodes if n.node_id != victim)

    def moved() -> dict[str, Any] | None:
        answer = rpc(port_of(cluster, survivor), "find_coordinator", {"key": group, "key_type": 0})
        return answer if answer["error_code"] == 0 and answer["node_id"] != victim else None

    after = wait_for(f"the coordinator of {group} to move off node {victim}", moved, timeout_s=60)
    leader = cluster.describe(OFFSETS_TOPIC)["partitions"][partition_for(group, 50)]["leader"]
    assert after["node_id"] == leader

    body = {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0, 1, 2, 3]}]}
    got = fetched(until_ok(after["port"], "offset_fetch", body, "offsets from the new coordinator"))
    assert got == {p: (o, 3, f"m{p}") for p, o in offsets.items()}
    # The group metadata came back too: the member is there, Stable, until its session lapses.
    described = rpc(after["port"], "describe_groups", {"groups": [group]})["groups"][0]
    assert described["group_state"] == "Stable", described
    assert [m["member_id"] for m in described["members"]] == [member]
    # Its heartbeat keeps it; a commit at its generation is accepted by the new coordinator.
    heartbeat = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None}
    assert rpc(after["port"], "heartbeat", heartbeat)["error_code"] == 0
    answer = commit(after["port"], group, member, generation, {0: 500})
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer
