"""The admin APIs on the Kafka listener: topics, partitions, records, configs, cluster, leaders, log dirs.

As a KRaft broker, this one forwards what changes metadata (CreateTopics,
DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
ElectLeaders) to the active controller's existing routes, and answers the rest
itself: DescribeCluster from its image, DescribeLogDirs from its own logs,
DeleteRecords on the partitions it leads (waiting for live followers). DescribeConfigs reads the
controller's values (so a describe after an alter sees it) and labels their
sources from the image. A controller failover is waited out (the broker's
ControllerChannel.forward) for the request's `timeout_ms`: past it every item
is REQUEST_TIMED_OUT (the change may still happen, as in Kafka). The
translation is in broker/kafka/admin_*.py.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.kafka import admin_cluster, admin_configs, admin_topics
from kraftpy.broker.kafka.shell.api_handler import ApiHandler
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60


async def _controller(apis: BrokerApis, route: str, body: Mapping[str, Any] | None, timeout_ms: int = 0) -> Any:
    """The controller's answer to `route`; None when there is nothing to ask; REQUEST_TIMED_OUT past
    `timeout_ms` (0: the request has none, the broker's forward timeout bounds it)."""
    if body is None:
        return None
    return await apis.call_controller(f"/controller/{route}", body, timeout_ms)


# --- topics -------------------------------------------------------------------------------------------


async def handle_create_topics(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    plan = admin_topics.create_topics_plan(request)
    answer = await _controller(apis, "create_topics", plan.body, request.timeout_ms)
    defaults: Mapping[str, Any] = {}
    if version >= 5 and any(not t.get("error_code") for t in (answer or {}).get("topics", []) or []):
        # v5+ lists each new topic's configs with their sources: the cluster-wide defaults as the controller
        # has them (this broker's image may not have replayed a change just made).
        described = await _controller(apis, "describe_configs", admin_configs.CLUSTER_DEFAULTS_BODY, request.timeout_ms)
        defaults = admin_configs.cluster_defaults(described)
    return admin_topics.create_topics_response(request, version, plan, answer, defaults)


async def handle_delete_topics(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    plan = admin_topics.delete_topics_plan(request, version)
    answer = await _controller(apis, "delete_topics", plan.body, request.timeout_ms)
    return admin_topics.delete_topics_response(request, version, plan, answer)


async def handle_create_partitions(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    body = admin_topics.create_partitions_body(request) if request.topics else None
    answer = await _controller(apis, "create_partitions", body, request.timeout_ms)
    return admin_topics.create_partitions_response(request, answer)


async def handle_delete_records(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    """Move each partition's log start offset on this broker, its leader, then wait (within the request's
    timeout_ms) until every live follower has moved its own: the low watermark, as Kafka's DelayedDeleteRecords."""
    rm = apis.replica_manager
    deadline_s = asyncio.get_running_loop().time() + max(0, request.timeout_ms) / 1000

    async def one(topic: str, partition: int, offset: int) -> tuple[int, int, int]:
        try:
            hosted, target = _delete_records(rm, topic, partition, offset)
            return partition, await _wait_for_low_watermark(apis, hosted, target, deadline_s), 0
        except KafkaError as exc:
            return partition, -1, int(exc.code)

    results = []
    for t in request.topics or []:
        parts = await asyncio.gather(*(one(t.name, p.partition_index, p.offset) for p in t.partitions or []))
        results.append((t.name, list(parts)))
    return admin_topics.delete_records_response(results)


def _delete_records(rm: Any, topic: str, partition: int, offset: int) -> tuple[Any, int]:
    """Move the leader's log start offset; the hosted partition and the offset the replicas must reach."""
    if partition < 0:
        raise KafkaError(f"unknown topic or partition {topic}-{partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    hosted = rm.lookup(topic, partition)
    if not hosted.is_leader:
        raise KafkaError(f"broker {rm.broker_id} does not lead {topic}-{partition}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
    plog = hosted.log
    target = admin_topics.delete_records_target(offset, plog.log_start_offset, plog.high_watermark)
    if plog.increment_log_start_offset(target):
        hosted.after_retention()
    return hosted, target


async def _wait_for_low_watermark(apis: BrokerApis, hosted: Any, target: int, deadline_s: float) -> int:
    """The low watermark once it reaches `target`; REQUEST_TIMED_OUT past the deadline (Kafka's expiry)."""
    loop = asyncio.get_running_loop()
    while True:
        leader = hosted.core.leader
        if leader is None:
            raise KafkaError(f"{hosted.name} lost its leadership", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        alive = {broker_id for broker_id, b in apis.image().brokers.items() if not b.fenced}
        followers = {broker_id: r.log_start_offset for broker_id, r in leader.remote.items()}
        low = admin_topics.low_watermark(hosted.log.log_start_offset, followers, alive)
        if low >= target:
            return low
        if loop.time() >= deadline_s:
            raise KafkaError(
                f"{hosted.name}: followers did not reach log start offset {target} in time (low watermark {low})",
                ErrorCode.REQUEST_TIMED_OUT,
            )
        # Followers learn the new log start from their next fetch answer and report theirs in the fetch after.
        await asyncio.sleep(_LOW_WATERMARK_POLL_S)


# How often a DeleteRecords looks at its followers' log start offsets while it waits.
_LOW_WATERMARK_POLL_S = 0.05


# --- configs ------------------------------------------------------------------------------------------


async def handle_describe_configs(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    plan = admin_configs.describe_configs_plan(request, apis.broker_id)
    answer = await _controller(apis, "describe_configs", plan.body)
    image = apis.image()
    overrides = {
        (r.resource_type, r.resource_name): image.configs.get(r.resource_type, r.resource_name)
        for r in request.resources or []
        if r.resource_type == admin_configs.BROKER
    }
    return admin_configs.describe_configs_response(request, ctx.header.api_version, plan, answer, overrides)


async def handle_incremental_alter_configs(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    current = None
    if admin_configs.needs_current_values(request):
        described = await _controller(apis, "describe_configs", admin_configs.current_values_body(request))
        current = admin_configs.current_values(described)
    plan = admin_configs.incremental_alter_plan(request, apis.broker_id, current)
    answer = await _controller(apis, "incremental_alter_configs", plan.body)
    return admin_configs.incremental_alter_response(request, plan, answer)


async def handle_alter_configs(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    plan = admin_configs.legacy_alter_plan(request, apis.broker_id)
    answer = await _controller(apis, "incremental_alter_configs", plan.body)
    return admin_configs.legacy_alter_response(request, plan, answer)


# --- cluster ------------------------------------------------------------------------------------------


async def handle_describe_cluster(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    return admin_cluster.describe_cluster_response(
        request,
        ctx.header.api_version,
        apis.image(),
        listener_name=ctx.listener_name,
        cluster_id=apis.cluster_id,
        controller_id=apis.broker_id,
    )


async def handle_elect_leaders(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    body = admin_cluster.elect_leaders_body(request, ctx.header.api_version)
    answer = await _controller(apis, "elect_leaders", body, request.timeout_ms)
    return admin_cluster.elect_leaders_response(answer)


async def handle_describe_log_dirs(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    rm = apis.replica_manager
    hosted = [
        admin_cluster.HostedLog(
            h.topic, h.partition, h.log.size_bytes, max(0, h.log.high_watermark - h.log.log_end_offset)
        )
        for h in list(rm.partitions.values())
        if h.offline is None and not h.log.closed
    ]
    root = rm.logs.root
    usage = await asyncio.get_running_loop().run_in_executor(None, shutil.disk_usage, root)
    return admin_cluster.describe_log_dirs_response(
        request, str(root), hosted, total_bytes=usage.total, usable_bytes=usage.free
    )


HANDLERS = {
    CREATE_TOPICS: ApiHandler(handle_create_topics, admin_topics.create_topics_error),
    DELETE_TOPICS: ApiHandler(handle_delete_topics, admin_topics.delete_topics_error),
    DELETE_RECORDS: ApiHandler(handle_delete_records, admin_topics.delete_records_error),
    CREATE_PARTITIONS: ApiHandler(handle_create_partitions, admin_topics.create_partitions_error),
    DESCRIBE_CONFIGS: ApiHandler(handle_describe_configs, admin_configs.describe_configs_error),
    ALTER_CONFIGS: ApiHandler(handle_alter_configs, admin_configs.legacy_alter_error),
    INCREMENTAL_ALTER_CONFIGS: ApiHandler(handle_incremental_alter_configs, admin_configs.incremental_alter_error),
    DESCRIBE_CLUSTER: ApiHandler(handle_describe_cluster, admin_cluster.describe_cluster_error),
    ELECT_LEADERS: ApiHandler(handle_elect_leaders, admin_cluster.elect_leaders_error),
    DESCRIBE_LOG_DIRS: ApiHandler(handle_describe_log_dirs, admin_cluster.describe_log_dirs_error),
}
