"""Which route needs which credential (sans-I/O): the table docs/security.md shows, as code.

Design notes: docs/security.md, section "protocol/access.py".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.protocol.credentials import ROLE_ADMIN, ROLE_CLUSTER
from kraftpy.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class Requirement:
    roles: frozenset[str]
    refusal: ErrorCode
    what: str  # for the error message: "a cluster-internal request"

    def refuse(self, path: str, principal: str | None) -> KafkaError:
        who = f"principal {principal!r}" if principal else "an unauthenticated caller"
        need = " or ".join(sorted(self.roles))
        return KafkaError(
            f"{path} is {self.what}; {who} may not call it (needs a credential with role {need}; see docs/security.md)",
            self.refusal,
        )


CLUSTER = Requirement(frozenset({ROLE_CLUSTER}), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "a cluster-internal request")
ADMIN_TOPIC = Requirement(
    frozenset({ROLE_CLUSTER, ROLE_ADMIN}), ErrorCode.TOPIC_AUTHORIZATION_FAILED, "an admin operation on topics"
)
ADMIN_CLUSTER = Requirement(
    frozenset({ROLE_CLUSTER, ROLE_ADMIN}), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "an admin operation on the cluster"
)
ADMIN_GROUP = Requirement(
    frozenset({ROLE_CLUSTER, ROLE_ADMIN}), ErrorCode.GROUP_AUTHORIZATION_FAILED, "an admin operation on groups"
)
OPEN = None

FETCH_PATH = "/kafka/fetch"  # the one spelling: the broker routes it, followers and consumers call it

# path -> requirement (None: open). docs/security.md has the same table.
ROUTES: dict[str, Requirement | None] = {
    # Raft: votes, leadership, replication of the metadata log
    "/raft/vote": CLUSTER,
    "/raft/begin_quorum_epoch": CLUSTER,
    "/raft/end_quorum_epoch": CLUSTER,
    "/raft/fetch": CLUSTER,  # observers (every broker) fetch the metadata log too: they are nodes
    "/raft/fetch_snapshot": CLUSTER,
    # the broker lifecycle and partition state, broker -> active controller
    "/controller/broker_registration": CLUSTER,
    "/controller/broker_heartbeat": CLUSTER,
    "/controller/alter_partition": CLUSTER,
    "/controller/allocate_producer_ids": CLUSTER,
    # admin, -> active controller
    "/controller/create_topics": ADMIN_TOPIC,
    "/controller/delete_topics": ADMIN_TOPIC,
    "/controller/create_partitions": ADMIN_TOPIC,
    "/controller/incremental_alter_configs": ADMIN_CLUSTER,
    "/controller/elect_leaders": ADMIN_CLUSTER,
    "/controller/describe_configs": OPEN,
    "/controller/describe_quorum": OPEN,
    # the Kafka API of a broker (PLAINTEXT: open, as Kafka without an authorizer)
    "/kafka/metadata": OPEN,
    "/kafka/produce": OPEN,
    FETCH_PATH: OPEN,  # a follower's fetch (replica_id >= 0) is cluster-internal: see required()
    "/kafka/list_offsets": OPEN,
    "/kafka/offsets_for_leader_epoch": OPEN,
    "/kafka/init_producer_id": OPEN,
    "/kafka/find_coordinator": OPEN,
    "/kafka/join_group": OPEN,
    "/kafka/sync_group": OPEN,
    "/kafka/heartbeat": OPEN,
    "/kafka/leave_group": OPEN,
    "/kafka/offset_commit": OPEN,
    "/kafka/txn_offset_commit": OPEN,
    # transactions (a producer's; /kafka/verify_txn_partitions is a partition leader's: cluster-internal)
    "/kafka/add_partitions_to_txn": OPEN,
    "/kafka/add_offsets_to_txn": OPEN,
    "/kafka/end_txn": OPEN,
    "/kafka/describe_transactions": OPEN,
    "/kafka/list_transactions": OPEN,
    "/kafka/offset_fetch": OPEN,
    "/kafka/list_groups": OPEN,
    "/kafka/describe_groups": OPEN,
    "/kafka/delete_groups": ADMIN_GROUP,
    "/kafka/offset_delete": ADMIN_GROUP,
    # the node
    "/admin/status": OPEN,
}


def static_requirement(path: str) -> Requirement | None:
    """The requirement of `path` whatever the body (routes not in the table are cluster-internal)."""
    return ROUTES.get(path, CLUSTER)


def depends_on_body(path: str) -> bool:
    return path == FETCH_PATH


def required(path: str, body: Mapping[str, Any]) -> Requirement | None:
    """What a call of `path` with `body` needs: a follower's fetch is cluster-internal (it moves the HW and ISR)."""
    if path == FETCH_PATH:
        replica_id = body.get("replica_id", -1)
        return CLUSTER if not isinstance(replica_id, int) or replica_id >= 0 else OPEN
    return static_requirement(path)
