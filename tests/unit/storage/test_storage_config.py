"""LogConfig: Kafka's defaults, validation with INVALID_CONFIG, and reading topic config maps."""

from __future__ import annotations

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.storage import LogConfig


def test_defaults_are_kafkas() -> None:
    cfg = LogConfig()
    assert cfg.segment_bytes == 1 << 30
    assert cfg.segment_ms == 7 * 24 * 3600 * 1000
    assert cfg.index_interval_bytes == 4096
    assert cfg.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.retention_bytes == -1
    assert cfg.flush_messages is None and cfg.flush_ms is None
    assert cfg.cleanup_policy == "delete" and cfg.delete and not cfg.compact
    assert cfg.delete_retention_ms == 24 * 3600 * 1000
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_message_bytes == 1048588


@pytest.mark.parametrize(
    "field,value",
    [
        ("segment_bytes", 2**31),
        ("segment_bytes", 13),
        ("retention_ms", -2),
        ("flush_messages", 0),
        ("cleanup_policy", "compress"),
        ("min_cleanable_dirty_ratio", 1.5),
    ],
)
def test_bad_values_raise_invalid_config(field: str, value: object) -> None:
    with pytest.raises(KafkaError) as info:
        LogConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert field in info.value.message


def test_from_topic_configs_reads_snake_case_dotted_names_and_strings() -> None:
    cfg = LogConfig.from_topic_configs(
        {
            "segment_bytes": "4096",
            "retention.ms": -1,
            "cleanup.policy": "compact, delete",
            "min_cleanable_dirty_ratio": "0.25",
            "flush.messages": str(2**63 - 1),  # Kafka's spelling of "off"
            "min_insync_replicas": 2,  # not a log setting: ignored
        }
    )
    assert cfg.segment_bytes == 4096
    assert cfg.retention_ms == -1
    assert cfg.cleanup_policy == "compact,delete" and cfg.compact and cfg.delete
    assert cfg.min_cleanable_dirty_ratio == 0.25
    assert cfg.flush_messages is None


def test_from_topic_configs_names_the_bad_key() -> None:
    with pytest.raises(KafkaError) as info:
        LogConfig.from_topic_configs({"segment_ms": "soon"})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert "segment_ms" in info.value.message
