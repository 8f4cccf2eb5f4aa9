"""LogManager: where partition logs live, and the background work on them (Kafka's LogManager).

Layout: `<data_dir>/partitions/<topic>-<partition>/`, each with a
`partition.metadata` file naming the topic id (as Kafka writes it), so a
directory left by a deleted topic is never mistaken for a new topic of the
same name. A deleted partition's directory is renamed to
`<topic>-<partition>.<uuid>-delete` at once (the name then no longer parses
as a partition) and removed in a worker thread. Directories the metadata
image does not assign to this broker are renamed `...-stray`, never deleted
(Kafka 3.7's stray-log handling: an operator decides).

Background work, all of it off the event loop in a small thread pool
(fsync, unlink and compaction block):
- every log_flush_check_interval_ms: fsync what flush_messages / flush_ms ask
  for, and the segments that rolled since the last flush (Kafka flushes a
  rolled segment asynchronously), which moves the recovery point so a
  restart scans only the active segment;
- every replica_high_watermark_checkpoint_interval_ms: HW and recovery-point
  checkpoints;
- every log_retention_check_interval_ms: retention (retention_ms,
  retention_bytes) on every log, leader or follower, after which the
  partition's core learns the new log start offset;
- the LogCleaner thread compacts logs whose cleanup_policy has "compact".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from kraftpy.broker.clock import wall_ms
from kraftpy.broker.partition_host import HostedPartition
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.storage import LogConfig, LogStorageError, PartitionLog
from kraftpy.broker.storage.cleaner import LogCleaner
from kraftpy.broker.storage.layout import parse_partition_dir_name, partition_dir_name

log = logging.getLogger(__name__)

T = TypeVar("T")

PARTITIONS_DIR = "partitions"
PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"


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
    path = directory / PARTITION_METADATA
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"version: 0\ntopic_id: {topic_id}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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

    # -- opening, deleting -----------------------------------------------------------------------------------

    def open_log(self, topic: str, topic_id: uuid.UUID, partition: int, config: LogConfig) -> PartitionLog:
        """Open (or create) the log of a partition this broker hosts; a leftover of another topic id goes first."""
        directory = self.root / partition_dir_name(topic, partition)
        if directory.exists():
            stored = read_partition_metadata(directory)
            if stored is not None and stored != topic_id:
                log.warning("%s belongs to topic id %s, not %s: deleting it", directory.name, stored, topic_id)
                self._schedule_removal(self._rename(directory, stored, DELETE_SUFFIX))
        directory.mkdir(parents=True, exist_ok=True)
        if read_partition_metadata(directory) != topic_id:
            write_partition_metadata(directory, topic_id)
        plog = PartitionLog.open(directory, config)
        # Appends run on the event loop: flush policies are applied by the flush loop, in a thread.
        plog.flush_inline = False
        if config.compact and self.settings.log_cleaner_enable:
            self._cleaner.add(plog)
        return plog

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
        self._cleaner.remove(plog)
        plog.discard()
        if plog.directory.exists():
            self._schedule_removal(self._rename(plog.directory, topic_id, DELETE_SUFFIX))

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
        self._tasks = [
            asyncio.create_task(self._every(s.log_flush_check_interval_ms, self.flush_once), name="kraftpy-log-flush"),
            asyncio.create_task(
                self._every(s.replica_high_watermark_checkpoint_interval_ms, self.checkpoint_once),
                name="kraftpy-log-checkpoints",
            ),
            asyncio.create_task(
                self._every(s.log_retention_check_interval_ms, self.retention_once), name="kraftpy-log-retention"
            ),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.run(self._cleaner.stop)
        if self._deletions:
            await asyncio.gather(*self._deletions, return_exceptions=True)

    async def close_logs(self, partitions: list[HostedPartition]) -> None:
        """Flush and close every log (checkpoints included), in the worker threads."""

        def close(p: HostedPartition) -> None:
            try:
                p.log.close()
            except LogStorageError as exc:
                log.error("closing %s failed: %s", p.name, exc)

        await asyncio.gather(*(self.run(close, p) for p in partitions))
        self._executor.shutdown(wait=False)

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
