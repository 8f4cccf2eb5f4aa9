"""OffsetsForLeaderEpoch: where a leader epoch ends on the partition leader (KIP-101, KIP-320).

For each partition: the largest epoch at or below `leader_epoch` this leader
knows and its end offset (the next epoch's start, or the log end for the
current epoch), from the leader-epoch cache; (-1, -1) when unknown.
Consumers use it to validate their position after a leader change; a
follower in this project finds divergence through DivergingEpoch inside
Fetch instead. Only the leader answers, after the leader-epoch check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import error_fields, group_by_topic, leading_partition, read_partitions
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, field

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager


def _read_partition(part: Mapping[str, Any]) -> tuple[int, int]:
    current = field(part, "current_leader_epoch", int, default=-1, min_value=-1, max_value=INT32_MAX)
    epoch = field(part, "leader_epoch", int, min_value=-1, max_value=INT32_MAX)
    return current, epoch


class OffsetsForLeaderEpochHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        field(body, "replica_id", int, default=-1, min_value=-2, max_value=INT32_MAX)
        entries = read_partitions(body, _read_partition)
        return {"topics": group_by_topic((t, p, self._one(t, p, *v)) for t, p, v in entries)}

    def _one(self, topic: str, partition: int, current_epoch: int, leader_epoch: int) -> dict[str, Any]:
        try:
            hosted = leading_partition(self.rm, topic, partition, current_epoch)
            epoch, end = hosted.log.end_offset_for_epoch(leader_epoch)
            return {"error_code": 0, "leader_epoch": epoch, "end_offset": end}
        except KafkaError as exc:
            answer = error_fields(exc)
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "details" not in answer:
                answer["details"] = self.rm.leader_hint(topic, partition)
            answer.update(leader_epoch=-1, end_offset=-1)
            return answer
