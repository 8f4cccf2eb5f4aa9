"""`/broker/write_txn_markers`: a transaction coordinator ends a transaction on partitions this broker leads.

Kafka's WriteTxnMarkers, in its field names: each marker names a producer (id, epoch), the result
(transaction_result true = COMMIT), the coordinator epoch and the partitions. Each partition gets a
control batch appended as leader with acks=all: its answer waits until the ISR has it (the HW passed
it). The checks are the producer state's (broker/replication/producer_state.py, check_marker): an
older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.
A committed marker on `__consumer_offsets` then tells the group coordinator (its
complete_txn_offsets hook) so the transaction's offsets become visible or are dropped.
Docs: docs/transactions.md, "The partition side".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import MAX_TOPIC_NAME, at
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch
from kraftpy.protocol.records.header import parse_header
from kraftpy.protocol.shell.clock import monotonic_ms, wall_ms
from kraftpy.protocol.topics import OFFSETS_TOPIC
from kraftpy.protocol.validate import INT16_MAX, INT32_MAX, INT64_MAX, field, invalid, show

if TYPE_CHECKING:
    from kraftpy.broker.api.produce import ProduceHandler
    from kraftpy.broker.shell.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# How long a marker waits for the ISR (Kafka waits up to its request timeout, 30 s by default).
MARKER_TIMEOUT_MS = 30_000
MAX_MARKERS = 10_000
MAX_PARTITIONS = 100_000


def read_markers(body: Mapping[str, Any]) -> list[tuple[int, int, bool, int, list[tuple[str, list[int]]]]]:
    """(producer_id, producer_epoch, committed, coordinator_epoch, [(topic, [partition])]) per marker."""
    markers = field(body, "markers", list, max_len=MAX_MARKERS)
    out = []
    count = 0
    for i, m in enumerate(markers):
        where = f"markers[{i}]"
        if not isinstance(m, Mapping):
            raise invalid(f"{where} must be a map, got {type(m).__name__}")
        pid = at(where, field, m, "producer_id", int, min_value=0, max_value=INT64_MAX)
        epoch = at(where, field, m, "producer_epoch", int, min_value=0, max_value=INT16_MAX)
        committed = at(where, field, m, "transaction_result", bool)
        coordinator_epoch = at(where, field, m, "coordinator_epoch", int, min_value=0, max_value=INT32_MAX)
        topics = []
        for j, t in enumerate(at(where, field, m, "topics", list, max_len=MAX_PARTITIONS)):
            twhere = f"{where}.topics[{j}]"
            if not isinstance(t, Mapping):
                raise invalid(f"{twhere} must be a map, got {type(t).__name__}")
            name = at(twhere, field, t, "name", str, max_len=MAX_TOPIC_NAME)
            indexes = at(twhere, field, t, "partition_indexes", list, max_len=MAX_PARTITIONS)
            for k, p in enumerate(indexes):
                if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= INT32_MAX:
                    raise invalid(f"{twhere}.partition_indexes[{k}] must be a partition number, got {show(p)}")
            count += len(indexes)
            if count > MAX_PARTITIONS:
                raise invalid(f"more than {MAX_PARTITIONS} partitions in one request")
            topics.append((name, list(indexes)))
        out.append((pid, epoch, committed, coordinator_epoch, topics))
    return out


class WriteTxnMarkersHandler:
    def __init__(self, replica_manager: ReplicaManager, produce: ProduceHandler) -> None:
        self.rm = replica_manager
        self.produce = produce

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        markers = read_markers(body)
        now = monotonic_ms()
        waits: dict[Any, Any] = {}
        # (marker index, topic, partition) -> error code, or the rid whose answer gives it
        slots: list[tuple[int, str, int, Any]] = []
        for i, (pid, epoch, committed, coordinator_epoch, topics) in enumerate(markers):
            for name, indexes in topics:
                for index in indexes:
                    slots.append(
                        (i, name, index, self._begin(pid, epoch, committed, coordinator_epoch, name, index, now, waits))
                    )
        if waits:
            await self.produce.await_appends(waits, now + MARKER_TIMEOUT_MS)
        codes: dict[int, Any] = {}
        for rid, (_, _, future) in waits.items():
            self.rm.produce_waiters.pop(rid, None)
            codes[rid] = future.result().error
        answer = []
        for i, (pid, epoch, committed, _, _) in enumerate(markers):
            by_topic: dict[str, list[dict[str, int]]] = {}
            for j, name, index, outcome in slots:
                if j != i:
                    continue
                code = codes[outcome] if not isinstance(outcome, ErrorCode) else outcome
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": int(code)})
                if code == ErrorCode.NONE and name == OFFSETS_TOPIC:
                    self._offsets_completed(index, pid, epoch, committed)
            answer.append(
                {
                    "producer_id": pid,
                    "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
                }
            )
        return {"markers": answer}

    def _begin(
        self,
        pid: int,
        epoch: int,
        committed: bool,
        coordinator_epoch: int,
        topic: str,
        partition: int,
        now: int,
        waits: dict[Any, Any],
    ) -> Any:
        """Start one partition's marker append: its request id, or the error it got at once."""
        try:
            hosted = self.rm.lookup(topic, partition)
        except KafkaError as exc:
            return exc.code
        if not hosted.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        marker = TxnMarker(committed, coordinator_epoch)
        records = build_marker_batch(pid, epoch, marker, timestamp_ms=wall_ms())
        header = parse_header(records, 0)
        rid, future = self.produce.begin_append(hosted, header, records, -1, MARKER_TIMEOUT_MS, now, marker=marker)
        waits[rid] = ((topic, partition), hosted, future)
        return rid

    def _offsets_completed(self, partition: int, pid: int, epoch: int, committed: bool) -> None:
        """The group coordinator's hook (contract point 2); absent until its side is merged.

        On the coordinator's shell, or on its core (whose returned actions the shell performs).
        """
        groups = self.rm.groups
        shell_hook = getattr(groups, "complete_txn_offsets", None)
        core_hook = getattr(groups.coordinator, "complete_txn_offsets", None)
        try:
            if shell_hook is not None:
                shell_hook((OFFSETS_TOPIC, partition), pid, epoch, committed)
            elif core_hook is not None:
                actions = core_hook((OFFSETS_TOPIC, partition), pid, epoch, committed)
                if actions:
                    groups.perform(actions)
        except Exception:
            log.exception("complete_txn_offsets for producer %d on %s-%d failed", pid, OFFSETS_TOPIC, partition)
