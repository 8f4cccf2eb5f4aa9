"""Loads and unloads `__consumer_offsets` partitions in the group coordinator as leadership moves.

Design notes: docs/groups.md, section "broker/groups/shell/partition_loader.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraftpy.broker.groups import GroupCoordinator
from kraftpy.broker.groups.actions import Action
from kraftpy.broker.groups.records import Record
from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records import decode_batch, iter_batches
from kraftpy.protocol.topics import OFFSETS_TOPIC
from kraftpy.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from kraftpy.broker.shell.partition_host import HostedPartition
    from kraftpy.broker.shell.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Kafka's ControlRecordType: a control record's key is int16 version, int16 type (0 ABORT, 1 COMMIT).
CONTROL_COMMIT = 1
# A partition's term of leadership here: (topic id, leader epoch).
Term = tuple[uuid.UUID, int]
# How often a waiting load looks at the high watermark even without a wake-up, and a failed load retries.
POLL_S = 0.5


def _commits(data: bytes, pos: int) -> bool | None:
    """A control batch's verdict: True for COMMIT, False for ABORT, None if it does not decode."""
    try:
        key = decode_batch(data, pos).records[0].key
    except (CorruptRecordError, IndexError):
        return None
    if key is None or len(key) < 4:
        return None
    return struct.unpack_from(">hh", key)[1] == CONTROL_COMMIT


def read_records(
    plog: Any,
    end_offset: int,
    buffer_bytes: int,
    topic: str = OFFSETS_TOPIC,
    open_txns: dict[int, list[Record]] | None = None,
) -> list[Record]:
    """(key, value) of every record of `plog` in [log start, end_offset), in log order (blocking: run in a thread).

    Records of a transactional batch (TxnOffsetCommit) count where their transaction's COMMIT marker
    is, and not at all if it aborted; those of a transaction still open at `end_offset` go to
    `open_txns` (producer id -> records). Batches whose records do not decode are skipped with an
    error logged, and so are records without a key (none of ours has no key).
    """
    records: list[Record] = []
    txns: dict[int, list[Record]] = {}
    offset = plog.log_start_offset
    while offset < end_offset:
        try:
            data = plog.read(offset, buffer_bytes, max_offset=end_offset)
        except OffsetOutOfRangeError:
            if plog.log_start_offset <= offset:
                raise
            offset = plog.log_start_offset  # retention moved the start meanwhile: what is gone is gone
            continue
        if not data:
            break
        for pos, header in iter_batches(data, check_crc=False):
            offset = header.next_offset
            if header.is_control:
                held = txns.pop(header.producer_id, [])
                if _commits(data, pos):
                    records.extend(held)
                continue
            try:
                batch = decode_batch(data, pos)
            except CorruptRecordError as exc:
                log.error(
                    "%s: skipping the batch at offsets %d-%d, its records do not decode: %s",
                    topic, header.base_offset, header.last_offset, exc,
                )  # fmt: skip
                continue
            target = txns.setdefault(header.producer_id, []) if header.is_transactional else records
            for record in batch.records:
                if record.key is None:
                    log.error("%s: skipping the record without a key at offset %d", topic, record.offset)
                    continue
                target.append((record.key, record.value))
    if open_txns is not None:
        open_txns.update({pid: held for pid, held in txns.items() if held})
    return records


class OffsetsLoader:
    def __init__(
        self,
        rm: ReplicaManager,
        coordinator: GroupCoordinator,
        perform: Callable[[list[Action]], None],
        now_ms: Callable[[], int],
        *,
        buffer_bytes: int,
        topic: str = OFFSETS_TOPIC,
        num_partitions: int | None = None,
    ) -> None:
        self.rm = rm
        # The internal topic whose leaderships load the coordinator (the transaction coordinator
        # uses this loader for __transaction_state); the coordinator offers begin_loading(partition,
        # leader_epoch), complete_loading(partition, records, now_ms) and unload(partition, now_ms).
        self.topic = topic
        self.num_partitions = (
            num_partitions if num_partitions is not None else coordinator.config.offsets_topic_num_partitions
        )
        self.coordinator = coordinator
        self.perform = perform
        self.now_ms = now_ms
        self.buffer_bytes = buffer_bytes
        # partition -> the term it is loaded (or loading) in: (topic id, leader epoch), so a topic deleted
        # and created again, or a leadership lost and won back, is a new term and loads afresh.
        self.owned: dict[int, Term] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.loads_completed = 0

    def epoch(self, partition: int) -> int | None:
        """The leader epoch this broker serves `partition` at (its writes are fenced by it), if it does."""
        term = self.owned.get(partition)
        return None if term is None else term[1]

    @property
    def loading(self) -> int:
        return sum(1 for t in self._tasks.values() if not t.done())

    def _leading(self) -> dict[int, tuple[Term, HostedPartition | None]]:
        """Partition -> (its term, the hosted partition once it leads here, else None).

        A partition the metadata gives this broker to lead while its log is still opening counts
        too (without a hosted partition): its groups answer COORDINATOR_LOAD_IN_PROGRESS, as in
        Kafka, rather than NOT_COORDINATOR, and the load starts once the log is open.
        """
        out: dict[int, tuple[Term, HostedPartition | None]] = {}
        hosted_partitions = self.rm.partitions
        image = self.rm.image()
        topic = image.topic(self.topic) if image is not None else None
        for partition in range(self.num_partitions):
            hosted = hosted_partitions.get((self.topic, partition))
            if hosted is not None:
                if hosted.offline is None and not hosted.stopped and hosted.is_leader:
                    out[partition] = ((hosted.topic_id, hosted.core.leader_epoch), hosted)
            elif topic is not None and partition < len(topic.partitions):
                registration = topic.partitions[partition]
                if registration.leader == self.rm.broker_id:
                    out[partition] = ((topic.topic_id, registration.leader_epoch), None)
        return out

    def reconcile(self) -> None:
        """Load what this broker newly leads, unload what it no longer leads (at the same epoch)."""
        leading = self._leading()
        for partition, term in list(self.owned.items()):
            now_leading = leading.get(partition)
            if now_leading is None or now_leading[0] != term:
                self._unload(partition)
        for partition, (term, hosted) in leading.items():
            if partition not in self.owned:
                self.owned[partition] = term
                self.coordinator.begin_loading(partition, term[1])
            if hosted is not None and partition not in self._tasks:
                self._tasks[partition] = asyncio.get_running_loop().create_task(
                    self._run_load(partition, term, hosted), name=f"kraftpy-load-{self.topic}-{partition}"
                )

    def reload(self, partition: int) -> None:
        """Forget the partition's state and load it again from the log (after a write of unknown fate)."""
        if partition in self.owned:
            log.warning("reloading %s-%d: a write's fate is unknown", self.topic, partition)
            self._unload(partition)
        self.reconcile()

    def unload_all(self) -> None:
        for partition in list(self.owned):
            self._unload(partition)

    def _unload(self, partition: int) -> None:
        self.owned.pop(partition, None)
        task = self._tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        log.info("unloading %s-%d", self.topic, partition)
        self.perform(self.coordinator.unload(partition, self.now_ms()))

    def _still_owned(self, partition: int, term: Term, hosted: HostedPartition) -> bool:
        return (
            self.owned.get(partition) == term
            and hosted.offline is None
            and not hosted.stopped
            and hosted.is_leader
            and (hosted.topic_id, hosted.core.leader_epoch) == term
        )

    async def _run_load(self, partition: int, term: Term, hosted: HostedPartition) -> None:
        target = hosted.log.log_end_offset  # as of becoming leader
        log.info("loading %s-%d at leader epoch %d (up to offset %d)", self.topic, partition, term[1], target)
        while self._still_owned(partition, term, hosted):
            high_watermark = hosted.log.high_watermark
            if high_watermark < target:
                await self._wait_for_change(hosted)
                continue
            open_txns: dict[int, list[Record]] = {}
            try:
                records = await asyncio.to_thread(
                    read_records, hosted.log, high_watermark, self.buffer_bytes, self.topic, open_txns
                )
            except Exception as exc:  # I/O, a log closed under us: try again while we still lead
                log.warning("reading %s-%d failed (%s); retrying", self.topic, partition, exc)
                await asyncio.sleep(POLL_S)
                continue
            if not self._still_owned(partition, term, hosted):
                return
            if open_txns:  # only __consumer_offsets has transactional batches
                actions = self.coordinator.complete_loading(partition, records, self.now_ms(), open_txns=open_txns)
            else:
                actions = self.coordinator.complete_loading(partition, records, self.now_ms())
            self.loads_completed += 1
            log.info("loaded %s-%d: %d records", self.topic, partition, len(records))
            self.perform(actions)
            return

    async def _wait_for_change(self, hosted: HostedPartition) -> None:
        event = asyncio.Event()
        hosted.watchers.add(event)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await event.wait()
        finally:
            hosted.watchers.discard(event)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self.unload_all()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
