"""DescribeCluster, ElectLeaders and DescribeLogDirs: Kafka messages <-> the image, the controller, the logs.

Pure translation. DescribeCluster answers from the broker's image: brokers at
the request's listener, this broker as the controller id (KRaft brokers
forward controller requests, so a client may send them anywhere), endpoint
type BROKER from v1 (a CONTROLLER request is MISMATCHED_ENDPOINT_TYPE), fenced
brokers only when v2 asks for them. ElectLeaders goes to the controller's
`/controller/elect_leaders` (v0 is always a preferred election). DescribeLogDirs
reports this broker's one log directory with each hosted partition's size.
Notes: docs/kafka-listener.md, "Admin APIs".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.admin.topics import ElectLeadersRequest, ElectLeadersResponse

from kraftpy.broker.kafka.admin_configs import error_of
from kraftpy.broker.kafka.metadata import NO_AUTHORIZED_OPERATIONS
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError

ClusterBroker = DescribeClusterResponse.DescribeClusterBroker
ElectionResult = ElectLeadersResponse.ReplicaElectionResult
ElectionPartition = ElectionResult.PartitionResult
LogDirResult = DescribeLogDirsResponse.DescribeLogDirsResult
LogDirTopic = LogDirResult.DescribeLogDirsTopic
LogDirPartition = LogDirTopic.DescribeLogDirsPartition

# Kafka's EndpointType (KIP-919) and the error a broker gives a request meant for a controller.
ENDPOINT_BROKER = 1
MISMATCHED_ENDPOINT_TYPE = 114
ELECTION_TYPES = {0: "preferred", 1: "unclean"}


# --- DescribeCluster -----------------------------------------------------------------------------------


def describe_cluster_response(
    request: DescribeClusterRequest,
    version: int,
    image: MetadataImage,
    *,
    listener_name: str,
    cluster_id: str,
    controller_id: int,
) -> DescribeClusterResponse:
    endpoint = request.endpoint_type if version >= 1 else ENDPOINT_BROKER
    if endpoint != ENDPOINT_BROKER:
        return describe_cluster_error(
            request,
            version,
            KafkaError(
                f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type {endpoint}",
                ErrorCode.UNKNOWN_SERVER_ERROR,
            ),
            code=MISMATCHED_ENDPOINT_TYPE,
        )
    include_fenced = version >= 2 and bool(request.include_fenced_brokers)
    brokers = []
    for broker_id, b in sorted(image.brokers.items()):
        if b.fenced and not include_fenced:
            continue
        listener = next((x for x in b.listeners if x.name == listener_name), None)
        if listener is None:
            continue
        brokers.append(
            ClusterBroker(broker_id=broker_id, host=listener.host, port=listener.port, rack=b.rack, is_fenced=b.fenced)
        )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id=cluster_id,
        controller_id=controller_id,
        brokers=brokers,
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def describe_cluster_error(
    request: DescribeClusterRequest, version: int, error: KafkaError, *, code: int | None = None
) -> DescribeClusterResponse:
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=int(error.code) if code is None else code,
        error_message=error.message,
        endpoint_type=ENDPOINT_BROKER,
        cluster_id="",
        controller_id=-1,
        brokers=[],
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


# --- ElectLeaders --------------------------------------------------------------------------------------


def elect_leaders_body(request: ElectLeadersRequest, version: int) -> dict[str, Any]:
    kind = request.election_type if version >= 1 else 0
    if kind not in ELECTION_TYPES:
        raise KafkaError(f"Unknown election type {kind} (0 preferred, 1 unclean)", ErrorCode.INVALID_REQUEST)
    partitions = None
    if request.topic_partitions is not None:
        partitions = [{"topic": t.topic, "partitions": list(t.partitions)} for t in request.topic_partitions]
    return {"election_type": ELECTION_TYPES[kind], "topic_partitions": partitions}


def elect_leaders_response(answer: Mapping[str, Any] | None) -> ElectLeadersResponse:
    """Per topic and partition, as the controller answered (ELECTION_NOT_NEEDED included when asked by name)."""
    results = []
    for t in (answer or {}).get("topics", []) or []:
        partitions = []
        for p in t.get("partitions", []) or []:
            error = error_of(p)
            partitions.append(
                ElectionPartition(
                    partition_id=p.get("partition"),
                    error_code=0 if error is None else int(error.code),
                    error_message=None if error is None else error.message,
                )
            )
        results.append(ElectionResult(topic=t.get("topic"), partition_result=partitions))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=results)


def elect_leaders_error(request: ElectLeadersRequest, version: int, error: KafkaError) -> ElectLeadersResponse:
    """The whole request failed: the top-level error (v1+) and every partition asked for with it."""
    results = [
        ElectionResult(
            topic=t.topic,
            partition_result=[
                ElectionPartition(partition_id=p, error_code=int(error.code), error_message=error.message)
                for p in t.partitions
            ],
        )
        for t in request.topic_partitions or []
    ]
    return ElectLeadersResponse(throttle_time_ms=0, error_code=int(error.code), replica_election_results=results)


# --- DescribeLogDirs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostedLog:
    """One partition this broker hosts, as DescribeLogDirs reports it."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


def wanted_partitions(request: DescribeLogDirsRequest) -> set[tuple[str, int]] | None:
    """The (topic, partition) pairs asked for; None = every one."""
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def describe_log_dirs_response(
    request: DescribeLogDirsRequest,
    log_dir: str,
    hosted: Sequence[HostedLog],
    *,
    total_bytes: int,
    usable_bytes: int,
) -> DescribeLogDirsResponse:
    wanted = wanted_partitions(request)
    topics: dict[str, list[LogDirPartition]] = {}
    for h in sorted(hosted, key=lambda h: (h.topic, h.partition)):
        if wanted is not None and (h.topic, h.partition) not in wanted:
            continue
        topics.setdefault(h.topic, []).append(
            LogDirPartition(
                partition_index=h.partition, partition_size=h.size_bytes, offset_lag=h.offset_lag, is_future_key=False
            )
        )
    result = LogDirResult(
        error_code=0,
        log_dir=log_dir,
        topics=[LogDirTopic(name=name, partitions=parts) for name, parts in topics.items()],
        total_bytes=total_bytes,
        usable_bytes=usable_bytes,
        is_cordoned=False,
    )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])


def describe_log_dirs_error(
    request: DescribeLogDirsRequest, version: int, error: KafkaError
) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=int(error.code), results=[])
