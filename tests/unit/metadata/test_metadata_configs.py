"""Topic configs: Kafka's names and defaults, normalisation, type and range checks, resolution."""

from __future__ import annotations

import pytest

from kraftpy.metadata import configs
from kraftpy.metadata.configs import LONG_MAX, TOPIC_CONFIGS, ConfigResourceType, ConfigSource
from kraftpy.protocol.errors import ErrorCode, KafkaError


def test_kafka_defaults() -> None:
    d = configs.TOPIC_CONFIG_DEFAULTS
    assert d["retention_ms"] == 604_800_000 and d["retention_bytes"] == -1
    assert d["segment_bytes"] == 1_073_741_824 and d["segment_ms"] == 604_800_000
    assert d["cleanup_policy"] == "delete" and d["min_insync_replicas"] == 1
    assert d["unclean_leader_election_enable"] is False and d["max_message_bytes"] == 1_048_588
    assert d["delete_retention_ms"] == 86_400_000 and d["min_cleanable_dirty_ratio"] == 0.5
    assert d["min_compaction_lag_ms"] == 0 and d["message_timestamp_type"] == "CreateTime"
    assert d["compression_type"] == "producer" and d["flush_messages"] == LONG_MAX and d["flush_ms"] == LONG_MAX
    assert d["index_interval_bytes"] == 4096
    assert all(name == name.lower() and "." not in name for name in TOPIC_CONFIGS)
    assert TOPIC_CONFIGS["retention_ms"].kafka_name == "retention.ms"


def test_dotted_names_are_normalised() -> None:
    assert configs.normalize_name("retention.ms") == "retention_ms"
    assert configs.normalize_name("unclean.leader.election.enable") == "unclean_leader_election_enable"
    assert configs.validate_configs({"segment.bytes": "2048", "cleanup_policy": "compact"}) == {
        "segment_bytes": 2048,
        "cleanup_policy": "compact",
    }


def _invalid(call) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        call()
    assert info.value.code == ErrorCode.INVALID_CONFIG
    return info.value


def test_unknown_and_duplicate_names() -> None:
    assert "Unknown topic config name: retention.hours" in str(
        _invalid(lambda: configs.normalize_name("retention.hours"))
    )
    assert "broker" in str(_invalid(lambda: configs.normalize_name("nope", ConfigResourceType.BROKER)))
    error = _invalid(lambda: configs.validate_configs({"retention.ms": 1, "retention_ms": 2}))
    assert "given twice" in error.message and error.details["config"] == "retention_ms"


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("retention_ms", "abc", "long number"),
        ("retention_ms", True, "boolean"),
        ("retention_ms", -2, "at least -1"),
        ("retention_ms", 2**63, "out of range"),
        ("segment_bytes", 13, "at least 14"),
        ("segment_bytes", 2**31, "out of range"),
        ("segment_ms", 0, "at least 1"),
        ("min_insync_replicas", 0, "at least 1"),
        ("min_cleanable_dirty_ratio", 1.5, "no more than 1"),
        ("min_cleanable_dirty_ratio", "nan", "finite"),
        ("min_cleanable_dirty_ratio", "half", "double"),
        ("unclean_leader_election_enable", "yes", "true or false"),
        ("unclean_leader_election_enable", 1, "true or false"),
        ("cleanup_policy", "delete,shred", "shred"),
        ("cleanup_policy", "", "at least one"),
        ("compression_type", "brotli", "one of"),
        ("message_timestamp_type", "createtime", "one of"),
        ("max_message_bytes", 1.5, "int number"),
        ("retention_ms", None, "delete operation"),
    ],
)
def test_values_are_type_and_range_checked(name, value, reason) -> None:
    error = _invalid(lambda: configs.validate_value(name, value))
    assert reason in error.message and name in error.message


@pytest.mark.parametrize(
    ("name", "value", "parsed"),
    [
        ("retention_ms", " 1000 ", 1000),
        ("retention_ms", -1, -1),
        ("unclean_leader_election_enable", "TRUE", True),
        ("preallocate", False, False),
        ("min_cleanable_dirty_ratio", "0.25", 0.25),
        ("min_cleanable_dirty_ratio", 1, 1.0),
        ("cleanup_policy", "delete, compact", "compact,delete"),
        ("cleanup_policy", ["compact"], "compact"),
        ("compression_type", "zstd", "zstd"),
    ],
)
def test_values_are_parsed_to_their_type(name, value, parsed) -> None:
    assert configs.validate_value(name, value) == parsed
    assert type(configs.validate_value(name, value)) is type(parsed)


def test_cross_config_rule() -> None:
    error = _invalid(lambda: configs.validate_configs({"min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5}))
    assert "must not exceed" in error.message


def test_resolution_order() -> None:
    assert configs.resolve("retention_ms", {"retention_ms": 1}, {"retention_ms": 2}) == (1, ConfigSource.TOPIC)
    assert configs.resolve("retention_ms", {}, {"retention_ms": 2}) == (2, ConfigSource.BROKER)
    assert configs.resolve("retention_ms", None, None) == (604_800_000, ConfigSource.DEFAULT)
    effective = configs.effective({"segment_ms": 5}, {"segment_ms": 6, "retention_ms": 7})
    assert effective["segment_ms"] == 5 and effective["retention_ms"] == 7 and len(effective) == len(TOPIC_CONFIGS)
