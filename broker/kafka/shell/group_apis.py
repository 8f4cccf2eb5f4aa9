"""The consumer-group APIs on the Kafka listener, served by the broker's group handlers.

Each handler translates with broker/kafka/groups.py and calls the coordinator's
handler (`join_group`, ...), where the validation and semantics live. Notes: docs/kafka-listener.md, "Group APIs".
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kraftpy.broker.kafka import groups as g
from kraftpy.broker.kafka.shell.api_handler import ApiHandler, through_handler
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47


async def handle_find_coordinator(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    key_type, keys = g.coordinator_keys(request, version)
    refusal = g.key_type_refusal(key_type)
    if refusal is not None:
        raise refusal
    route = apis.handler("find_coordinator")
    answers = []
    for key in dict.fromkeys(keys):
        try:
            found = await route({"key": key, "key_type": key_type})
        except KafkaError as exc:
            answers.append(g.CoordinatorAnswer(key, exc.code, exc.message))
            continue
        answers.append(g.coordinator_at_listener(apis.image(), key, int(found["node_id"]), ctx.listener_name))
    return g.find_coordinator_response(version, answers)


async def handle_join_group(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    route = apis.handler("join_group")
    body = g.join_group_body(request, version, ctx.header.client_id, ctx.client_host)
    answer = await route(body)
    again = g.rejoin_with_member_id(version, body, answer)
    if again is not None:
        answer = await route(again)
    return g.join_group_response(version, answer)


async def handle_offset_commit(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    body, refs = g.offset_commit_body(request, version, apis.image())
    answer = await apis.handler("offset_commit")(body) if body["topics"] else {"topics": []}
    return g.offset_commit_response(version, answer, refs)


async def handle_offset_fetch(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    route = apis.handler("offset_fetch")
    groups = g.offset_fetch_groups(request, version, apis.image())

    async def one(group: g.FetchGroup) -> dict[str, Any]:
        try:
            return dict(await route(group.body) or {})
        except KafkaError as exc:  # one group's bad id costs that group only
            return {"error_code": int(exc.code), "message": exc.message}

    answers = await asyncio.gather(*(one(group) for group in groups))
    return g.offset_fetch_response(version, list(zip(groups, answers, strict=True)))


async def handle_describe_groups(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    answer = await apis.handler("describe_groups")(g.describe_groups_body(request, version))
    return g.describe_groups_response(version, request, answer)


async def handle_list_groups(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    ask = g.list_groups_ask(request, version)
    answer = {"groups": []} if ask.body is None else await apis.handler("list_groups")(ask.body)
    return g.list_groups_response(version, answer)


HANDLERS = {
    FIND_COORDINATOR: ApiHandler(handle_find_coordinator, g.find_coordinator_error),
    JOIN_GROUP: ApiHandler(handle_join_group, g.join_group_error),
    SYNC_GROUP: ApiHandler(through_handler("sync_group", g.sync_group_body, g.sync_group_response), g.sync_group_error),
    HEARTBEAT: ApiHandler(through_handler("heartbeat", g.heartbeat_body, g.heartbeat_response), g.heartbeat_error),
    LEAVE_GROUP: ApiHandler(
        through_handler("leave_group", g.leave_group_body, g.leave_group_response), g.leave_group_error
    ),
    OFFSET_COMMIT: ApiHandler(handle_offset_commit, g.offset_commit_error),
    OFFSET_FETCH: ApiHandler(handle_offset_fetch, g.offset_fetch_error),
    DESCRIBE_GROUPS: ApiHandler(handle_describe_groups, g.describe_groups_error),
    LIST_GROUPS: ApiHandler(handle_list_groups, g.list_groups_error),
    DELETE_GROUPS: ApiHandler(
        through_handler("delete_groups", g.delete_groups_body, g.delete_groups_response), g.delete_groups_error
    ),
    OFFSET_DELETE: ApiHandler(
        through_handler("offset_delete", g.offset_delete_body, g.offset_delete_response), g.offset_delete_error
    ),
}
