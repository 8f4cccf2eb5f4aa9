"""The sender core: acknowledgements, retries, error classification, delivery timeout, idempotent ordering."""

from __future__ import annotations

import pytest

from kraftpy.client.errors import (
    KafkaTimeoutError,
    ProducerFencedError,
    invalidates_metadata,
    is_fatal_for_producer,
    is_retriable,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import metadata_body, produce_answer, producer_core

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {("t", 0): (1, 0), ("t", 1): (2, 0)}
E = ErrorCode


def header(request, tp=T0):
    return decode_batch(request.batches[tp].records).header


@pytest.mark.parametrize(
    ("code", "retriable", "refresh", "fatal"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, True, True, False),
        (E.UNKNOWN_TOPIC_OR_PARTITION, True, True, False),
        (E.LEADER_NOT_AVAILABLE, True, True, False),
        (E.FENCED_LEADER_EPOCH, True, True, False),
        (E.UNKNOWN_LEADER_EPOCH, True, True, False),
        (E.NETWORK_EXCEPTION, True, True, False),
        (E.REQUEST_TIMED_OUT, True, False, False),
        (E.NOT_ENOUGH_REPLICAS, True, False, False),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True, False, False),
        (E.CORRUPT_MESSAGE, True, False, False),
        (E.THROTTLING_QUOTA_EXCEEDED, True, False, False),
        (E.MESSAGE_TOO_LARGE, False, False, False),
        (E.INVALID_RECORD, False, False, False),
        (E.TOPIC_AUTHORIZATION_FAILED, False, False, False),
        (E.INVALID_REQUIRED_ACKS, False, False, False),
        (E.OUT_OF_ORDER_SEQUENCE_NUMBER, False, False, False),
        (E.PRODUCER_FENCED, False, False, True),
        (E.CLUSTER_AUTHORIZATION_FAILED, False, False, True),
    ],
)
def test_error_classification_follows_kafka(code, retriable, refresh, fatal) -> None:
    assert (is_retriable(code), invalidates_metadata(code), is_fatal_for_producer(code)) == (retriable, refresh, fatal)


def test_acknowledged_records_get_their_offsets_and_timestamps() -> None:
    core = producer_core(LEADERS)
    for i in range(3):
        core.send(T0, b"v%d" % i, now_ms=0, key=b"k")
    (req,) = core.sender.poll(0).requests
    assert req.body["acks"] == -1 and req.node_id == 1 and req.address == ("b1", 9001)
    assert [t["name"] for t in req.body["topics"]] == ["t"]
    core.sender.handle_response(req.request_id, produce_answer({T0: {"base_offset": 40}}), 5)
    assert core.delivery.offsets == [40, 41, 42]
    md = core.delivery.results[0][0]
    assert (md.topic, md.partition, md.timestamp, md.serialized_key_size, md.serialized_value_size) == (
        "t",
        0,
        1_000,
        1,
        2,
    )
    assert core.pool.used == 0 and not core.sender.has_pending_work()


def test_log_append_time_replaces_the_create_time() -> None:
    core = producer_core(LEADERS)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.handle_response(req.request_id, produce_answer({T0: {"base_offset": 0, "log_append_time_ms": 77}}), 1)
    assert core.delivery.results[0][0].timestamp == 77


def test_acks_zero_completes_once_written_with_unknown_offset() -> None:
    core = producer_core(LEADERS, idempotent=False, acks=0)
    core.send(T0, b"v", now_ms=0)
    out = core.sender.poll(0)
    assert out.requests[0].body["acks"] == 0 and not out.requests[0].expects_response
    # Issue 11 §3: done at drain time, close() found nothing pending and exited before the write.
    assert core.delivery.results == [] and core.sender.has_pending_work(), "pending until written"
    core.sender.handle_sent(out.requests[0].request_id, 1)
    assert core.delivery.offsets == [-1] and core.sender.in_flight_count() == 0
    assert not core.sender.has_pending_work()
    assert header(out.requests[0]).producer_id == -1, "no idempotence without acks=all"


def test_retriable_error_requeues_the_same_bytes_and_refreshes_metadata() -> None:
    core = producer_core(LEADERS, retry_backoff_ms=100, retry_backoff_max_ms=100)
    core.send(T0, b"v", now_ms=0)
    (first,) = core.sender.poll(0).requests
    sent_bytes = first.batches[T0].records
    core.metadata.update(metadata_body(LEADERS), 0)
    assert not core.metadata.update_requested
    core.sender.handle_response(first.request_id, produce_answer({T0: {"error_code": 6}}), 10)
    assert core.metadata.update_requested, "NOT_LEADER_OR_FOLLOWER makes the client refresh metadata"
    assert core.delivery.results == []
    assert core.sender.poll(20).requests == [], "the retry waits out retry_backoff_ms"
    (second,) = core.sender.poll(200).requests
    assert second.batches[T0].records == sent_bytes, "a retry resends the same batch, same sequence"
    core.sender.handle_response(second.request_id, produce_answer({T0: {"base_offset": 9}}), 210)
    assert core.delivery.offsets == [9]


def test_non_retriable_error_fails_the_records_with_that_error() -> None:
    core = producer_core(LEADERS)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 87, "message": "bad"}}), 1)
    (err,) = core.delivery.errors
    assert isinstance(err, KafkaError) and err.code == E.INVALID_RECORD and "bad" in str(err)
    assert core.pool.used == 0


def test_retries_exhausted_fail_with_the_last_error() -> None:
    core = producer_core(LEADERS, idempotent=False, retries=2, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"v", now_ms=0)
    for now_ms in (0, 1, 2):
        (req,) = core.sender.poll(now_ms).requests
        core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 19}}), now_ms)
    (err,) = core.delivery.errors
    assert err.code == E.NOT_ENOUGH_REPLICAS


def test_queued_batch_expires_at_delivery_timeout_with_a_clear_error() -> None:
    core = producer_core({("t", 0): (-1, 0)}, delivery_timeout_ms=1000)
    core.send(T0, b"v", now_ms=0)
    out = core.sender.poll(500)
    assert out.requests == [] and out.poll_timeout_ms == 500
    core.sender.poll(1000)
    (err,) = core.delivery.errors
    assert isinstance(err, KafkaTimeoutError)
    assert "Expiring 1 record(s) for t-0: 1000 ms has passed since batch creation" in str(err)


def test_in_flight_batch_expires_and_its_late_answer_only_settles_the_sequence() -> None:
    core = producer_core(LEADERS, delivery_timeout_ms=1000)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.poll(1000)
    (err,) = core.delivery.errors
    assert isinstance(err, KafkaTimeoutError)
    assert core.idempotence.has_unresolved_sequence(T0)
    core.send(T0, b"w", now_ms=1000)
    assert core.sender.poll(1001).requests == [], "no new batch while an earlier one's fate is unknown"
    # The broker did write it: the sequence resolves and the next batch continues at sequence 1.
    core.sender.handle_response(req.request_id, produce_answer({T0: {"base_offset": 0}}), 1002)
    assert len(core.delivery.results) == 1, "an expired record is reported once"
    (nxt,) = core.sender.poll(1003).requests
    assert header(nxt).base_sequence == 1 and header(nxt).producer_epoch == 0


def test_unresolved_sequence_that_never_landed_bumps_the_epoch() -> None:
    core = producer_core(LEADERS, delivery_timeout_ms=1000)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.poll(1000)  # expires on the wire
    core.sender.handle_request_failure(req.request_id, KafkaError("gone", E.NETWORK_EXCEPTION), 1001)
    core.send(T0, b"w", now_ms=1001)
    (nxt,) = core.sender.poll(1002).requests
    h = header(nxt)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (1000, 1, 0)


def test_a_duplicate_is_acknowledged_with_the_original_offset() -> None:
    core = producer_core(LEADERS, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    # The broker wrote it but the answer was lost; the retry is recognised as a duplicate.
    core.sender.handle_request_failure(req.request_id, KafkaError("timeout", E.REQUEST_TIMED_OUT), 1)
    (again,) = core.sender.poll(2).requests
    assert header(again).base_sequence == header(req).base_sequence
    core.sender.handle_response(again.request_id, produce_answer({T0: {"base_offset": 17}}), 3)
    assert core.delivery.offsets == [17]


def test_duplicate_sequence_without_offset_succeeds_with_offset_minus_one() -> None:
    core = producer_core(LEADERS)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 46}}), 1)
    assert core.delivery.results[0][1] is None and core.delivery.offsets == [-1]


def test_in_flight_requests_per_broker_are_capped() -> None:
    core = producer_core(LEADERS, idempotent=False, max_in_flight=2, batch_size=100)
    sent = []
    for i in range(3):
        core.send(T0, b"x" * 60, now_ms=0)
        sent += core.sender.poll(i).requests
    assert len(sent) == 2 and core.sender.in_flight_count(1) == 2
    core.sender.handle_response(sent[0].request_id, produce_answer({T0: {"base_offset": 0}}), 5)
    assert len(core.sender.poll(6).requests) == 1


def test_idempotent_partition_has_at_most_five_batches_in_flight() -> None:
    core = producer_core(LEADERS, max_in_flight=5, batch_size=100)
    core.sender.max_in_flight = 100  # take the per-broker cap out of the picture
    for _ in range(7):
        core.send(T0, b"x" * 60, now_ms=0)
    sent = [r for now_ms in range(7) for r in core.sender.poll(now_ms).requests]
    assert len(sent) == 5 and len(core.idempotence.in_flight(T0)) == 5
    assert [header(r).base_sequence for r in sent] == [0, 1, 2, 3, 4]


def test_max_in_flight_one_without_idempotence_mutes_the_partition() -> None:
    core = producer_core(LEADERS, idempotent=False, max_in_flight=1, batch_size=100)
    core.send(T0, b"x" * 60, now_ms=0)
    core.send(T0, b"x" * 60, now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.max_in_flight = 5  # even with room on the connection, the partition waits
    assert core.sender.poll(1).requests == []
    core.sender.handle_response(req.request_id, produce_answer({T0: {"base_offset": 0}}), 2)
    assert len(core.sender.poll(3).requests) == 1


def test_retry_after_a_failed_earlier_batch_keeps_partition_order() -> None:
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=0, retry_backoff_max_ms=0)
    for _ in range(3):
        core.send(T0, b"x" * 60, now_ms=0)
    r0, r1, r2 = (core.sender.poll(n).requests[0] for n in range(3))
    # Batch 0 hit a leader change; 1 and 2 then arrived out of order at the broker.
    core.sender.handle_response(r1.request_id, produce_answer({T0: {"error_code": 45}}), 4)
    core.sender.handle_response(r0.request_id, produce_answer({T0: {"error_code": 6}}), 5)
    core.sender.handle_response(r2.request_id, produce_answer({T0: {"error_code": 45}}), 6)
    assert not core.idempotence.epoch_bump_required, "not the next expected batch: just retry"
    (again0,) = core.sender.poll(7).requests
    assert header(again0).base_sequence == 0
    assert core.sender.poll(8).requests == [], "later retries wait until the first one settles"
    core.sender.handle_response(again0.request_id, produce_answer({T0: {"base_offset": 100}}), 9)
    (again1,) = core.sender.poll(10).requests
    assert header(again1).base_sequence == 1
    core.sender.handle_response(again1.request_id, produce_answer({T0: {"base_offset": 101}}), 11)
    (again2,) = core.sender.poll(12).requests
    core.sender.handle_response(again2.request_id, produce_answer({T0: {"base_offset": 102}}), 13)
    assert core.delivery.offsets == [100, 101, 102]


def test_out_of_order_on_the_next_expected_batch_bumps_the_epoch_and_renumbers() -> None:
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=0, retry_backoff_max_ms=0)
    for _ in range(3):
        core.send(T0, b"x" * 60, now_ms=0)
    (r0,) = core.sender.poll(0).requests
    core.sender.handle_response(r0.request_id, produce_answer({T0: {"base_offset": 0}}), 1)
    r1, r2 = (core.sender.poll(n).requests[0] for n in (2, 3))
    # Batch 1 went out with everything before it acknowledged, is the next one expected and is
    # still out of order: the broker lost our state, a real gap.
    core.sender.handle_response(r1.request_id, produce_answer({T0: {"error_code": 45}}), 5)
    assert core.idempotence.epoch_bump_required
    core.sender.handle_response(r2.request_id, produce_answer({T0: {"error_code": 45}}), 6)
    (again1,) = core.sender.poll(7).requests
    h = header(again1)
    assert (h.producer_epoch, h.base_sequence) == (1, 0)
    core.sender.handle_response(again1.request_id, produce_answer({T0: {"base_offset": 1}}), 8)
    (again2,) = core.sender.poll(9).requests
    assert (header(again2).producer_epoch, header(again2).base_sequence) == (1, 1)


def test_unknown_producer_id_bumps_the_epoch_and_retries() -> None:
    core = producer_core(LEADERS, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 59, "log_start_offset": 5}}), 1)
    (again,) = core.sender.poll(2).requests
    assert (header(again).producer_epoch, header(again).base_sequence) == (1, 0)
    assert core.delivery.results == []


def test_producer_fenced_is_fatal_for_every_pending_record() -> None:
    core = producer_core(LEADERS)
    core.send(T0, b"v", now_ms=0)
    (req,) = core.sender.poll(0).requests
    core.send(T1, b"w", now_ms=0)  # still queued
    core.sender.handle_response(req.request_id, produce_answer({T0: {"error_code": 90}}), 1)
    core.sender.poll(2)
    assert len(core.delivery.errors) == 2
    assert all(isinstance(e, ProducerFencedError) for e in core.delivery.errors)
    assert isinstance(core.sender.fatal_error, ProducerFencedError)


def test_no_batch_leaves_before_the_producer_id_is_known() -> None:
    core = producer_core(LEADERS, with_producer_id=False)
    core.send(T0, b"v", now_ms=0)
    out = core.sender.poll(0)
    assert out.requests == [] and out.init_producer_id == {
        "transactional_id": None,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    assert core.sender.poll(1).init_producer_id is None, "one request at a time"
    core.sender.handle_producer_id_failure(KafkaError("later", E.COORDINATOR_NOT_AVAILABLE), 2)
    assert core.sender.poll(3).init_producer_id is None, "retried after a backoff"
    assert core.sender.poll(2 + 200).init_producer_id is not None
    core.sender.handle_producer_id({"producer_id": 55, "producer_epoch": 3})
    (req,) = core.sender.poll(203).requests
    assert (header(req).producer_id, header(req).producer_epoch) == (55, 3)


def test_network_failure_retries_and_asks_for_fresh_metadata() -> None:
    core = producer_core(LEADERS, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"v", now_ms=0)
    core.send(T1, b"w", now_ms=0)
    reqs = core.sender.poll(0).requests
    assert {r.node_id for r in reqs} == {1, 2}, "one produce request per leader"
    req = next(r for r in reqs if r.node_id == 1)
    core.sender.handle_request_failure(req.request_id, KafkaError("refused", E.NETWORK_EXCEPTION), 1)
    assert core.metadata.update_requested
    (again,) = core.sender.poll(2).requests
    assert again.node_id == 1


def test_a_whole_request_error_applies_to_every_batch() -> None:
    core = producer_core({("t", 0): (1, 0), ("t", 1): (1, 0)})
    core.send(T0, b"v", now_ms=0)
    core.send(T1, b"w", now_ms=0)
    (req,) = core.sender.poll(0).requests
    assert set(req.batches) == {T0, T1}
    core.sender.handle_response(req.request_id, {"error_code": 42, "message": "bad body"}, 1)
    assert [e.code for e in core.delivery.errors] == [E.INVALID_REQUEST, E.INVALID_REQUEST]


def test_poll_timeout_is_the_linger_left_when_nothing_is_ready() -> None:
    core = producer_core(LEADERS, linger_ms=30)
    core.send(T0, b"v", now_ms=0)
    assert core.sender.poll(10).poll_timeout_ms == 20


def test_out_of_order_caused_by_requests_overtaking_each_other_is_retried_without_a_bump() -> None:
    # Found by the interleaving property: HTTP requests can overtake each other, unlike
    # Kafka's single ordered connection, so "next expected and out of order" is no proof of a gap.
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=0, retry_backoff_max_ms=0)
    for _ in range(3):
        core.send(T0, b"x" * 60, now_ms=0)
    r0, r1, r2 = (core.sender.poll(n).requests[0] for n in range(3))
    # r2 reached the broker before r1 (refused), then r1 and r0 landed and were acknowledged.
    core.sender.handle_response(r0.request_id, produce_answer({T0: {"base_offset": 0}}), 4)
    core.sender.handle_response(r1.request_id, produce_answer({T0: {"base_offset": 1}}), 5)
    core.sender.handle_response(r2.request_id, produce_answer({T0: {"error_code": 45}}), 6)
    assert not core.idempotence.epoch_bump_required
    (again,) = core.sender.poll(7).requests
    assert (header(again).producer_epoch, header(again).base_sequence) == (0, 2)


def test_a_retry_refused_as_out_of_order_after_later_acks_counts_as_written() -> None:
    # Found by the interleaving property: batch 0's answer was lost; while it waited to be
    # retried, later batches were acknowledged and the broker's 5-batch memory moved past it.
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=0, retry_backoff_max_ms=0)
    for _ in range(2):
        core.send(T0, b"x" * 60, now_ms=0)
    r0, r1 = (core.sender.poll(n).requests[0] for n in range(2))
    core.sender.handle_request_failure(r0.request_id, KafkaError("no answer", E.REQUEST_TIMED_OUT), 2)
    core.sender.handle_response(r1.request_id, produce_answer({T0: {"base_offset": 1}}), 3)
    (again,) = core.sender.poll(4).requests
    core.sender.handle_response(again.request_id, produce_answer({T0: {"error_code": 45}}), 5)
    assert [err for _, err in core.delivery.results] == [None, None]
    assert sorted(md.offset for md, _ in core.delivery.results) == [-1, 1]
    assert not core.idempotence.epoch_bump_required and not core.sender.has_pending_work()


def test_a_batch_that_may_be_written_never_causes_renumbering_of_the_ones_after_it() -> None:
    # Found by the interleaving property: both answers were lost (both written); the first
    # batch then hit its delivery timeout. Renumbering the second under a new epoch (Kafka's
    # "retries left" rule) would write it twice.
    core = producer_core(LEADERS, batch_size=100, delivery_timeout_ms=1000, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"x" * 60, now_ms=0)
    (r0,) = core.sender.poll(0).requests
    core.send(T0, b"y" * 60, now_ms=500)
    (r1,) = core.sender.poll(500).requests
    lost = KafkaError("no answer", E.REQUEST_TIMED_OUT)
    core.sender.handle_request_failure(r0.request_id, lost, 1000)  # first batch: out of time
    core.sender.handle_request_failure(r1.request_id, lost, 1000)  # second: retried
    assert isinstance(core.delivery.errors[0], KafkaTimeoutError)
    assert not core.idempotence.epoch_bump_required and core.idempotence.has_unresolved_sequence(T0)
    (again,) = core.sender.poll(1001).requests
    assert (header(again).producer_epoch, header(again).base_sequence) == (0, 1), "same epoch, same sequence"
    core.sender.handle_response(again.request_id, produce_answer({T0: {"base_offset": 1}}), 1002)
    core.sender.poll(1003)
    assert not core.idempotence.has_unresolved_sequence(T0), "the ack of sequence 1 proves sequence 0 landed"


def test_a_refused_batch_bumps_the_epoch_so_later_ones_can_land() -> None:
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=0, retry_backoff_max_ms=0)
    core.send(T0, b"x" * 60, now_ms=0)
    core.send(T0, b"y" * 60, now_ms=0)
    r0, r1 = (core.sender.poll(n).requests[0] for n in range(2))
    core.sender.handle_response(r0.request_id, produce_answer({T0: {"error_code": int(E.INVALID_RECORD)}}), 2)
    assert core.idempotence.epoch_bump_required
    core.sender.handle_response(r1.request_id, produce_answer({T0: {"error_code": 45}}), 3)
    (again,) = core.sender.poll(4).requests
    assert (header(again).producer_epoch, header(again).base_sequence) == (1, 0)
