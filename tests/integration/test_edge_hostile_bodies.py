"""Every route of a real node answers hostile field values with INVALID_REQUEST, never a crash
(issue 11, section 4).

One `kraftpy` node (broker and controller) from `cluster start`. For every route its internal
RPC serves (Raft, controller, follower fetch, transaction markers, admin) a well-formed template body has one field,
anywhere in it, replaced by a hostile value: an integer wider than the field's width or than
int64, a boolean for a number, a float, a string, a list, a map, null. The answer must never be
UNKNOWN_SERVER_ERROR or HTTP 500; a value no field may hold (an integer beyond int64, an id or
epoch beyond int32) must be INVALID_REQUEST naming the field; and the node keeps serving.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.metadata.controller import wire
from kraftpy.protocol import auth
from kraftpy.protocol.access import REPLICA_FETCH_PATH, WRITE_TXN_MARKERS_PATH
from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX
from kraftpy.raft import codec
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    VoteRequest,
    to_dict,
)
from tests.integration.test_cluster_support import LocalCluster

pytestmark = pytest.mark.slow

TOPIC_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
PARTS = [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0, "partition_max_bytes": 1024}]


def raft_bodies(cluster_id: str) -> dict[str, dict[str, Any]]:
    requests = [
        VoteRequest(cluster_id, 2, 1, 7, 5, 1, 3, True),
        BeginQuorumEpochRequest(cluster_id, 2, 1, 0, 5, 2),
        EndQuorumEpochRequest(cluster_id, 2, 1, 0, 5, 2, (1,)),
        FetchRequest(cluster_id, 2, 1, 8, 1, 0, 0, 10, 0),
        FetchSnapshotRequest(cluster_id, 2, 1, 9, 1, OffsetAndEpoch(4, 1), 0, 1024),
    ]
    return {codec.route_of(r): to_dict(r) for r in requests}


CONTROLLER: dict[str, dict[str, Any]] = {
    "broker_registration": {
        "broker_id": 7,
        "cluster_id": "x",
        "incarnation_id": "i",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}],
        "rack": None,
    },
    "broker_heartbeat": {"broker_id": 7, "broker_epoch": 1, "current_metadata_offset": 0, "want_shut_down": False},
    "alter_partition": {
        "broker_id": 7,
        "broker_epoch": 1,
        "topics": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [{"partition": 0, "leader_epoch": 0, "new_isr": [7], "partition_epoch": 0}],
            }
        ],
    },
    "allocate_producer_ids": {"broker_id": 7, "broker_epoch": 1},
    "create_topics": {
        "topics": [{"name": "fz", "num_partitions": 1, "replication_factor": 1, "configs": {"retention.ms": 1000}}],
        "validate_only": True,
    },
    "delete_topics": {"topic_names": ["nope"], "topic_ids": [TOPIC_ID]},
    "create_partitions": {
        "topics": [{"name": "nope", "count": 2, "assignments": [{"partition": 1, "broker_ids": [1]}]}],
        "validate_only": True,
    },
    "describe_configs": {"resources": [{"resource_type": "topic", "resource_name": "fz"}], "configuration_keys": ["a"]},
    "incremental_alter_configs": {
        "resources": [
            {"resource_type": "topic", "resource_name": "nope", "configs": [{"name": "a", "op": "set", "value": 1}]}
        ],
        "validate_only": True,
    },
    "elect_leaders": {"election_type": "preferred", "topic_partitions": [{"topic": "nope", "partitions": [0]}]},
    "register_write": {"key": "fz", "value": 1, "from": 0},
    "register_read": {"key": "fz"},
}

# The broker's internal routes (its clients' requests are the Kafka listener's, whose codec checks widths).
BROKER: dict[str, dict[str, Any]] = {
    REPLICA_FETCH_PATH: {
        "replica_id": 2,
        "replica_epoch": 1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1024,
        "topics": [{"name": "nope", "partitions": PARTS}],
    },
    WRITE_TXN_MARKERS_PATH: {
        "markers": [
            {
                "producer_id": 1,
                "producer_epoch": 0,
                "transaction_result": True,
                "topics": [{"name": "nope", "partition_indexes": [0]}],
                "coordinator_epoch": 0,
            }
        ]
    },
    "/admin/status": {},
}

# Values no field of any route may hold, and int32 fields (ids, epochs, indexes, timeouts) by name.
BEYOND_INT64 = [INT64_MAX + 1, -(2**63) - 1, 2**20_001]
INT32_FIELDS = {
    "partition",
    "partition_index",
    "leader_epoch",
    "partition_epoch",
    "current_leader_epoch",
    "committed_leader_epoch",
    "generation_id",
    "broker_id",
    "replica_id",
    "epoch",
    "candidate_epoch",
    "last_epoch",
    "last_fetched_epoch",
    "src",
    "dst",
    "leader_id",
    "max_wait_ms",
    "timeout_ms",
    "session_timeout_ms",
    "num_partitions",
    "count",
}
HOSTILE = st.one_of(
    st.sampled_from([*BEYOND_INT64, INT32_MAX + 1, -(2**31) - 1, True, 1.5, float("nan"), None, "7", [], {}]),
    st.text(max_size=4),
    st.integers(),
    st.binary(max_size=4),
)


def leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every value of a body (map keys and list indexes), the body itself excluded."""
    out: list[tuple] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*path, key))
            out.extend(leaves(item, (*path, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append((*path, i))
            out.extend(leaves(item, (*path, i)))
    return out


def replaced(body: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(body, dict):
        return {**body, head: replaced(body[head], rest, new)}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(body)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory):
    with LocalCluster(tmp_path_factory.mktemp("hostile") / "cluster", nodes=1) as cluster:
        entry = cluster.layout().nodes[0]
        cluster_id = cluster.layout().cluster_id
        routes = {
            **raft_bodies(cluster_id),
            **{f"/controller/{name}": body for name, body in CONTROLLER.items()},
            **BROKER,
        }
        yield cluster, f"http://{entry.host}:{entry.port}", routes


def post(url: str, body: Any, credential: Credential | None = None) -> tuple[int, dict[str, Any]]:
    """POST a CBOR body; with `credential`, signed as a node of the cluster would (past authentication, so the
    hostile values reach the decoders: a node's credential does not make its fields trusted)."""
    data = cbor2.dumps(body)
    headers = {"Content-Type": "application/cbor"}
    if credential is not None:
        parts = urllib.parse.urlsplit(url)
        headers[auth.HEADER] = auth.sign(credential, "POST", parts.netloc, parts.path, data, time.time_ns() // 10**6)
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, cbor2.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, cbor2.loads(exc.read())


def test_every_route_is_covered(node) -> None:
    _, _, routes = node
    served = set(codec.REQUEST_BY_ROUTE) | {f"/controller/{n}" for n in wire.ROUTES}
    served |= {REPLICA_FETCH_PATH, WRITE_TXN_MARKERS_PATH}
    assert served <= set(routes)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_field_values_get_invalid_request_never_a_server_error(node, data: st.DataObject) -> None:
    cluster, base, routes = node
    route = data.draw(st.sampled_from(sorted(routes)), label="route")
    template = routes[route]
    path = data.draw(st.sampled_from(leaves(template)), label="path") if leaves(template) else ()
    value = data.draw(HOSTILE, label="value")
    body = replaced(template, path, value) if path else template
    status, answer = post(base + route, body, cluster.credential("node"))
    assert status != 500 and answer.get("error_code") != ErrorCode.UNKNOWN_SERVER_ERROR, (route, path, answer)
    name = next((p for p in reversed(path) if isinstance(p, str)), None)
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(path[-1] if path else None, str):
        too_wide = value in BEYOND_INT64 or (name in INT32_FIELDS and not -(2**31) <= value <= INT32_MAX)
        if too_wide:
            assert answer.get("error_code") == ErrorCode.INVALID_REQUEST, (route, path, answer)
            assert name in answer.get("message", ""), (route, path, answer)


def test_the_node_still_serves_after_the_hostile_bodies(node) -> None:
    _, base, _ = node
    status, answer = post(base + "/admin/status", {})
    assert status == 200 and answer["error_code"] == 0
    assert answer["raft"]["state"] == "leader"
