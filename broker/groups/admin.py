"""ListGroups, DescribeGroups and DeleteGroups: the coordinator's administrative answers.

DescribeGroups of an unknown group answers state "Dead" with no members
(Kafka's classic answer, which tools read as "does not exist"). Members'
metadata and assignments are shown only for a Stable group, as Kafka does,
since in any other state they are about to change. DeleteGroups deletes only
Empty groups (NON_EMPTY_GROUP otherwise) and answers once the tombstones of
the group and all its offsets are written.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kraftpy.broker.groups.group import GroupMetadata, GroupState
from kraftpy.broker.groups.records import GroupMetadataKey, OffsetCommitKey, Record, tombstone
from kraftpy.broker.groups.requests import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kraftpy.broker.groups.responses import (
    delete_groups_response,
    describe_groups_response,
    error_fields,
    list_groups_response,
    storage_error,
)
from kraftpy.broker.groups.runtime import CoordinatorRuntime, PartitionStatus
from kraftpy.protocol.errors import ErrorCode

E = ErrorCode
_STATES = {state.value.lower(): state for state in GroupState}


class GroupAdmin:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.rt = runtime

    def list_groups(self, rid: Hashable, req: ListGroupsRequest) -> None:
        unknown = [s for s in req.states_filter if s.lower() not in _STATES]
        if unknown:
            valid = ", ".join(s.value for s in GroupState)
            self.rt.respond(rid, list_groups_response(E.INVALID_REQUEST, [], f"unknown states {unknown}; use {valid}"))
            return
        wanted = {_STATES[s.lower()] for s in req.states_filter}
        groups = sorted(
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.rt.groups.values()
            if self.rt.is_active(g.partition) and g.state is not GroupState.DEAD and (not wanted or g.state in wanted)
        )
        # Kafka answers the groups it has plus the error, so a caller can still show a partial list.
        loading = any(status is PartitionStatus.LOADING for status in self.rt.partitions.values())
        code = E.COORDINATOR_LOAD_IN_PROGRESS if loading else E.NONE
        self.rt.respond(rid, list_groups_response(code, groups, "some offsets partitions are still loading"))

    def describe_groups(self, rid: Hashable, req: DescribeGroupsRequest) -> None:
        out = []
        for group_id in req.groups:
            if (err := self.rt.coordinator_error(group_id)) is not None:
                empty = {"group_state": "", "protocol_type": "", "protocol_data": "", "members": []}
                out.append({**error_fields(*err), "group_id": group_id, **empty})
                continue
            out.append({"error_code": 0, **_summary(group_id, self.rt.groups.get(group_id))})
        self.rt.respond(rid, describe_groups_response(out))

    def delete_groups(self, rid: Hashable, req: DeleteGroupsRequest, now_ms: int) -> None:
        rt = self.rt
        results: dict[str, ErrorCode] = {}
        by_partition: dict[int, list[Record]] = {}
        deleted_by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(req.groups_names):
            if (err := rt.coordinator_error(group_id)) is not None:
                results[group_id] = err[0]
                continue
            group = rt.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                records = by_partition.setdefault(group.partition, [])
                # Commits still in flight are covered too: they land before these tombstones.
                doomed = sorted(set(group.offsets) | set(group.pending_offset_commits))
                records += [tombstone(OffsetCommitKey(group_id, tp.topic, tp.partition)) for tp in doomed]
                records.append(tombstone(GroupMetadataKey(group_id)))
                deleted_by_partition.setdefault(group.partition, []).append(group_id)
                for member_id in group.pending_members:
                    rt.timers.cancel(("pending", group_id, member_id))
                group.transition_to(GroupState.DEAD, now_ms)
                del rt.groups[group_id]
                results[group_id] = E.NONE
        outstanding = set(by_partition)

        def finish() -> None:
            rt.respond(rid, delete_groups_response(results.items()))

        for partition, records in by_partition.items():

            def written(error: ErrorCode, now_ms: int, partition: int = partition) -> None:
                if error is not E.NONE:
                    for group_id in deleted_by_partition[partition]:
                        results[group_id] = storage_error(error)
                outstanding.discard(partition)
                if not outstanding:
                    finish()

            rt.append(partition, records, "cleanup", written)
        if not outstanding:
            finish()


def _summary(group_id: str, group: GroupMetadata | None) -> dict[str, Any]:
    if group is None:
        return {
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    stable = group.state is GroupState.STABLE and group.protocol_name is not None
    members = []
    for m in group.members.values():
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                "member_assignment": m.assignment if stable else b"",
            }
        )
    return {
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": group.protocol_name if stable and group.protocol_name else "",
        "members": members,
    }
