"""The broker's `broker_epoch.json` beside its logs, and the kernel's boot id: the I/O of broker/clean_restart.py.

Read once at start (the decision), rewritten at once as not clean, then after every registration and,
once every log is flushed and closed, as a clean shutdown. Every write is atomic (temp file, fsync,
rename, directory fsync). Design notes: docs/broker.md, section "Notes from the code",
broker/shell/restart_record.py.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import replace
from pathlib import Path

from kraftpy.broker.clean_restart import (
    MAX_BOOT_ID_BYTES,
    MAX_RECORD_BYTES,
    RestartDecision,
    RestartRecord,
    Unreadable,
    decide,
    may_record_clean_shutdown,
    parse_boot_id,
    parse_record,
    record_at_start,
)
from kraftpy.storage.files import atomic_write

log = logging.getLogger(__name__)

FILE_NAME = "broker_epoch.json"


def read_bounded(path: Path, limit: int) -> bytes | None:
    """At most `limit` + 1 bytes of a regular file (so a longer one shows as longer); None when absent.

    O_NONBLOCK: a FIFO put in the file's place must not hang the start (it then fails the regular-file check).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        # /proc files report size 0, so read until EOF or past the limit rather than trusting st_size.
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_boot_id(path: Path) -> str | None:
    """The current boot id, or None (with a warning) when `path` cannot be read or holds no boot id."""
    try:
        boot_id = parse_boot_id(read_bounded(path, MAX_BOOT_ID_BYTES))
    except OSError as exc:
        log.warning("cannot read the boot id from %s (boot_id_path): %s", path, exc)
        return None
    if boot_id is None:
        log.warning("no boot id in %s (boot_id_path): only a clean shutdown counts as a clean restart", path)
    return boot_id


class RestartRecordFile:
    """One broker's record file. `record` is what the file holds (updated only after a write succeeded)."""

    def __init__(self, data_dir: Path, boot_id_path: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.boot_id_path = Path(boot_id_path)
        self.boot_id: str | None = None
        self.record: RestartRecord | None = None
        self.decision: RestartDecision | None = None

    def at_start(self) -> RestartDecision:
        """Decide from the file and the boot id, then mark the file not clean before anything is served.

        A failed write raises (a start error): the old file may say "clean shutdown", and a power loss
        during this run would then pass for a clean restart.
        """
        self.boot_id = read_boot_id(self.boot_id_path)
        try:
            recorded = parse_record(read_bounded(self.path, MAX_RECORD_BYTES))
        except OSError as exc:
            recorded = Unreadable(str(exc))
        self.decision = decide(recorded, self.boot_id)
        self._write(record_at_start(self.decision, self.boot_id))
        return self.decision

    def registered(self, broker_epoch: int) -> None:
        """After a registration answer. A failed write leaves an older epoch, which the controller takes for
        an unclean restart next time: safe, so it is logged, not raised."""
        try:
            self._write(RestartRecord(broker_epoch, self.boot_id, clean_shutdown=False))
        except OSError as exc:
            log.warning("cannot record broker epoch %d in %s: %s", broker_epoch, self.path, exc)

    def stopped(self, logs_flushed: bool) -> None:
        """After the replica manager stopped: record a clean shutdown when nothing in the logs can be lost now."""
        if self.record is None or self.decision is None:
            return
        if not may_record_clean_shutdown(self.decision, logs_flushed):
            log.info(
                "not recording a clean shutdown: %s",
                "a log was not flushed"
                if not logs_flushed
                else f"the logs may hold unflushed data from before this start ({self.decision.reason})",
            )
            return
        try:
            self._write(replace(self.record, clean_shutdown=True))
        except OSError as exc:
            log.warning("cannot record the clean shutdown in %s: %s", self.path, exc)

    def _write(self, record: RestartRecord) -> None:
        atomic_write(self.path, record.encode())
        self.record = record
