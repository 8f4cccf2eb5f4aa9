"""TxnOffsetCommit in the group coordinator: offsets held per producer until the transaction's marker."""

from __future__ import annotations

from typing import Any

from kraftpy.broker.groups import Append
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import Harness

E = ErrorCode
PID, EPOCH = 4000, 2


def txn_commit(h: Harness, offsets: dict[tuple[str, int], int], group: str = "g", pid: int = PID, **kw: Any) -> int:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset})
    body = {
        "transactional_id": "app",
        "group_id": group,
        "producer_id": pid,
        "producer_epoch": EPOCH,
        "generation_id": kw.get("generation", -1),
        "member_id": kw.get("member_id", ""),
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }
    return h.send("txn_offset_commit", body)


def stable_fetch_code(h: Harness, tp: tuple[str, int], group: str = "g") -> int:
    body = {"group_id": group, "topics": [{"name": tp[0], "partition_indexes": [tp[1]]}], "require_stable": True}
    return h.call("offset_fetch", body)["topics"][0]["partitions"][0]["error_code"]


def test_txn_offsets_are_pending_until_the_commit_marker() -> None:
    h = Harness(auto_complete=False)
    rid = txn_commit(h, {("t", 0): 17})
    [append] = h.pending
    assert isinstance(append, Append) and (append.producer_id, append.producer_epoch) == (PID, EPOCH)
    assert append.kind == "txn_offset_commit"
    h.complete_appends()
    assert h.commit_codes(rid) == {("t", 0): 0}
    assert h.fetch() == {}  # written, not committed
    assert stable_fetch_code(h, ("t", 0)) == E.UNSTABLE_OFFSET_COMMIT
    partition = h.c.partition_for("g")
    h.apply(h.c.complete_txn_offsets(("__consumer_offsets", partition), PID, EPOCH, True))
    assert h.fetch() == {("t", 0): 17}
    assert stable_fetch_code(h, ("t", 0)) == E.NONE


def test_aborted_txn_offsets_are_dropped_and_others_stay() -> None:
    h = Harness()
    assert h.commit_codes(h.commit({("t", 0): 5})) == {("t", 0): 0}
    txn_commit(h, {("t", 0): 9})
    txn_commit(h, {("t", 1): 3}, pid=PID + 1)
    partition = h.c.partition_for("g")
    h.apply(h.c.complete_txn_offsets(("__consumer_offsets", partition), PID, EPOCH, False))
    assert h.fetch() == {("t", 0): 5}
    assert stable_fetch_code(h, ("t", 1)) == E.UNSTABLE_OFFSET_COMMIT  # the other producer's is still open
    # a marker on another offsets partition does not touch this group
    h.apply(h.c.complete_txn_offsets(("__consumer_offsets", (partition + 1) % 4), PID + 1, EPOCH, True))
    assert h.fetch() == {("t", 0): 5}


def test_txn_commit_of_a_member_checks_its_generation() -> None:
    h = Harness()
    (a, _b), gen = h.form_group(2)
    assert h.commit_codes(txn_commit(h, {("t", 0): 1}, member_id=a, generation=gen + 1)) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert h.commit_codes(txn_commit(h, {("t", 0): 1}, member_id="stranger", generation=gen)) == {
        ("t", 0): E.UNKNOWN_MEMBER_ID
    }
    assert h.commit_codes(txn_commit(h, {("t", 0): 1}, member_id=a, generation=gen)) == {("t", 0): 0}


def test_malformed_txn_offset_commit_is_invalid_request() -> None:
    import pytest

    from kraftpy.protocol.errors import KafkaError

    h = Harness()
    with pytest.raises(KafkaError) as info:
        h.send("txn_offset_commit", {"group_id": "g", "transactional_id": "x", "producer_id": -5, "producer_epoch": 0})
    assert info.value.code == E.INVALID_REQUEST


def test_a_load_counts_txn_offsets_at_their_commit_marker_and_keeps_open_ones_pending(tmp_path) -> None:
    import struct

    from kraftpy.broker.groups import GroupCoordinator, GroupCoordinatorConfig
    from kraftpy.broker.groups.records import OffsetAndMetadata, offset_commit_record
    from kraftpy.broker.groups.shell.partition_loader import read_records
    from kraftpy.protocol.records import build_batch
    from kraftpy.protocol.topics import OFFSETS_TOPIC
    from kraftpy.storage import PartitionLog

    def offsets(offset: int) -> list:
        return [offset_commit_record("g", "t", 0, OffsetAndMetadata(offset, None, "", 1))]

    def txn(pid: int, offset: int) -> bytes:
        return build_batch(offsets(offset), producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)

    def marker(pid: int, commit: bool) -> bytes:
        key = struct.pack(">hh", 0, 1 if commit else 0)
        return build_batch(
            [(key, b"\x00\x00\x00\x00\x00\x00")],
            producer_id=pid,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )

    plog = PartitionLog.open(tmp_path / f"{OFFSETS_TOPIC}-0")
    try:
        for batch in (build_batch(offsets(1)), txn(7, 2), txn(8, 3), txn(9, 4), marker(7, True), marker(8, False)):
            plog.append_as_leader(batch, 0, now_ms=1)
        open_txns: dict = {}
        records = read_records(plog, plog.log_end_offset, buffer_bytes=64, open_txns=open_txns)
        assert set(open_txns) == {9}
        reader = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=1))
        reader.begin_loading(0)
        reader.complete_loading(0, records, 10, open_txns=open_txns)
        group = reader.group("g")
        assert group.offsets[("t", 0)].offset == 2  # producer 7 committed; 8 aborted
        assert group.pending_txn_offsets[9][("t", 0)].offset == 4  # still open: its marker materializes it
        reader.complete_txn_offsets((OFFSETS_TOPIC, 0), 9, 0, True)
        assert group.offsets[("t", 0)].offset == 4
    finally:
        plog.close()
