"""Which Kafka API carries each request a client core makes, and how its body and answer translate.

The cores name their requests by the handler names of docs/handlers.md
(`/kafka/produce`, `/controller/create_topics`, ...); `ROUTES` maps each to
its Kafka API key and the pure pair that builds the request message and
reads the response. The transport (client/shell/kafka_transport.py) is the
only caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.client.wire import admin, data, groups, txn


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    build: Callable[[Mapping[str, Any], int], Any]
    read: Callable[[Any, int], dict[str, Any]]


ROUTES: dict[str, Route] = {
    "/kafka/metadata": Route(data.METADATA, data.build_metadata, data.read_metadata),
    "/kafka/produce": Route(data.PRODUCE, data.build_produce, data.read_produce),
    "/kafka/init_producer_id": Route(data.INIT_PRODUCER_ID, data.build_init_producer_id, data.read_init_producer_id),
    "/kafka/fetch": Route(data.FETCH, data.build_fetch, data.read_fetch),
    "/kafka/list_offsets": Route(data.LIST_OFFSETS, data.build_list_offsets, data.read_list_offsets),
    "/kafka/offsets_for_leader_epoch": Route(
        data.OFFSET_FOR_LEADER_EPOCH, data.build_offsets_for_leader_epoch, data.read_offsets_for_leader_epoch
    ),
    "/kafka/find_coordinator": Route(
        groups.FIND_COORDINATOR, groups.build_find_coordinator, groups.read_find_coordinator
    ),
    "/kafka/join_group": Route(groups.JOIN_GROUP, groups.build_join_group, groups.read_join_group),
    "/kafka/sync_group": Route(groups.SYNC_GROUP, groups.build_sync_group, groups.read_sync_group),
    "/kafka/heartbeat": Route(groups.HEARTBEAT, groups.build_heartbeat, groups.read_simple),
    "/kafka/leave_group": Route(groups.LEAVE_GROUP, groups.build_leave_group, groups.read_leave_group),
    "/kafka/offset_commit": Route(groups.OFFSET_COMMIT, groups.build_offset_commit, groups.read_offset_commit),
    "/kafka/offset_fetch": Route(groups.OFFSET_FETCH, groups.build_offset_fetch, groups.read_offset_fetch),
    "/kafka/list_groups": Route(groups.LIST_GROUPS, groups.build_list_groups, groups.read_list_groups),
    "/kafka/describe_groups": Route(groups.DESCRIBE_GROUPS, groups.build_describe_groups, groups.read_describe_groups),
    "/kafka/delete_groups": Route(groups.DELETE_GROUPS, groups.build_delete_groups, groups.read_delete_groups),
    "/kafka/offset_delete": Route(groups.OFFSET_DELETE, groups.build_offset_delete, groups.read_offset_delete),
    **{path: Route(*api) for path, api in admin.APIS.items()},
    **{path: Route(*api) for path, api in txn.APIS.items()},
}


def route_for(path: str) -> Route | None:
    return ROUTES.get(path)
