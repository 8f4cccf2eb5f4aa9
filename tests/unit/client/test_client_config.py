"""Client configuration: Kafka's defaults, clear errors naming the key, Kafka's cross-key rules."""

from __future__ import annotations

import pytest

from kraftpy.client.config import (
    admin_config,
    consumer_config,
    parse_bootstrap_servers,
    producer_config,
)
from kraftpy.client.errors import ConfigError
from kraftpy.protocol.records.compression import CompressionType


def test_producer_defaults_are_kafkas() -> None:
    cfg = producer_config({})
    expected = {
        "acks": -1,
        "batch_size": 16_384,
        "linger_ms": 5,
        "buffer_memory": 33_554_432,
        "max_block_ms": 60_000,
        "retries": 2_147_483_647,
        "retry_backoff_ms": 100,
        "retry_backoff_max_ms": 1_000,
        "delivery_timeout_ms": 120_000,
        "request_timeout_ms": 30_000,
        "max_in_flight_requests_per_connection": 5,
        "enable_idempotence": True,
        "compression_type": CompressionType.NONE,
        "max_request_size": 1_048_576,
        "metadata_max_age_ms": 300_000,
    }
    assert {k: cfg.values[k] for k in expected} == expected


def test_consumer_defaults_are_kafkas() -> None:
    cfg = consumer_config({})
    expected = {
        "fetch_min_bytes": 1,
        "fetch_max_wait_ms": 500,
        "fetch_max_bytes": 52_428_800,
        "max_partition_fetch_bytes": 1_048_576,
        "max_poll_records": 500,
        "auto_offset_reset": "latest",
        "check_crcs": True,
        "request_timeout_ms": 30_000,
        "metadata_max_age_ms": 300_000,
    }
    assert {k: cfg[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("given", "key", "fragment"),
    [
        ({"linger_ms": -1}, "linger_ms", "between 0 and 2147483647, got -1"),
        ({"batch_size": "big"}, "batch_size", "must be an integer"),
        ({"acks": 2}, "acks", '"all" (-1), 0 or 1'),
        ({"compression_type": "brotli"}, "compression_type", "none, gzip, snappy, lz4, zstd"),
        ({"enable_idempotence": "yes"}, "enable_idempotence", "true or false"),
        ({"lingerms": 5}, "lingerms", "did you mean 'linger_ms'"),
        ({"max_in_flight_requests_per_connection": 0}, "max_in_flight_requests_per_connection", "between 1"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms", "linger_ms + request_timeout_ms"),
        ({"partitioner": 3}, "partitioner", "callable"),
    ],
)
def test_bad_producer_values_name_the_key(given, key, fragment) -> None:
    with pytest.raises(ConfigError) as info:
        producer_config(given)
    assert info.value.key == key and key in str(info.value) and fragment in str(info.value)


def test_idempotence_yields_to_contradicting_settings_unless_set_explicitly() -> None:
    assert producer_config({"acks": 1}).enable_idempotence is False
    assert producer_config({"acks": "all"}).enable_idempotence is True
    with pytest.raises(ConfigError, match='acks: must be "all" with idempotence'):
        producer_config({"acks": 0, "enable_idempotence": True})
    with pytest.raises(ConfigError, match="max_in_flight_requests_per_connection"):
        producer_config({"max_in_flight_requests_per_connection": 6, "enable_idempotence": True})


def test_acks_spellings() -> None:
    assert [producer_config({"acks": a}).acks for a in ("all", "-1", -1, "1", 0)] == [-1, -1, -1, 1, 0]


def test_bad_consumer_and_admin_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match="auto_offset_reset: must be one of latest, earliest, none"):
        consumer_config({"auto_offset_reset": "smallest"})
    with pytest.raises(ConfigError, match="max_poll_records"):
        consumer_config({"max_poll_records": 0})
    with pytest.raises(ConfigError, match="heartbeat_interval_ms: must be lower than session_timeout_ms"):
        consumer_config({"group_id": "g", "session_timeout_ms": 6000, "heartbeat_interval_ms": 6000})
    with pytest.raises(ConfigError, match="enable_auto_commit: needs a group_id"):
        consumer_config({"enable_auto_commit": True})
    with pytest.raises(ConfigError, match="partition_assignment_strategy: unknown partition assignor 'rr'"):
        consumer_config({"group_id": "g", "partition_assignment_strategy": ["rr"]})
    assert consumer_config({})["enable_auto_commit"] is False  # Kafka: no group, no auto-commit
    with pytest.raises(ConfigError, match="is not an admin client config"):
        admin_config({"linger_ms": 1})


def test_bootstrap_servers_forms() -> None:
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["a:1", ("b", 2)]) == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "a", "a:0", "a:x", 5):
        with pytest.raises(ConfigError, match="bootstrap_servers"):
            parse_bootstrap_servers(bad)


def _doc_table(section: str) -> dict[str, str]:
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "client.md").read_text()
    body = text.split(f"### {section}\n", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|") for line in body.splitlines() if line.startswith("| `")]
    return {cells[1].strip().strip("`"): cells[2].strip() for cells in rows}


@pytest.mark.parametrize(
    ("section", "options"),
    [("Producer", "PRODUCER_OPTIONS"), ("Consumer", "CONSUMER_OPTIONS"), ("AdminClient", "ADMIN_OPTIONS")],
)
def test_docs_config_tables_list_every_key_with_its_default(section: str, options: str) -> None:
    import kraftpy.client.config as config

    table = _doc_table(section)
    opts = getattr(config, options)
    assert set(table) == set(opts), f"docs/client.md {section} table is out of date"
    for key, option in opts.items():
        default = option.default
        if isinstance(default, bool) or default is None or default == ():
            expected = repr(default)
        elif isinstance(default, CompressionType):
            expected = f'"{default.name.lower()}"'
        elif isinstance(default, int) and key != "acks":
            expected = str(default)
        else:
            continue  # enums and spelled-out values ("all" (-1), "none") are checked by the defaults tests
        assert table[key].split()[0].strip("`") == expected, f"{section}.{key}: docs say {table[key]}"
