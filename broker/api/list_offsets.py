"""ListOffsets: earliest (-2), latest (-1), max-timestamp (-3) or the first offset at or after a timestamp.

Answered by the partition leader only, after the leader-epoch check (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH). For consumers everything is bounded by the high watermark (the last stable
offset with isolation_level 1, read_committed): "latest" is the HW or LSO (OFFSET_NOT_AVAILABLE
while a new leader's HW has not reached its epoch start, as Kafka answers), and a timestamp or
max-timestamp lookup that lands at or above it finds nothing (offset -1). The leader epoch returned
is that of the batch holding the offset before the answer (for latest) or at it, so a consumer that
starts there can later validate its position (KIP-320). docs/kafka-listener.md, "ListOffsets".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import error_fields, group_by_topic, leading_partition, read_partitions
from kraftpy.broker.replication.model import READ_COMMITTED
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX, field
from kraftpy.storage import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager


def _read_partition(part: Mapping[str, Any]) -> tuple[int, int]:
    epoch = field(part, "current_leader_epoch", int, default=-1, min_value=-1, max_value=INT32_MAX)
    timestamp = field(part, "timestamp", int, min_value=MAX_TIMESTAMP, max_value=INT64_MAX)
    return epoch, timestamp


class ListOffsetsHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        field(body, "replica_id", int, default=-1, min_value=-1, max_value=INT32_MAX)
        committed = field(body, "isolation_level", int, default=0, min_value=0, max_value=1) == READ_COMMITTED
        entries = read_partitions(body, _read_partition)
        return {"topics": group_by_topic((t, p, self._one(t, p, *v, committed)) for t, p, v in entries)}

    def _one(
        self, topic: str, partition: int, current_epoch: int, timestamp: int, read_committed: bool = False
    ) -> dict[str, Any]:
        hosted = None
        try:
            hosted = leading_partition(self.rm, topic, partition, current_epoch)
            core = hosted.core
            plog = hosted.log
            cache = plog.leader_epoch_cache
            if timestamp == LATEST_TIMESTAMP:
                error, offset = core.list_offsets_latest(current_epoch, read_committed)
                if error != ErrorCode.NONE:
                    raise KafkaError(f"the high watermark of {topic}-{partition} is not known yet", error)
                epoch = cache.epoch_for_offset(offset - 1) if offset > 0 else -1
                return {"error_code": 0, "timestamp": -1, "offset": offset, "leader_epoch": epoch}
            if timestamp == EARLIEST_TIMESTAMP:
                start = plog.log_start_offset
                return {
                    "error_code": 0,
                    "timestamp": -1,
                    "offset": start,
                    "leader_epoch": cache.epoch_for_offset(start),
                }
            found = plog.offset_for_timestamp(timestamp)
            bound = core.leader.last_stable_offset if read_committed and core.leader else plog.high_watermark
            if found is None or found.offset >= bound:
                return {"error_code": 0, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            return {
                "error_code": 0,
                "timestamp": found.timestamp,
                "offset": found.offset,
                "leader_epoch": found.leader_epoch,
            }
        except CorruptRecordError as exc:
            # The batch found by timestamp fails its CRC: the replica gives up, as for a fetch (broker/api/fetch.py).
            if hosted is not None:
                self.rm.replica_corrupt(hosted, f"ListOffsets at timestamp {timestamp} read {exc.message}")
            error = KafkaError(f"{topic}-{partition} has a corrupt batch on this broker", ErrorCode.KAFKA_STORAGE_ERROR)
            return {**error_fields(error), "timestamp": -1, "offset": -1, "leader_epoch": -1}
        except KafkaError as exc:
            answer = error_fields(exc)
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "details" not in answer:
                answer["details"] = self.rm.leader_hint(topic, partition)
            answer.update(timestamp=-1, offset=-1, leader_epoch=-1)
            return answer
