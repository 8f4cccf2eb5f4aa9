"""LogConfig: the per-topic settings of a partition log, with Kafka's names, units and defaults.

Every field is the snake_case spelling of Kafka's topic config (segment.bytes ->
segment_bytes) with the same meaning and default, so an operator's Kafka
knowledge carries over. Validation happens once, here, so the log never has to
second-guess a value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX

HOUR_MS = 60 * 60 * 1000
DAY_MS = 24 * HOUR_MS

CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log; immutable, replace() to change."""

    # A segment rolls when appending would take it past this size (Kafka: segment.bytes).
    segment_bytes: int = 1024 * 1024 * 1024
    # ... or when its first batch is older than this (segment.ms).
    segment_ms: int = 7 * DAY_MS
    # Bytes of log between two sparse offset-index entries (index.interval.bytes).
    index_interval_bytes: int = 4096
    # A segment rolls when its offset index would grow past this (segment.index.bytes).
    segment_index_bytes: int = 10 * 1024 * 1024
    # Delete closed segments whose newest record is older than this; -1 keeps forever (retention.ms).
    retention_ms: int = 7 * DAY_MS
    # Delete the oldest closed segments while the log is larger than this; -1 means no limit.
    retention_bytes: int = -1
    # fsync after this many records / this long since the last fsync; None leaves
    # durability to replication, Kafka's default (flush.messages, flush.ms).
    flush_messages: int | None = None
    flush_ms: int | None = None
    # "delete", "compact" or "compact,delete" (cleanup.policy).
    cleanup_policy: str = "delete"
    # How long a tombstone survives compaction so slow consumers still see it (delete.retention.ms).
    delete_retention_ms: int = DAY_MS
    # Compact only when dirty bytes / cleanable bytes reaches this (min.cleanable.dirty.ratio).
    min_cleanable_dirty_ratio: float = 0.5
    # Never compact records younger than this (min.compaction.lag.ms).
    min_compaction_lag_ms: int = 0
    # Largest batch a producer may append (max.message.bytes).
    max_message_bytes: int = 1048588
    # Create the active segment's file segment_bytes long (sparse) rather than growing it with each
    # append: an fdatasync then changes no file size (preallocate; off by default, as in Kafka).
    preallocate: bool = False

    def __post_init__(self) -> None:
        _require(14 <= self.segment_bytes <= INT32_MAX, "segment_bytes", self.segment_bytes, "in [14, 2^31-1]")
        _require(self.segment_ms >= 1, "segment_ms", self.segment_ms, ">= 1")
        _require(self.index_interval_bytes >= 0, "index_interval_bytes", self.index_interval_bytes, ">= 0")
        _require(self.segment_index_bytes >= 8, "segment_index_bytes", self.segment_index_bytes, ">= 8")
        _require(self.retention_ms >= -1, "retention_ms", self.retention_ms, ">= -1")
        _require(self.retention_bytes >= -1, "retention_bytes", self.retention_bytes, ">= -1")
        for name in ("flush_messages", "flush_ms"):
            value = getattr(self, name)
            _require(value is None or value >= 1, name, value, "None (off) or >= 1")
        _require(
            self.cleanup_policy in CLEANUP_POLICIES,
            "cleanup_policy",
            self.cleanup_policy,
            "one of delete, compact, compact,delete",
        )
        _require(self.delete_retention_ms >= 0, "delete_retention_ms", self.delete_retention_ms, ">= 0")
        _require(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min_cleanable_dirty_ratio",
            self.min_cleanable_dirty_ratio,
            "in [0, 1]",
        )
        _require(self.min_compaction_lag_ms >= 0, "min_compaction_lag_ms", self.min_compaction_lag_ms, ">= 0")
        _require(self.max_message_bytes >= 0, "max_message_bytes", self.max_message_bytes, ">= 0")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def preallocate_bytes(self) -> int:
        """How long a new active segment's file starts (LogSegment.preallocate); 0: as it grows."""
        return self.segment_bytes if self.preallocate else 0

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, Any]) -> LogConfig:
        """Build from a topic's config map; keys are snake_case (Kafka's dotted names also work).

        Keys that are not log settings (min_insync_replicas, ...) belong to other
        layers and are ignored. Values may be strings, as they arrive from a CLI.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for raw_key, value in configs.items():
            key = raw_key.replace(".", "_").replace("-", "_")
            if key not in fields:
                continue
            kwargs[key] = _coerce(key, value)
        return cls(**kwargs)

    def as_topic_configs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(key: str, value: Any) -> Any:
    try:
        if key == "cleanup_policy":
            return str(value).replace(" ", "").lower()
        if key == "min_cleanable_dirty_ratio":
            return float(value)
        if key == "preallocate":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in ("true", "false"):
                raise ValueError(value)
            return text == "true"
        if key in ("flush_messages", "flush_ms"):
            if value is None or str(value).strip().lower() in ("", "none", "off"):
                return None
            number = int(value)
            # Kafka spells "off" as Long.MAX_VALUE.
            return None if number >= INT64_MAX else number
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    except (TypeError, ValueError):
        raise KafkaError(f"topic config {key}={value!r} is not a valid value", ErrorCode.INVALID_CONFIG) from None


def _require(ok: bool, name: str, value: Any, expected: str) -> None:
    if not ok:
        raise KafkaError(f"log config {name}={value!r} must be {expected}", ErrorCode.INVALID_CONFIG)
