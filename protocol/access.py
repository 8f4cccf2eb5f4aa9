"""Which route needs which credential (sans-I/O): the table docs/security.md shows, as code.

Design notes: docs/security.md, section "protocol/access.py".
"""

from __future__ import annotations

from dataclasses import dataclass

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
OPEN = None

# The broker's cluster-internal routes (clients reach the same handlers through the Kafka listener).
REPLICA_FETCH_PATH = "/broker/fetch"  # a follower's fetch: moves the HW and the ISR
WRITE_TXN_MARKERS_PATH = "/broker/write_txn_markers"  # a transaction coordinator's markers
VERIFY_TXN_PARTITIONS_PATH = "/broker/verify_txn_partitions"  # a partition leader asks a coordinator (KIP-890)

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
    "/controller/register_write": ADMIN_CLUSTER,
    "/controller/register_read": OPEN,
    # broker <-> broker
    REPLICA_FETCH_PATH: CLUSTER,
    WRITE_TXN_MARKERS_PATH: CLUSTER,
    VERIFY_TXN_PARTITIONS_PATH: CLUSTER,
    # the node
    "/admin/status": OPEN,
}


def required(path: str) -> Requirement | None:
    """The requirement of `path` (routes not in the table are cluster-internal)."""
    return ROUTES.get(path, CLUSTER)
