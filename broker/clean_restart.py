"""Whether a restarted broker's logs still hold everything it wrote: the previous broker epoch to register with.

KIP-966's PreviousBrokerEpoch, with kraftpy's finer rule: a restart is clean after a shutdown that
flushed every log, or when the kernel's boot id is the one recorded (a dead process leaves its writes
in the page cache; only an OS crash or power loss drops an unsynced tail). Pure: the shell
(broker/shell/restart_record.py) reads and writes the file and the boot id. Design notes:
docs/broker.md, section "Notes from the code", broker/clean_restart.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.validate import INT64_MAX, check_bool, check_int, show

# The record is three short fields: anything longer is not ours, and is never parsed.
MAX_RECORD_BYTES = 4096
# Linux's boot id is a 36-character UUID; the fault tool writes one too.
MAX_BOOT_ID_BYTES = 128
NO_EPOCH = -1
_BOOT_ID_CHARS = frozenset("0123456789abcdefABCDEF-")
_FIELDS = ("broker_epoch", "boot_id", "clean_shutdown")


@dataclass(frozen=True)
class RestartRecord:
    """What the broker keeps beside its logs: its last registration's epoch, the boot it ran in, and
    whether it then stopped with every log flushed."""

    broker_epoch: int
    boot_id: str | None
    clean_shutdown: bool

    def encode(self) -> bytes:
        body = {"broker_epoch": self.broker_epoch, "boot_id": self.boot_id, "clean_shutdown": self.clean_shutdown}
        return (json.dumps(body, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class Unreadable:
    """A record file that exists but cannot be trusted (torn by hand, foreign, oversized): `why` says how."""

    why: str


@dataclass(frozen=True)
class RestartDecision:
    previous_broker_epoch: int
    reason: str
    # Whether every byte in the logs is on disk now: the last run flushed them all, or the machine rebooted
    # since. A same-boot restart after a kill has dirty pages left that only the logs it reopens will flush.
    logs_durable: bool = False

    @property
    def clean(self) -> bool:
        return self.previous_broker_epoch != NO_EPOCH

    def status(self) -> dict[str, Any]:
        return {"previous_broker_epoch": self.previous_broker_epoch, "clean": self.clean, "reason": self.reason}


def parse_boot_id(raw: bytes | None) -> str | None:
    """The boot id in a boot id file's bytes, or None when they are absent or do not look like one."""
    if raw is None or len(raw) > MAX_BOOT_ID_BYTES:
        return None
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not text or not set(text) <= _BOOT_ID_CHARS:
        return None
    return text.lower()


def parse_record(raw: bytes | None) -> RestartRecord | Unreadable | None:
    """The record in a record file's bytes; None when there is no file (a first start)."""
    if raw is None:
        return None
    if len(raw) > MAX_RECORD_BYTES:
        return Unreadable(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Unreadable(f"not JSON: {str(exc)[:80]}")
    if not isinstance(body, dict) or set(body) != set(_FIELDS):
        return Unreadable(f"expected an object with {', '.join(_FIELDS)}, got {show(body)}")
    try:
        epoch = check_int(body["broker_epoch"], "broker_epoch", NO_EPOCH, INT64_MAX)
        clean_shutdown = check_bool(body["clean_shutdown"], "clean_shutdown")
    except KafkaError as exc:
        return Unreadable(exc.message)
    boot = body["boot_id"]
    if boot is not None and (not isinstance(boot, str) or parse_boot_id(boot.encode(errors="replace")) != boot):
        return Unreadable(f"field 'boot_id' is not a boot id: {show(boot)}")
    return RestartRecord(epoch, boot, clean_shutdown)


def decide(recorded: RestartRecord | Unreadable | None, boot_id: str | None) -> RestartDecision:
    """The previous broker epoch to register with, and why (a clean restart sends the recorded epoch)."""
    if recorded is None:
        return RestartDecision(NO_EPOCH, "no record")
    if isinstance(recorded, Unreadable):
        return RestartDecision(NO_EPOCH, f"unreadable record: {recorded.why}")
    rebooted = boot_id is not None and recorded.boot_id is not None and recorded.boot_id != boot_id
    durable = recorded.clean_shutdown or rebooted
    if recorded.broker_epoch == NO_EPOCH:
        # The last start was unclean (or the first) and never registered: the controller has not heard of it.
        return RestartDecision(NO_EPOCH, "no registration recorded", durable)
    if recorded.clean_shutdown:
        return RestartDecision(recorded.broker_epoch, "clean shutdown", durable)
    if boot_id is None:
        return RestartDecision(NO_EPOCH, "boot id unreadable", durable)
    if recorded.boot_id is None:
        return RestartDecision(NO_EPOCH, "no boot id recorded", durable)
    if rebooted:
        return RestartDecision(NO_EPOCH, "boot id changed", durable)
    return RestartDecision(recorded.broker_epoch, "same boot id", durable)


def may_record_clean_shutdown(decision: RestartDecision, logs_flushed: bool) -> bool:
    """Whether a stop may write "clean shutdown": every log this process opened was flushed and closed
    (`logs_flushed`), and the logs it never opened held nothing unflushed when it started."""
    return logs_flushed and decision.logs_durable


def record_at_start(decision: RestartDecision, boot_id: str | None) -> RestartRecord:
    """What to write before serving. It keeps the decided epoch, not the one read: after an unclean start
    a kill before the next registration must not turn that loss into a clean restart."""
    return RestartRecord(decision.previous_broker_epoch, boot_id, clean_shutdown=False)
