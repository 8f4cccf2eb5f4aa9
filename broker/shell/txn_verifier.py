"""KIP-890 part 1, the I/O half: a partition leader asks the transaction coordinator before a transactional write.

The partition core decides which batches need it and remembers the answers (broker/replication/
txn_verification.py); this asks the coordinator of the request's transactional id, on this broker
or another, through `/broker/verify_txn_partitions` (AddPartitionsToTxn v4 verify_only semantics),
one call per produce request. While one request of a producer waits for its verification on a
partition, the producer's later requests to that partition wait for it too, so its batches still
append in sequence order. Docs: docs/transactions.md, "Verification (KIP-890 part 1)".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from kraftpy.broker.api.find_coordinator import find_coordinator
from kraftpy.broker.replication.txn_verification import produce_error
from kraftpy.protocol.access import VERIFY_TXN_PARTITIONS_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import BatchHeader
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.protocol.topics import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from kraftpy.broker.shell.partition_host import HostedPartition
    from kraftpy.broker.shell.replica_manager import ReplicaManager

# The coordinator call is bounded by the produce's timeout, within these limits.
MIN_VERIFY_TIMEOUT_MS = 1_000
MAX_VERIFY_TIMEOUT_MS = 30_000

TopicPartitionKey = tuple[str, int]


class Batch(NamedTuple):
    key: TopicPartitionKey
    hosted: HostedPartition
    header: BatchHeader


class TxnVerifier:
    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        # (partition, producer id) -> done once that verification's request appended (or gave up).
        self._in_flight: dict[tuple[TopicPartitionKey, int], asyncio.Future[None]] = {}
        self.calls = 0
        self.refused = 0

    @contextlib.asynccontextmanager
    async def verifying(
        self, transactional_id: str | None, batches: list[Batch], timeout_ms: int
    ) -> AsyncIterator[dict[TopicPartitionKey, KafkaError]]:
        """Verify what the cores ask for; yields the refusals. Append inside the block: the producer's
        next requests to the same partitions wait until it ends."""
        mine: list[tuple[TopicPartitionKey, int]] = []
        loop = asyncio.get_running_loop()
        try:
            needed: list[tuple[Batch, int]] = []
            for batch in batches:
                guard = await self._guard(batch, timeout_ms)
                if guard is None:
                    continue
                slot = (batch.key, batch.header.producer_id)
                self._in_flight[slot] = loop.create_future()
                mine.append(slot)
                needed.append((batch, guard))
            refused = await self._verify(transactional_id, needed, timeout_ms) if needed else {}
            self.refused += len(refused)
            yield refused
        finally:
            for slot in mine:
                future = self._in_flight.pop(slot, None)
                if future is not None and not future.done():
                    future.set_result(None)

    async def _guard(self, batch: Batch, timeout_ms: int) -> int | None:
        """The core's guard for this batch, after any verification of its producer in flight here."""
        slot = (batch.key, batch.header.producer_id)
        earlier = self._in_flight.get(slot)
        if earlier is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(earlier), timeout_ms / 1000)
            if not earlier.done():
                return None  # still waiting: the core refuses the batch unless the producer was verified meanwhile
        return batch.hosted.core.begin_txn_verification(batch.header, wall_ms())

    async def _verify(
        self, transactional_id: str | None, needed: list[tuple[Batch, int]], timeout_ms: int
    ) -> dict[TopicPartitionKey, KafkaError]:
        if not transactional_id:
            # Kafka refuses transactional records without a transactional id before anything else.
            error = KafkaError(
                "a transactional batch needs the produce request's transactional_id",
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            )
            return {b.key: error for b, _ in needed}
        first = needed[0][0].header
        body = {
            "transactional_id": transactional_id,
            "producer_id": first.producer_id,
            "producer_epoch": first.producer_epoch,
            "topics": _topics(b.key for b, _ in needed),
        }
        codes, message = await self._ask_coordinator(transactional_id, body, timeout_ms)
        refused: dict[TopicPartitionKey, KafkaError] = {}
        for batch, guard in needed:
            h = batch.header
            if (h.producer_id, h.producer_epoch) != (first.producer_id, first.producer_epoch):
                code = ErrorCode.INVALID_PRODUCER_ID_MAPPING  # one request, one producer (Kafka's rule)
            else:
                code = codes.get(batch.key, ErrorCode.UNKNOWN_SERVER_ERROR)
            error = produce_error(code, message)
            if error is not None:
                refused[batch.key] = error
            else:
                # False when a marker came in between: the core then refuses the append itself.
                batch.hosted.core.txn_verified(h.producer_id, h.producer_epoch, guard)
        return refused

    async def _ask_coordinator(
        self, transactional_id: str, body: Mapping[str, Any], timeout_ms: int
    ) -> tuple[dict[TopicPartitionKey, ErrorCode], str]:
        """Per partition, the coordinator's code; one code for all on a failed call (and its message)."""
        txn = self.rm.txn
        self.calls += 1
        wanted = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
        try:
            where = find_coordinator(
                self.rm.image(),
                transactional_id,
                txn.settings.coordinator.transaction_state_log_num_partitions,
                TRANSACTION_STATE_TOPIC,
            )
            if where["node_id"] == self.rm.broker_id:
                answer = await txn.verify_txn_partitions(body)
            else:
                bound_ms = min(max(timeout_ms, MIN_VERIFY_TIMEOUT_MS), MAX_VERIFY_TIMEOUT_MS)
                answer = await self.rm.node.rpc.call(
                    (where["host"], where["port"]),
                    VERIFY_TXN_PARTITIONS_PATH,
                    body,
                    timeout_ms=bound_ms,
                    raise_errors=False,
                )
        except KafkaError as exc:
            return dict.fromkeys(wanted, exc.code), exc.message
        if answer.get("error_code", 0) != 0:
            return dict.fromkeys(wanted, _code(answer["error_code"])), str(answer.get("error_message") or "")
        codes: dict[TopicPartitionKey, ErrorCode] = {}
        for r in answer.get("results") or []:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                codes[(str(r["name"]), int(r["partition_index"]))] = _code(r.get("error_code", 0))
        return codes, ""


def _code(value: Any) -> ErrorCode:
    try:
        return ErrorCode(int(value))
    except (TypeError, ValueError):
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _topics(keys: Any) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
