"""The metadata cache: parsing, refresh triggers and backoff, leader epochs never going back, whom to ask."""

from __future__ import annotations

import random

import pytest

from kraftpy.client.metadata import Metadata, parse_metadata_response
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import metadata_body, produce_answer, producer_core

T0 = TopicPartition("t", 0)


def make(**kwargs) -> Metadata:
    md = Metadata([("boot1", 1), ("boot2", 2)], rng=random.Random(1), **kwargs)
    md.set_topics(["t"])
    return md


def test_parse_builds_brokers_partitions_and_controller() -> None:
    cluster = parse_metadata_response(
        metadata_body({("t", 0): (2, 7), ("t", 1): (-1, 3)}, topic_errors={"missing": 3}, controller_id=3)
    )
    assert cluster.cluster_id == "test-cluster" and cluster.controller().node_id == 3
    assert cluster.leader_for(T0).node_id == 2 and cluster.leader_for(TopicPartition("t", 1)) is None
    assert cluster.available_partitions("t") == [0]
    assert cluster.num_partitions("t") == 2 and cluster.num_partitions("missing") is None
    assert cluster.topic_errors == {"missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert cluster.partition(T0).replicas == (1, 2, 3)


def test_a_malformed_answer_is_a_clear_error() -> None:
    with pytest.raises(KafkaError, match=r"brokers\[0\].port"):
        parse_metadata_response({"brokers": [{"node_id": 1, "host": "h", "port": "x"}], "topics": []})
    with pytest.raises(KafkaError, match=r"answer\.topics"):
        parse_metadata_response({"brokers": []})


def test_nothing_known_means_refresh_now() -> None:
    md = make()
    assert md.update_requested and md.time_to_next_update(0) == 0
    assert md.request_body() == {"topics": ["t"]}
    assert Metadata([("b", 1)], all_topics=True).request_body() == {"topics": None}


def test_after_a_refresh_the_next_one_is_due_at_max_age() -> None:
    md = make(metadata_max_age_ms=300_000)
    md.update(metadata_body({("t", 0): (1, 0)}), now_ms=1_000)
    assert not md.update_requested
    assert md.time_to_next_update(2_000) == 299_000
    assert md.time_to_next_update(301_000) == 0


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NETWORK_EXCEPTION,
    ],
)
def test_produce_errors_request_a_refresh_that_waits_out_the_backoff(code: ErrorCode) -> None:
    core = producer_core({("t", 0): (1, 0)})
    md = core.metadata
    md.update(metadata_body({("t", 0): (1, 0)}), now_ms=1_000)
    assert not md.update_requested
    core.send(T0, b"v", now_ms=1_000)
    (req,) = core.sender.poll(1_000).requests
    if code == ErrorCode.NETWORK_EXCEPTION:
        core.sender.handle_request_failure(req.request_id, KafkaError("connection refused", code), 1_010)
    else:
        core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": int(code)}}), 1_010)
    assert md.update_requested
    assert md.time_to_next_update(1_050) == pytest.approx(50, abs=20), "refreshes are spaced by the backoff"
    assert md.time_to_next_update(1_200) == 0
    version = md.update_version
    md.update(metadata_body({("t", 0): (2, 1)}), now_ms=1_200)
    assert md.update_version > version and not md.update_requested


def test_a_request_timeout_alone_does_not_refresh_metadata() -> None:
    core = producer_core({("t", 0): (1, 0)})
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 7}}), 1)
    assert not core.metadata.update_requested


def test_failed_refreshes_back_off_exponentially() -> None:
    md = make(refresh_backoff_ms=100, refresh_backoff_max_ms=1_000)
    waits = []
    now_ms = 0
    for _ in range(6):
        md.failed_update(now_ms)
        waits.append(md.time_to_next_update(now_ms))
    assert waits[0] == pytest.approx(100, rel=0.21)
    assert waits[3] == pytest.approx(800, rel=0.21)
    assert waits[5] == pytest.approx(1_000, rel=0.21), "capped at refresh_backoff_max_ms"


def test_a_leaderless_partition_keeps_asking() -> None:
    md = make()
    md.update(metadata_body({("t", 0): (-1, 0)}), now_ms=0)
    assert md.update_requested


def test_a_topic_missing_from_the_answer_keeps_asking_after_the_backoff() -> None:
    # A topic created a moment ago is not yet in every broker's metadata: a group leader that assigned
    # without it must see it soon, or the group sits on an empty assignment until metadata_max_age_ms.
    md = make()
    md.add_topic("u")
    md.update(metadata_body({("t", 0): (1, 0)}), now_ms=0)
    assert md.update_requested and md.time_to_next_update(0) == pytest.approx(100)
    md.update(metadata_body({("t", 0): (1, 0), ("u", 0): (1, 0)}), now_ms=100)
    assert not md.update_requested


def test_all_topics_mode_does_not_wait_for_topics_that_do_not_exist() -> None:
    md = make(all_topics=True)
    md.update(metadata_body({("other", 0): (1, 0)}), now_ms=0)
    assert not md.update_requested


def test_leader_epochs_never_go_back() -> None:
    md = make()
    md.update(metadata_body({("t", 0): (2, 5)}), now_ms=0)
    # A lagging broker still believes in an older leader.
    md.update(metadata_body({("t", 0): (1, 4)}), now_ms=10)
    assert md.current_leader(T0).leader == 2 and md.current_leader(T0).epoch == 5
    md.update(metadata_body({("t", 0): (3, 6)}), now_ms=20)
    assert (md.current_leader(T0).leader, md.current_leader(T0).epoch) == (3, 6)


def test_an_epoch_seen_in_data_newer_than_metadata_requests_a_refresh() -> None:
    md = make()
    md.update(metadata_body({("t", 0): (2, 5)}), now_ms=0)
    assert not md.update_last_seen_epoch_if_newer(T0, 5)
    assert not md.update_requested
    assert md.update_last_seen_epoch_if_newer(T0, 6)
    assert md.update_requested
    # An answer still at epoch 5 is older than what we saw; its leader is not trusted.
    md.update(metadata_body({("t", 0): (1, 5)}), now_ms=100)
    assert md.current_leader(T0).leader == 2


def test_candidates_start_with_known_brokers_then_bootstrap_and_skip_recent_failures() -> None:
    md = make()
    assert md.candidates(0) == [("boot1", 1), ("boot2", 2)]
    md.node_failed(("boot1", 1), now_ms=5)
    assert md.candidates(6) == [("boot2", 2), ("boot1", 1)], "any reachable server of the list will do"
    md.update(metadata_body({("t", 0): (1, 0)}), now_ms=10)
    assert md.candidates(11)[:3] == [("b1", 9001), ("b2", 9002), ("b3", 9003)]
    md.node_failed(("b1", 9001), 12)
    assert md.candidates(13)[-1] == ("b1", 9001)
    md.node_succeeded(("b1", 9001))
    assert md.candidates(14)[0] == ("b1", 9001)


def test_topics_not_asked_for_are_dropped_and_expired_topics_forgotten() -> None:
    md = make()
    md.add_topic("u", expires_at_ms=500)
    md.update(metadata_body({("t", 0): (1, 0), ("u", 0): (1, 0), ("other", 0): (1, 0)}), now_ms=0)
    assert md.cluster.topics == {"t", "u"}
    assert md.expire_topics(500) == ["u"] and md.topics == ["t"]


def test_a_new_topic_triggers_a_refresh() -> None:
    md = make()
    md.update(metadata_body({("t", 0): (1, 0)}), now_ms=0)
    md.add_topic("fresh")
    assert md.update_requested
