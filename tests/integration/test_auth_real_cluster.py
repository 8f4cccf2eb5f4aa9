"""Issue 11 §5 on a real 3-node cluster: every forged cluster-internal or admin request is refused, and
everything works with the credentials `kraftpy cluster start` made (docs/security.md).

Each attack is what a local process that reaches a node's port could send on b78d6bc, where it was
accepted: a fake broker registration, a heartbeat asking to shut a broker down, Raft votes and
BeginQuorumEpoch with a huge epoch, config changes, an unclean election, a topic deletion, a follower
fetch. After each, the cluster's state is unchanged and it keeps serving.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from kraftpy.client.admin.protocol import elect_leaders_request
from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.protocol import auth
from kraftpy.protocol.access import REPLICA_FETCH_PATH
from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import now_ms
from kraftpy.protocol.shell import rpc
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import TopicPartition
from tests.integration.test_cluster_support import LocalCluster, wait_for

TOPIC = "guarded"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("auth") / "cluster") as c:
        c.ok("topics", "create", TOPIC, "--partitions", "2", "--replication-factor", "3")
        yield c


def address(cluster: LocalCluster, node_id: int) -> tuple[str, int]:
    entry = next(n for n in cluster.layout().nodes if n.node_id == node_id)
    return (entry.host, entry.port)


def call(
    target: tuple[str, int], path: str, body: dict[str, Any], *, credential: Credential | None = None, stream=False
) -> dict[str, Any]:
    """One call, answered as a map (errors included); a KafkaError the client raises comes back as its map."""

    async def go() -> dict[str, Any]:
        client = RpcClient(request_timeout_ms=5000, credential=credential, peer_streams=stream)
        try:
            return await client.call(target, path, body, raise_errors=False)
        except KafkaError as exc:
            return exc.to_dict()
        finally:
            await client.close()

    return asyncio.run(go())


def refused(answer: dict[str, Any], code: ErrorCode) -> None:
    assert answer.get("error_code") == int(code), answer
    assert answer.get("message"), answer  # a readable reason


def test_fake_broker_registration_is_refused(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    body = {
        "broker_id": 99,
        "cluster_id": cluster.layout().cluster_id,
        "incarnation_id": "fake-broker-incarnation",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}],
        "rack": None,
    }
    refused(
        call(address(cluster, leader), "/controller/broker_registration", body), ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    # An admin credential is not a node's: still refused.
    answer = call(address(cluster, leader), "/controller/broker_registration", body, credential=cluster.credential())
    refused(answer, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    status = cluster.status(leader)
    assert status is not None and 99 not in status["controller"]["fenced_brokers"], status["controller"]


def test_forged_heartbeat_with_want_shut_down_is_refused(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    victim = next(n.node_id for n in cluster.layout().nodes if n.node_id != leader)
    victim_status = cluster.status(victim)
    assert victim_status is not None
    body = {
        "broker_id": victim,
        "broker_epoch": victim_status["broker"]["broker_epoch"],
        "current_metadata_offset": victim_status["broker"]["metadata_offset"],
        "want_fence": False,
        "want_shut_down": True,
    }
    for stream in (False, True):
        answer = call(address(cluster, leader), "/controller/broker_heartbeat", body, stream=stream)
        refused(answer, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    status = cluster.status(leader)
    assert status is not None and status["controller"]["fenced_brokers"][victim] is False
    assert cluster.health()["healthy"] is True


def test_forged_raft_vote_and_begin_quorum_epoch_are_refused(cluster: LocalCluster) -> None:
    cluster_id = cluster.layout().cluster_id
    before = cluster.status(1)
    assert before is not None
    epoch = before["raft"]["epoch"]
    huge = 2**31 - 1
    for node_id in (1, 2, 3):
        target = address(cluster, node_id)
        begin = {"cluster_id": cluster_id, "src": 2, "dst": node_id, "correlation_id": 1, "epoch": huge, "leader_id": 2}
        vote = {
            "cluster_id": cluster_id, "src": 2, "dst": node_id, "correlation_id": 2, "candidate_epoch": huge,
            "last_epoch": huge, "end_offset": 2**62, "pre_vote": False,
        }  # fmt: skip
        for stream in (False, True):  # over HTTP and over an (anonymous) stream, as Raft peers call
            refused(
                call(target, "/raft/begin_quorum_epoch", begin, stream=stream), ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
            refused(call(target, "/raft/vote", vote, stream=stream), ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        # An operator's credential does not make a Raft peer either.
        answer = call(target, "/raft/begin_quorum_epoch", begin, credential=cluster.credential())
        refused(answer, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    for node_id in (1, 2, 3):
        status = cluster.status(node_id)
        assert status is not None and status["raft"]["epoch"] < huge, status["raft"]
    assert cluster.health()["healthy"] is True
    assert epoch < huge


def test_config_set_without_credential_is_refused(cluster: LocalCluster) -> None:
    # The RPC's admin route; the CLI speaks Kafka's protocol, whose PLAINTEXT listener has no authorizer
    # yet (docs/kafka-listener.md, "Security"), so the guard is tested where it is.
    leader = cluster.controller_id()
    body = {
        "resources": [{"resource_type": "topic", "resource_name": TOPIC, "configs": [
            {"name": "retention_ms", "op": "set", "value": 1000},
        ]}],
        "validate_only": False,
    }  # fmt: skip
    answer = call(address(cluster, leader), "/controller/incremental_alter_configs", body)
    refused(answer, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    described = cluster.ok("configs", "describe", "--topic", TOPIC, "--json").json()
    assert "1000" not in str(described)
    answer = call(
        address(cluster, leader), "/controller/incremental_alter_configs", body, credential=cluster.credential()
    )
    assert answer.get("error_code") == 0 and not answer["resources"][0].get("error_code"), answer
    cluster.ok("configs", "set", "--topic", TOPIC, "retention_ms=86400000")
    assert "86400000" in str(cluster.ok("configs", "describe", "--topic", TOPIC, "--json").json())


def test_unclean_election_without_credential_is_refused(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    body = elect_leaders_request("unclean", [TopicPartition(TOPIC, 0)])
    refused(call(address(cluster, leader), "/controller/elect_leaders", body), ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    answer = call(address(cluster, leader), "/controller/elect_leaders", body, credential=cluster.credential())
    assert answer["error_code"] == 0, answer  # with the admin credential it is decided (per-partition results)


def test_topic_delete_without_credential_is_refused(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "doomed", "--partitions", "1", "--replication-factor", "1")
    leader = address(cluster, cluster.controller_id())
    refused(
        call(leader, "/controller/delete_topics", {"topic_names": ["doomed"]}), ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    assert cluster.describe("doomed")  # still there
    sneaky = {"topics": [{"name": "sneaky", "num_partitions": 1, "replication_factor": 1}], "validate_only": False}
    refused(call(leader, "/controller/create_topics", sneaky), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    answer = call(leader, "/controller/delete_topics", {"topic_names": ["doomed"]}, credential=cluster.credential())
    assert answer.get("error_code") == 0 and not answer["topics"][0].get("error_code"), answer


def test_follower_fetch_without_credential_is_refused_and_the_rpc_serves_no_client_route(
    cluster: LocalCluster,
) -> None:
    target = address(cluster, 1)
    fetch = {
        "replica_id": 2, "replica_epoch": 1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"name": TOPIC, "partitions": [{
            "partition": 0, "fetch_offset": 10**12, "current_leader_epoch": -1, "last_fetched_epoch": -1,
            "log_start_offset": 0, "partition_max_bytes": 1 << 20,
        }]}],
    }  # fmt: skip
    for stream in (False, True):
        refused(call(target, REPLICA_FETCH_PATH, fetch, stream=stream), ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    consumer_fetch = {**fetch, "replica_id": -1}
    consumer_fetch["topics"][0]["partitions"][0]["fetch_offset"] = 0
    # A consumer's fetch is the Kafka listener's, open there; the RPC refuses it even from a node.
    refused(
        call(target, REPLICA_FETCH_PATH, consumer_fetch, credential=cluster.credential("node")),
        ErrorCode.INVALID_REQUEST,
    )
    kafka = next((n.host, n.kafka_port) for n in cluster.layout().nodes if n.node_id == 1)
    assert kafka_call(kafka, "/kafka/fetch", consumer_fetch)["error_code"] == 0
    # Group deletion (an admin request) was a CBOR route here: the RPC no longer knows it.
    refused(call(target, "/kafka/delete_groups", {"groups_names": ["g"]}), ErrorCode.INVALID_REQUEST)


def kafka_call(target: tuple[str, int], path: str, body: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        client = KafkaTransport(request_timeout_ms=5000)
        try:
            return await client.call(target, path, body, raise_errors=False)
        finally:
            await client.close()

    return asyncio.run(go())


def test_replayed_altered_and_unknown_signatures_are_refused(cluster: LocalCluster) -> None:
    host, port = address(cluster, cluster.controller_id())
    node = cluster.credential("node")
    body = rpc.encode({"topics": [{"name": "replayed", "num_partitions": 1, "replication_factor": 1}]})
    path = "/controller/create_topics"
    headers = {"Content-Type": rpc.CONTENT_TYPE, "Host": f"{host}:{port}"}

    async def post(extra: dict[str, str], data: bytes = body) -> dict[str, Any]:
        url = f"http://{host}:{port}{path}"
        async with aiohttp.ClientSession() as session, session.post(url, data=data, headers={**headers, **extra}) as r:
            return rpc.decode_map(await r.read())

    signed = {auth.HEADER: auth.sign(node, "POST", f"{host}:{port}", path, body, now_ms())}
    assert asyncio.run(post(signed))["error_code"] == 0
    refused(asyncio.run(post(signed)), ErrorCode.SASL_AUTHENTICATION_FAILED)  # the same request again
    altered = rpc.encode({"topics": [{"name": "altered", "num_partitions": 1, "replication_factor": 1}]})
    fresh = {auth.HEADER: auth.sign(node, "POST", f"{host}:{port}", path, body, now_ms())}
    refused(asyncio.run(post(fresh, altered)), ErrorCode.SASL_AUTHENTICATION_FAILED)  # body swapped
    stale = {auth.HEADER: auth.sign(node, "POST", f"{host}:{port}", path, body, now_ms() - 600_000)}
    refused(asyncio.run(post(stale)), ErrorCode.SASL_AUTHENTICATION_FAILED)
    impostor = Credential.generate("node", "cluster")  # right name, wrong key
    forged = {auth.HEADER: auth.sign(impostor, "POST", f"{host}:{port}", path, body, now_ms())}
    refused(asyncio.run(post(forged)), ErrorCode.SASL_AUTHENTICATION_FAILED)
    # A stream opened with the wrong key is refused at its upgrade; the client says so (no HTTP fallback).
    answer = call((host, port), "/raft/vote", {}, credential=impostor, stream=True)
    refused(answer, ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert "altered" not in cluster.ok("topics", "list").stdout.split()


def test_a_20001_bit_broker_id_is_invalid_even_from_a_node(cluster: LocalCluster) -> None:
    leader = cluster.controller_id()
    body = {
        "broker_id": 2**20000,
        "cluster_id": cluster.layout().cluster_id,
        "incarnation_id": "huge",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}],
    }
    answer = call(
        address(cluster, leader), "/controller/broker_registration", body, credential=cluster.credential("node")
    )
    refused(answer, ErrorCode.INVALID_REQUEST)
    assert "broker_id" in answer["message"]
    status = cluster.status(leader)
    assert status is not None and len(status["controller"]["fenced_brokers"]) == 3


def test_the_cluster_keeps_serving_and_counts_refusals(cluster: LocalCluster) -> None:
    wait_for("a healthy cluster", lambda: cluster.health()["healthy"])
    refusals = sum((cluster.status(n.node_id) or {}).get("auth", {}).get("refused", 0) for n in cluster.layout().nodes)
    assert refusals > 0
    cluster.ok("topics", "create", "after-attacks", "--partitions", "3", "--replication-factor", "3")
    assert len(cluster.describe("after-attacks")["partitions"]) == 3
