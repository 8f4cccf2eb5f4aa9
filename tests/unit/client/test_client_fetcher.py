"""The fetcher core: one fetch per leader, pipelining, positions, fetch errors, diverging epochs."""

from __future__ import annotations

import pytest

from kraftpy.client.consumer.fetcher import Fetcher
from kraftpy.client.consumer.subscription import FetchPosition, FetchState, OffsetResetStrategy, SubscriptionState
from kraftpy.client.errors import (
    CorruptFetchError,
    LogTruncationError,
    OffsetOutOfRangeError,
    RecordDeserializationError,
)
from kraftpy.client.metadata import LeaderAndEpoch
from kraftpy.client.serde import deserializer_for
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import fresh_metadata, metadata_body
from tests.unit.protocol.test_records_validation import GARBAGE, forge

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
LEADERS = {("t", 0): (1, 5), ("t", 1): (1, 5), ("t", 2): (2, 5)}


def setup(reset: str = "earliest", max_poll_records: int = 500, **kwargs):
    md = fresh_metadata(LEADERS)
    subs = SubscriptionState(OffsetResetStrategy(reset))
    subs.assign_from_user([T0, T1, T2])
    for tp in (T0, T1, T2):
        subs.seek_validated(tp, FetchPosition(0, None, md.current_leader(tp)))
    fetcher = Fetcher(subs, md, max_poll_records=max_poll_records, retry_backoff_ms=100, **kwargs)
    return md, subs, fetcher


def records(base: int, n: int, epoch: int = 5, value: bytes = b"v") -> bytes:
    return build_batch(
        [(None, value + b"%d" % (base + i)) for i in range(n)], base_offset=base, partition_leader_epoch=epoch
    )


def answer(parts: dict[TopicPartition, dict]) -> dict:
    topics: dict[str, list] = {}
    for tp, fields in parts.items():
        entry = {"partition": tp.partition, "error_code": 0, "high_watermark": 100, "log_start_offset": 0}
        entry["records"] = b""
        entry["diverging_epoch"] = None
        entry.update(fields)
        topics.setdefault(tp.topic, []).append(entry)
    return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def request_for(requests, node):
    (req,) = [r for r in requests if r.node_id == node]
    return req


def test_one_fetch_per_leader_for_all_its_partitions() -> None:
    md, subs, fetcher = setup(fetch_min_bytes=10, fetch_max_wait_ms=250, fetch_max_bytes=1000)
    subs.seek_validated(T1, FetchPosition(42, 4, md.current_leader(T1)))
    requests = fetcher.prepare_requests(0)
    assert sorted(r.node_id for r in requests) == [1, 2]
    req = request_for(requests, 1)
    assert req.address == ("b1", 9001)
    assert req.body["replica_id"] == -1
    assert (req.body["max_wait_ms"], req.body["min_bytes"], req.body["max_bytes"]) == (250, 10, 1000)
    parts = {p["partition"]: p for p in req.body["topics"][0]["partitions"]}
    assert sorted(parts) == [0, 1]
    assert parts[1] == {
        "partition": 1,
        "fetch_offset": 42,
        "current_leader_epoch": 5,
        "last_fetched_epoch": 4,
        "log_start_offset": -1,
        "partition_max_bytes": 1_048_576,
    }
    assert fetcher.prepare_requests(1) == [], "no second fetch while one is in flight to each broker"


def test_records_advance_the_position_and_its_epoch() -> None:
    _md, subs, fetcher = setup()
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 3, epoch=5)}, T1: {}}), 1)
    got = fetcher.collect_fetch()
    assert [(r.partition, r.offset, r.leader_epoch) for r in got] == [(0, 0, 5), (0, 1, 5), (0, 2, 5)]
    assert subs.position(T0) == FetchPosition(3, 5, LeaderAndEpoch(1, 5))
    assert subs.state(T0).high_watermark == 100


def test_the_next_fetch_is_pipelined_once_buffered_records_drop_below_max_poll_records() -> None:
    _md, _subs, fetcher = setup(max_poll_records=4)
    requests = fetcher.prepare_requests(0)
    fetcher.handle_response(request_for(requests, 2), answer({}), 1)
    req = request_for(requests, 1)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 6)}, T1: {"records": records(0, 2)}}), 1)
    assert fetcher.buffered_record_count() == 8
    assert [r.node_id for r in fetcher.prepare_requests(2)] == [], "8 buffered >= 4: no prefetch"
    assert len(fetcher.collect_fetch()) == 4
    assert fetcher.buffered_record_count() == 4
    assert fetcher.prepare_requests(3) == []
    assert len(fetcher.collect_fetch()) == 4  # 2 more of t-0, then the 2 of t-1
    nxt = fetcher.prepare_requests(4)
    assert {p["partition"] for r in nxt for t in r.body["topics"] for p in t["partitions"]} == {0, 1, 2}


def test_partitions_with_buffered_records_are_not_fetched_again() -> None:
    _md, _subs, fetcher = setup(max_poll_records=100)
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 3)}}), 1)
    nxt = request_for(fetcher.prepare_requests(2), 1)
    assert [p["partition"] for p in nxt.body["topics"][0]["partitions"]] == [1], "t-0 still has 3 buffered"


def test_answers_for_a_position_the_application_moved_are_discarded() -> None:
    _md, subs, fetcher = setup()
    req = request_for(fetcher.prepare_requests(0), 1)
    subs.seek(T0, 50)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 3)}}), 1)
    assert fetcher.collect_fetch() == []
    assert subs.position(T0).offset == 50


def test_out_of_range_resets_with_a_policy_and_raises_without() -> None:
    _md, subs, fetcher = setup("earliest")
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"error_code": int(ErrorCode.OFFSET_OUT_OF_RANGE)}}), 1)
    assert fetcher.collect_fetch() == []
    assert subs.state(T0).fetch_state is FetchState.AWAIT_RESET
    assert subs.reset_strategy(T0) is OffsetResetStrategy.EARLIEST

    _md, subs, fetcher = setup("none")
    subs.seek(T0, 1_000)
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"error_code": int(ErrorCode.OFFSET_OUT_OF_RANGE)}}), 1)
    with pytest.raises(OffsetOutOfRangeError, match="fetch position 1000 is out of range for partition t-0") as info:
        fetcher.collect_fetch()
    assert info.value.offsets == {T0: 1_000}


@pytest.mark.parametrize(
    "code", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
)
def test_leadership_errors_refresh_metadata_and_keep_the_position(code: ErrorCode) -> None:
    md, subs, fetcher = setup()
    md.update(metadata_body(LEADERS), 0)
    assert not md.update_requested
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"error_code": int(code)}}), 1)
    assert fetcher.collect_fetch() == []
    assert md.update_requested and subs.position(T0).offset == 0 and subs.has_valid_position(T0)


def test_a_failed_fetch_backs_off_that_broker_only() -> None:
    md, _subs, fetcher = setup()
    reqs = fetcher.prepare_requests(0)
    fetcher.handle_failure(request_for(reqs, 1), KafkaError("refused", ErrorCode.NETWORK_EXCEPTION), 10)
    fetcher.handle_response(request_for(reqs, 2), answer({T2: {}}), 10)
    assert fetcher.collect_fetch() == []
    assert md.update_requested
    assert [r.node_id for r in fetcher.prepare_requests(50)] == [2]
    assert sorted(r.node_id for r in fetcher.prepare_requests(111)) == [1]


def test_diverging_epoch_without_policy_raises_log_truncation() -> None:
    md, subs, fetcher = setup("none")
    subs.seek_validated(T0, FetchPosition(30, 5, md.current_leader(T0)))
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"diverging_epoch": {"epoch": 5, "end_offset": 25}}}), 1)
    with pytest.raises(LogTruncationError, match="t-0 at position 30 \\(diverges at offset 25\\)"):
        fetcher.collect_fetch()
    assert subs.state(T0).fetch_state is FetchState.AWAIT_VALIDATION


def test_diverging_epoch_with_policy_resumes_at_the_divergence_point() -> None:
    md, subs, fetcher = setup("latest")
    subs.seek_validated(T0, FetchPosition(30, 5, md.current_leader(T0)))
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"diverging_epoch": {"epoch": 4, "end_offset": 25}}}), 1)
    assert fetcher.collect_fetch() == []
    assert subs.position(T0) == FetchPosition(25, 4, md.current_leader(T0))
    assert subs.has_valid_position(T0)


def test_paused_partitions_keep_their_buffered_records() -> None:
    _md, subs, fetcher = setup()
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 2)}}), 1)
    subs.pause(T0)
    assert fetcher.collect_fetch() == []
    assert T0 not in {
        p["partition"] for r in fetcher.prepare_requests(2) for t in r.body["topics"] for p in t["partitions"]
    }
    subs.resume(T0)
    assert [r.offset for r in fetcher.collect_fetch()] == [0, 1]


def test_a_bad_record_is_reported_with_its_offset_and_skipped_after_a_seek() -> None:
    _md, subs, fetcher = setup(value_deserializer=deserializer_for("json"))
    data = build_batch([(None, b"1"), (None, b"{oops"), (None, b"3")], base_offset=0, partition_leader_epoch=5)
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": data}}), 1)
    assert [r.value for r in fetcher.collect_fetch()] == [1]
    with pytest.raises(RecordDeserializationError) as info:
        fetcher.collect_fetch()
    assert (info.value.topic_partition, info.value.offset) == (T0, 1)
    assert subs.position(T0).offset == 1
    with pytest.raises(RecordDeserializationError):
        fetcher.collect_fetch()
    subs.seek(T0, 2)
    fetcher.clear_buffered({T0})
    req = request_for(fetcher.prepare_requests(2), 1)
    fetcher.handle_response(req, answer({T0: {"records": data}}), 3)
    assert [r.value for r in fetcher.collect_fetch()] == [3]


@pytest.mark.parametrize("codec", list(GARBAGE), ids=lambda c: c.name)
def test_valid_records_before_a_bad_batch_come_first_then_the_error_at_its_offset(codec: CompressionType) -> None:
    # A batch stored before the leader validated records: a valid CRC around compressed garbage.
    _md, subs, fetcher = setup()
    bad = forge(records(3, 2), section=GARBAGE[codec], attributes=codec)
    data = records(0, 3) + bad + records(5, 2)
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": data}}), 1)
    assert [r.offset for r in fetcher.collect_fetch()] == [0, 1, 2]
    assert subs.position(T0).offset == 3
    for _ in range(2):  # raised again on every poll until the application seeks
        with pytest.raises(CorruptFetchError) as info:
            fetcher.collect_fetch()
        assert (info.value.topic_partition, info.value.offset, info.value.next_offset) == (T0, 3, 5)
        assert info.value.code is ErrorCode.CORRUPT_MESSAGE and "seek to 5" in str(info.value)
        assert subs.position(T0).offset == 3
    subs.seek(T0, info.value.next_offset)
    fetcher.clear_buffered({T0})
    req = request_for(fetcher.prepare_requests(2), 1)
    fetcher.handle_response(req, answer({T0: {"records": data}}), 3)
    assert [r.offset for r in fetcher.collect_fetch()] == [5, 6]


def test_a_newer_epoch_in_the_data_than_in_metadata_asks_for_fresh_metadata() -> None:
    md, _subs, fetcher = setup()
    md.update(metadata_body(LEADERS), 0)
    req = request_for(fetcher.prepare_requests(0), 1)
    fetcher.handle_response(req, answer({T0: {"records": records(0, 1, epoch=9)}}), 1)
    fetcher.collect_fetch()
    assert md.update_requested and md.last_seen_epoch(T0) == 9


def test_unassigned_partitions_answers_are_dropped() -> None:
    _md, subs, fetcher = setup()
    req = request_for(fetcher.prepare_requests(0), 1)
    subs.assign_from_user([T1, T2])
    fetcher.handle_response(req, answer({T0: {"records": records(0, 2)}, T1: {"records": records(0, 1)}}), 1)
    assert [(r.partition, r.offset) for r in fetcher.collect_fetch()] == [(1, 0)]


def test_a_position_without_a_known_leader_is_not_fetched_and_asks_for_metadata() -> None:
    md, subs, fetcher = setup()
    md.update(metadata_body({**LEADERS, ("t", 2): (-1, 6)}), 0)
    subs.seek(T2, 0)  # no leader to check the position against yet
    assert [r.node_id for r in fetcher.prepare_requests(1)] == [1]
    assert md.update_requested
    md.update(metadata_body({**LEADERS, ("t", 2): (3, 7)}), 2)
    (req,) = fetcher.prepare_requests(3)  # node 1 still has its fetch in flight
    assert req.node_id == 3 and req.body["topics"][0]["partitions"][0]["current_leader_epoch"] == 7


def test_a_leader_change_moves_the_fetch_to_the_new_leader_or_validates_first() -> None:
    md, subs, fetcher = setup()
    subs.seek_validated(T1, FetchPosition(10, 5, md.current_leader(T1)))
    md.update(metadata_body({**LEADERS, ("t", 0): (3, 6), ("t", 1): (3, 6)}), 1)
    requests = fetcher.prepare_requests(2)
    by_node = {r.node_id: [p["partition"] for t in r.body["topics"] for p in t["partitions"]] for r in requests}
    assert by_node == {3: [0], 2: [2]}, "t-0 (no epoch) follows the leader; t-1 awaits validation"
    assert subs.state(T1).fetch_state is FetchState.AWAIT_VALIDATION
