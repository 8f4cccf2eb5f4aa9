"""Producer failover: a retry goes to a new leader at once, and metadata is polled while a leader is unreachable."""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import metadata_body, producer_core

T0 = TopicPartition("t", 0)


def test_a_retry_skips_its_backoff_once_the_partition_has_a_new_leader() -> None:
    core = producer_core({("t", 0): (1, 5)}, retry_backoff_ms=1_000, retry_backoff_max_ms=1_000)
    core.send(T0, b"v", now_ms=0)
    (request,) = core.sender.poll(0).requests
    core.sender.handle_request_failure(request.request_id, KafkaError("refused", ErrorCode.NETWORK_EXCEPTION), 1)
    assert core.sender.poll(10).requests == []  # same leader: the retry waits out its backoff
    core.metadata.update(metadata_body({("t", 0): (2, 6)}), 20)
    (retry,) = core.sender.poll(20).requests  # new leader epoch: sent at once (KIP-951)
    assert retry.node_id == 2


def test_metadata_keeps_refreshing_while_a_leader_cannot_be_reached() -> None:
    core = producer_core({("t", 0): (1, 5)})
    core.send(T0, b"v", now_ms=0)
    (request,) = core.sender.poll(0).requests
    core.sender.handle_request_failure(request.request_id, KafkaError("refused", ErrorCode.NETWORK_EXCEPTION), 1)
    core.metadata.update(metadata_body({("t", 0): (1, 5)}), 2)  # the controller has not moved it yet
    assert core.metadata.update_requested  # ask again after the refresh backoff
    core.metadata.update(metadata_body({("t", 0): (3, 6)}), 200)
    assert not core.metadata.update_requested  # the leader now is a broker we have not failed to reach
