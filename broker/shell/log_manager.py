"""LogManager: where partition logs live, and the background work on them (Kafka's LogManager).

Design notes: docs/broker.md, section "broker/shell/log_manager.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.shell.partition_host import HostedPartition
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.storage import LogConfig, LogStorageError, PartitionLog
from kraftpy.storage.cleaner import LogCleaner
from kraftpy.storage.files import atomic_write, deferred_directory_sync, fsync_dir
from kraftpy.storage.integrity import Corruption, Pacer, find_corruption
from kraftpy.storage.layout import parse_partition_dir_name, partition_dir_name

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

PARTITIONS_DIR = "partitions"
PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"
# Opened logs handed back per loop iteration: hosting one costs the replica manager up to a millisecond or two
# on the loop, so a batch of hundreds is handed back in chunks with I/O served between them.
ADOPT_CHUNK = 16


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id in `partition.metadata` (Kafka's format: `version: 0` / `topic_id: ...`), None if absent."""
    try:
        text = (directory / PARTITION_METADATA).read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid.UUID(value.strip())
            except ValueError:
                return None
    return None


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    atomic_write(directory / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}\n".encode("ascii"))


@dataclass
class OpenRequest(Generic[R]):
    """A log to open in a worker thread; `then(log)` runs in the same thread after it (e.g. producer state)."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    config: LogConfig
    then: Callable[[PartitionLog], R] | None = None


@dataclass
class OpenedLog(Generic[R]):
    log: PartitionLog
    prepared: R | None


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        settings: ReplicaManagerSettings,
        partitions: Callable[[], list[HostedPartition]],
    ) -> None:
        self.root = Path(data_dir) / PARTITIONS_DIR
        self.settings = settings
        self._partitions = partitions
        # Two threads: one long fsync or deletion must not hold up checkpoints; more would only
        # compete for the same disk and the GIL.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kraftpy-log-io")
        self._cleaner = LogCleaner(backoff_ms=settings.log_cleaner_backoff_ms)
        self._tasks: list[asyncio.Task[None]] = []
        self._deletions: set[asyncio.Task[None]] = set()
        self._strays_checked = False
        self.retention_runs = 0
        self._open_queue: list[tuple[OpenRequest[Any], asyncio.Future[OpenedLog[Any]]]] = []
        self._opener: asyncio.Task[None] | None = None
        self._stopping = False
        self.open_batches = 0  # batches opened (each one fsync of the partitions directory at most)
        # A batch still opening when stop gave up: its logs are never closed, so never flushed by this process.
        self.opens_abandoned = False
        # The scrubber: one thread of its own, so a slow pass never holds up flushes or opens.
        self._scrub_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kraftpy-log-scrub")
        self.on_corrupt: Callable[[HostedPartition, str], None] = lambda p, reason: None
        self.scrub_passes = 0
        self.scrub_bytes = 0
        self.scrub_found = 0

    # The class that opens logs; a test substitutes an instrumented subclass of the real one.
    log_class: type[PartitionLog] = PartitionLog

    # -- opening, deleting -----------------------------------------------------------------------------------

    def open_log(self, topic: str, topic_id: uuid.UUID, partition: int, config: LogConfig) -> PartitionLog:
        """Open (or create) a log here and now, durable in `partitions/` too (blocking: tools and tests)."""
        plog, created = self._open_one(topic, topic_id, partition, config)
        if created:
            fsync_dir(self.root)
        return plog

    def open_later(self, request: OpenRequest[R]) -> asyncio.Future[OpenedLog[R]]:
        """Queue `request` for the opener (worker thread); the future gets the log or the error that stopped it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OpenedLog[R]] = loop.create_future()
        if self._stopping:
            future.set_exception(LogStorageError("the log manager is stopping"))
            return future
        self._open_queue.append((request, future))
        if self._opener is None or self._opener.done():
            self._opener = loop.create_task(self._open_queued(), name="kraftpy-log-open")
        return future

    async def _open_queued(self) -> None:
        # One batch at a time, in one thread: the other worker stays free for flushes and checkpoints,
        # and what queues up while a batch runs becomes the next batch (one partitions/ fsync for all).
        while self._open_queue and not self._stopping:
            batch, self._open_queue = self._open_queue, []
            results: list[OpenedLog[Any] | BaseException]
            try:
                results = await self.run(self._open_batch, [request for request, _ in batch])
            except Exception as exc:  # the pool is gone (shutdown): every waiter must still get an answer
                results = [exc] * len(batch)
            self.open_batches += 1
            for i, ((_, future), result) in enumerate(zip(batch, results, strict=True)):
                if i and i % ADOPT_CHUNK == 0:
                    await asyncio.sleep(0)  # the owners' callbacks run a chunk at a time; the loop polls between
                if future.done():  # given up by its owner
                    if isinstance(result, OpenedLog):
                        self._forget(result.log)
                elif isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _open_batch(self, requests: list[OpenRequest[Any]]) -> list[OpenedLog[Any] | BaseException]:
        """In a worker thread: open every request's log; one fsync of partitions/ covers the new directories."""
        results: list[OpenedLog[Any] | BaseException] = []
        any_created = False
        for r in requests:
            plog: PartitionLog | None = None
            try:
                plog, created = self._open_one(r.topic, r.topic_id, r.partition, r.config)
                any_created |= created
                results.append(OpenedLog(plog, r.then(plog) if r.then is not None else None))
            except Exception as exc:
                if plog is not None:  # `then` failed: nobody will own this log
                    self._forget(plog)
                results.append(exc)
        if any_created:
            try:
                # A new directory's name is durable only once its parent is fsynced; without this a
                # crash could lose a partition whose segments were flushed (recovery point moved).
                fsync_dir(self.root)
            except OSError as exc:
                error = LogStorageError(f"fsync of {self.root} failed: {exc}")
                for i, result in enumerate(results):
                    if isinstance(result, OpenedLog):
                        self._forget(result.log)
                        results[i] = error
        return results

    def _open_one(
        self, topic: str, topic_id: uuid.UUID, partition: int, config: LogConfig
    ) -> tuple[PartitionLog, bool]:
        """Open (or create) a partition's log; a leftover of another topic id goes first. (log, directory created)

        Blocking: runs in a worker thread (or in tools and tests). The caller fsyncs `partitions/` when a
        directory was created.
        """
        directory = self.root / partition_dir_name(topic, partition)
        if directory.exists():
            stored = read_partition_metadata(directory)
            if stored is not None and stored != topic_id:
                log.warning("%s belongs to topic id %s, not %s: deleting it", directory.name, stored, topic_id)
                self._schedule_removal(self._rename(directory, stored, DELETE_SUFFIX))
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if created:
            # Nothing depends on this directory until it is handed out, so its files' directory
            # fsyncs (partition.metadata, the leader-epoch and three offset checkpoints, the first
            # segment's names) collapse into one at the end of the block. What stays per file is the
            # fsync of its contents before its rename: a checkpoint torn by a crash would stop the
            # next open, while a missing one falls back to the log start (all zero here).
            with deferred_directory_sync(directory):
                write_partition_metadata(directory, topic_id)
                plog = self.log_class.open(directory, config)
        else:
            if read_partition_metadata(directory) != topic_id:
                write_partition_metadata(directory, topic_id)
            plog = self.log_class.open(directory, config)
        # Appends run on the event loop: flush policies are applied by the flush loop, in a thread.
        plog.flush_inline = False
        if config.compact and self.settings.log_cleaner_enable:
            self._cleaner.add(plog)
        return plog, created

    def update_config(self, plog: PartitionLog, config: LogConfig) -> None:
        if plog.config == config:
            return
        plog.update_config(config)
        if config.compact and self.settings.log_cleaner_enable:
            self._cleaner.add(plog)
        else:
            self._cleaner.remove(plog)

    def delete_log(self, plog: PartitionLog, topic_id: uuid.UUID) -> None:
        """Stop using the log now (no flush: its data is being deleted) and remove it in the background."""
        self._forget(plog)
        if plog.directory.exists():
            self._schedule_removal(self._rename(plog.directory, topic_id, DELETE_SUFFIX))

    def _forget(self, plog: PartitionLog) -> None:
        """Release a log without flushing it (deleted, or opened for nobody) and keep the cleaner off it."""
        self._cleaner.remove(plog)
        plog.discard()

    def _rename(self, directory: Path, topic_id: uuid.UUID | None, suffix: str) -> Path:
        tag = topic_id.hex if topic_id is not None else uuid.uuid4().hex
        target = directory.with_name(f"{directory.name}.{tag}{suffix}")
        if target.exists():
            target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{suffix}")
        os.replace(directory, target)
        return target

    def _schedule_removal(self, directory: Path) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            shutil.rmtree(directory, ignore_errors=True)
            return
        task = loop.create_task(self.run(shutil.rmtree, directory, True))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    def mark_strays(self, hosted: set[str]) -> list[str]:
        """Rename partition directories this broker does not host (by the first full image) to `...-stray`."""
        if self._strays_checked or not self.root.exists():
            return []
        self._strays_checked = True
        renamed = []
        for path in sorted(self.root.iterdir()):
            if not path.is_dir() or parse_partition_dir_name(path.name) is None or path.name in hosted:
                continue
            log.warning("%s is not assigned to this broker by the metadata image; renaming it as stray", path.name)
            self._rename(path, read_partition_metadata(path), STRAY_SUFFIX)
            renamed.append(path.name)
        return renamed

    # -- worker threads ----------------------------------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for path in self.root.iterdir():
            if path.name.endswith(DELETE_SUFFIX):
                self._schedule_removal(path)
        if self.settings.log_cleaner_enable:
            self._cleaner.start()
        s = self.settings
        if s.log_scrub_bytes_per_second > 0:
            self._tasks.append(asyncio.create_task(self._scrub_loop(), name="kraftpy-log-scrub"))
        self._tasks += [
            asyncio.create_task(self._every(s.log_flush_check_interval_ms, self.flush_once), name="kraftpy-log-flush"),
            asyncio.create_task(
                self._every(s.replica_high_watermark_checkpoint_interval_ms, self.checkpoint_once),
                name="kraftpy-log-checkpoints",
            ),
            asyncio.create_task(
                self._every(s.log_retention_check_interval_ms, self.retention_once), name="kraftpy-log-retention"
            ),
        ]

    async def stop(self, open_wait_ms: int = 30_000) -> None:
        """Stop the background jobs; queued opens fail, the batch being opened is waited for (bounded)."""
        self._stopping = True
        for _, future in self._open_queue:
            future.set_exception(LogStorageError("the log manager stopped before opening this log"))
        self._open_queue = []
        if self._opener is not None and not self._opener.done():
            # A thread cannot be cancelled: a log it opens after this gives up stays open until exit.
            done, _ = await asyncio.wait({self._opener}, timeout=open_wait_ms / 1000)
            if not done:
                self.opens_abandoned = True
                log.warning("a batch of logs was still opening after %d ms; not waiting longer", open_wait_ms)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._scrub_executor.shutdown(wait=False)  # a pass in progress sees _stopping and ends
        await self.run(self._cleaner.stop)
        if self._deletions:
            await asyncio.gather(*self._deletions, return_exceptions=True)

    async def close_logs(self, partitions: list[HostedPartition], unclaimed: Sequence[PartitionLog] = ()) -> bool:
        """Flush and close every log (checkpoints included), in the worker threads.

        `unclaimed`: logs opened for partitions that were never hosted (the broker stopped first).
        Returns whether every one was flushed: a log that failed earlier closes without its flush.
        """

        def close(plog: PartitionLog) -> bool:
            try:
                plog.close()
            except LogStorageError as exc:
                log.error("closing %s failed: %s", plog.directory.name, exc)
                return False
            return plog.failure is None

        logs = [p.log for p in partitions] + list(unclaimed)
        flushed = await asyncio.gather(*(self.run(close, plog) for plog in logs))
        self._executor.shutdown(wait=False)
        return all(flushed)

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        interval = max(interval_ms, 1) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background log job %s failed", getattr(job, "__name__", job))

    # -- the scrubber -----------------------------------------------------------------------------------------

    async def _scrub_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            pace = Pacer(self.settings.log_scrub_bytes_per_second)
            for p in self._live():
                if self._stopping:
                    return
                try:
                    found = await loop.run_in_executor(self._scrub_executor, self._scrub_one, p.log, pace)
                except (LogStorageError, RuntimeError) as exc:  # closed meanwhile, or the pool is shutting down
                    log.debug("scrub of %s skipped: %s", p.name, exc)
                    continue
                if found is not None and p.offline is None and not p.stopped:
                    self.scrub_found += 1
                    self.on_corrupt(p, f"found by the scrubber: {found}")
            self.scrub_passes += 1
            await asyncio.sleep(max(self.settings.log_scrub_interval_ms, 1) / 1000)

    def _scrub_one(self, plog: PartitionLog, pace: Pacer) -> Corruption | None:
        def paced(size: int) -> None:
            self.scrub_bytes += size
            pace(size)

        return find_corruption(plog, pace=paced, stopping=lambda: self._stopping)

    def scrub_status(self) -> dict[str, Any]:
        return {
            "enabled": self.settings.log_scrub_bytes_per_second > 0,
            "passes": self.scrub_passes,
            "bytes": self.scrub_bytes,
            "corrupt_found": self.scrub_found,
        }

    # -- the jobs ---------------------------------------------------------------------------------------------

    def _live(self) -> list[HostedPartition]:
        return [p for p in self._partitions() if p.offline is None and not p.stopped and not p.log.closed]

    async def flush_once(self) -> None:
        now = wall_ms()

        def flush(p: HostedPartition) -> None:
            plog = p.log
            if plog.closed:
                return
            plog.maybe_flush(now)
            rolled = plog.active_segment_base_offset
            if plog.recovery_point < rolled:
                plog.flush(up_to_offset=rolled)

        await self._each(flush)

    async def checkpoint_once(self) -> None:
        await self._each(lambda p: p.log.write_checkpoints() if not p.log.closed else None)

    async def retention_once(self) -> None:
        self.retention_runs += 1
        now = wall_ms()
        for p in self._live():
            try:
                deleted = await self.run(p.log.delete_retention_segments, now)
            except LogStorageError as exc:
                if not p.log.closed:
                    p.go_offline(f"retention failed: {exc}")
                continue
            if deleted and not p.stopped and p.offline is None:
                p.after_retention()

    async def _each(self, fn: Callable[[HostedPartition], None]) -> None:
        for p in self._live():
            try:
                await self.run(fn, p)
            except LogStorageError as exc:
                if not p.log.closed and not p.stopped:
                    p.go_offline(str(exc))
