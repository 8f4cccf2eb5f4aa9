"""The transaction coordinator shell's pure parts: topic creation, settings from the node config, markers."""

from __future__ import annotations

import pytest

from kraftpy.broker.txn.coordinator import SendMarkers
from kraftpy.broker.txn.shell.coordinator_shell import creation_request
from kraftpy.broker.txn.shell.markers import answer_codes, markers_body
from kraftpy.broker.txn.shell.settings import TxnShellSettings
from kraftpy.metadata.controller import wire
from kraftpy.node.config import build_config
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import TRANSACTION_STATE_TOPIC
from tests.unit.broker.test_groups_shell import cluster

BASE = {"node_id": 1, "controller_quorum_voters": "1@127.0.0.1:9", "data_dir": "/tmp/unused"}


def test_transaction_state_is_created_with_kafkas_defaults_capped_by_the_cluster() -> None:
    topic = creation_request(cluster(3).committed, TxnShellSettings())["topics"][0]
    assert topic["name"] == TRANSACTION_STATE_TOPIC
    assert (topic["num_partitions"], topic["replication_factor"]) == (50, 3)
    assert topic["configs"] == {"cleanup_policy": "compact", "segment_bytes": "104857600", "min_insync_replicas": "2"}
    small = creation_request(cluster(1).committed, TxnShellSettings())["topics"][0]
    assert (small["replication_factor"], small["configs"]["min_insync_replicas"]) == (1, "1")
    h = cluster(3)  # the controller accepts the request as it is
    answer = h.send(wire.decode_request("create_topics", creation_request(h.committed, TxnShellSettings())))
    assert h.committed.topic(TRANSACTION_STATE_TOPIC) is not None, answer


def test_settings_come_from_the_node_config_by_kafkas_names() -> None:
    config = build_config({**BASE, "transaction.max.timeout.ms": 5000, "transaction_state_log_num_partitions": 7})
    settings = TxnShellSettings.from_node_config(config)
    assert settings.coordinator.transaction_max_timeout_ms == 5000
    assert settings.coordinator.transaction_state_log_num_partitions == 7
    assert settings.coordinator.transactional_id_expiration_ms == 604_800_000
    with pytest.raises(KafkaError) as info:
        build_config({**BASE, "transaction_max_timeout_ms": 0})
    assert info.value.code == ErrorCode.INVALID_CONFIG and "transaction_max_timeout_ms" in info.value.message


def test_markers_body_and_answers_follow_the_contract() -> None:
    action = SendMarkers("x", 7, 2, True, 5, (("a", 0), ("a", 1), ("b", 0)))
    body = markers_body(action, [("a", 1), ("b", 0)])
    assert body == {
        "markers": [
            {
                "producer_id": 7,
                "producer_epoch": 2,
                "transaction_result": True,
                "topics": [{"name": "a", "partition_indexes": [1]}, {"name": "b", "partition_indexes": [0]}],
                "coordinator_epoch": 5,
            }
        ]
    }
    answer = {
        "markers": [
            {"producer_id": 7, "topics": [{"name": "a", "partitions": [{"partition_index": 1, "error_code": 0}]}]},
            {"producer_id": 8, "topics": [{"name": "b", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
            "junk",
            {"producer_id": 7, "topics": ["junk", {"name": "b", "partitions": [{"partition_index": "x"}]}]},
        ]
    }
    assert answer_codes(answer, 7) == {("a", 1): ErrorCode.NONE}
