"""read_committed: Kafka's aborted-transaction filter over fetched batches (client/consumer/aborted_transactions.py).

The batches are real v2 batches and markers (protocol's builders), read by CompletedFetch with the
aborted list a read_committed Fetch answer carries.
"""

from __future__ import annotations

from kraftpy.client.consumer.aborted_transactions import AbortedTransactionFilter
from kraftpy.client.consumer.completed_fetch import CompletedFetch
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.control import TxnMarker, build_marker_batch
from kraftpy.protocol.records.header import patch_offset_and_epoch
from kraftpy.protocol.types import TopicPartition

TP = TopicPartition("t", 0)


def txn(base: int, pid: int, values: list[bytes], **kwargs) -> bytes:
    return build_batch(
        [(None, v, (), 1_000) for v in values],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=base,
        is_transactional=True,
        **kwargs,
    )


def plain(base: int, values: list[bytes]) -> bytes:
    return build_batch([(None, v, (), 1_000) for v in values], base_offset=base)


def marker(offset: int, pid: int, committed: bool) -> bytes:
    buf = bytearray(build_marker_batch(pid, 0, TxnMarker(committed, 0), timestamp_ms=1_000))
    patch_offset_and_epoch(buf, 0, offset, 0)
    return bytes(buf)


def read(data: bytes, aborted: list[tuple[int, int]] | None, fetch_offset: int = 0) -> tuple[list[bytes], int]:
    flt = None if aborted is None else AbortedTransactionFilter(aborted)
    cf = CompletedFetch(TP, fetch_offset, data, aborted_transactions=flt)
    out = []
    while not cf.consumed:
        records = cf.fetch_records(3)
        if not records and not cf.consumed:
            break
        out.extend(r.value for r in records)
    return out, cf.next_fetch_offset


# Two producers interleaved: 7 aborts (offsets 0-1, marker 5), 8 commits (2-3, marker 6), then 7 starts a
# new transaction that commits (7-8, marker 9), and a non-transactional batch (10).
LOG = (
    txn(0, 7, [b"a0", b"a1"])
    + txn(2, 8, [b"c0", b"c1"])
    + txn(4, 7, [b"a2"])
    + marker(5, 7, committed=False)
    + marker(6, 8, committed=True)
    + txn(7, 7, [b"n0", b"n1"])
    + marker(9, 7, committed=True)
    + plain(10, [b"p"])
)


def test_an_aborted_transactions_records_are_dropped_and_a_later_one_of_the_same_producer_kept() -> None:
    values, next_offset = read(LOG, aborted=[(7, 0)])
    assert values == [b"c0", b"c1", b"n0", b"n1", b"p"]
    assert next_offset == 11  # past the markers and the dropped batches


def test_read_uncommitted_returns_every_data_record_but_never_a_marker() -> None:
    values, next_offset = read(LOG, aborted=None)
    assert values == [b"a0", b"a1", b"c0", b"c1", b"a2", b"n0", b"n1", b"p"]
    assert next_offset == 11


def test_the_aborted_list_may_come_in_any_order_and_ranges_start_at_their_first_offset() -> None:
    # Producer 8's transaction 20-21 is aborted too; 8's earlier batch (2-3) is before that range.
    data = LOG + txn(20, 8, [b"x0", b"x1"]) + marker(22, 8, committed=False) + txn(23, 8, [b"y"])
    values, _ = read(data, aborted=[(8, 20), (7, 0)])
    assert values == [b"c0", b"c1", b"n0", b"n1", b"p", b"y"]


def test_an_abort_marker_below_the_fetch_offset_still_ends_its_range() -> None:
    # A fetch from offset 6 still gets the whole log here (as the broker returns whole batches from an
    # earlier position); the ABORT marker at 5 lies wholly below the fetch offset, and must still end
    # producer 7's aborted range, or its committed transaction at 7-8 would be dropped.
    values, next_offset = read(LOG, aborted=[(7, 0)], fetch_offset=6)
    assert values == [b"n0", b"n1", b"p"]
    assert next_offset == 11


def test_compressed_aborted_batches_are_dropped_whole() -> None:
    data = txn(0, 5, [b"z0", b"z1", b"z2"], compression=CompressionType.GZIP) + marker(3, 5, committed=False)
    assert read(data, aborted=[(5, 0)]) == ([], 4)


# The fetcher and the other requests of a read_committed consumer ------------------------------------


def test_a_read_committed_fetcher_asks_for_isolation_level_1_and_filters_with_the_answers_list() -> None:
    from kraftpy.client.consumer.fetcher import READ_COMMITTED, Fetcher
    from kraftpy.client.consumer.subscription import FetchPosition, OffsetResetStrategy, SubscriptionState
    from tests.unit.client.test_client_fixtures import fresh_metadata

    md = fresh_metadata({("t", 0): (1, 5)})
    subs = SubscriptionState(OffsetResetStrategy("earliest"))
    subs.assign_from_user([TP])
    subs.seek_validated(TP, FetchPosition(0, None, md.current_leader(TP)))
    fetcher = Fetcher(subs, md, isolation_level=READ_COMMITTED)
    (request,) = fetcher.prepare_requests(0)
    assert request.body["isolation_level"] == 1
    part = {"partition": 0, "error_code": 0, "high_watermark": 11, "log_start_offset": 0, "records": LOG}
    part["aborted_transactions"] = [{"producer_id": 7, "first_offset": 0}]
    fetcher.handle_response(request, {"error_code": 0, "topics": [{"name": "t", "partitions": [part]}]}, 0)
    assert [r.value for r in fetcher.collect_fetch()] == [b"c0", b"c1", b"n0", b"n1", b"p"]
    assert subs.position(TP).offset == 11


def test_read_committed_lists_offsets_at_the_lso_and_fetches_committed_offsets_stable() -> None:
    from kraftpy.client.config import consumer_config
    from kraftpy.client.consumer.offset_fetcher import build_list_offsets_requests
    from kraftpy.client.group.commits import fetch_body
    from kraftpy.client.shell.group_member import membership_config
    from tests.unit.client.test_client_fixtures import fresh_metadata

    md = fresh_metadata({("t", 0): (1, 5)})
    (request,), _ = build_list_offsets_requests(md, {TP: -1}, isolation_level=1)
    assert request.body["isolation_level"] == 1
    cfg = consumer_config({"group_id": "g", "isolation_level": "read_committed"})
    assert membership_config(cfg).require_stable
    assert fetch_body("g", (TP,), require_stable=True)["require_stable"] is True
    assert not membership_config(consumer_config({"group_id": "g"})).require_stable
