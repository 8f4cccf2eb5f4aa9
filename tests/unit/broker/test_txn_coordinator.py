"""The transaction coordinator core: every transition, fencing, timeouts, failover, hostile input."""

from __future__ import annotations

import logging

import pytest

from kraftpy.broker.groups.actions import Append, Respond
from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.broker.txn.coordinator import SendMarkers, TransactionCoordinator
from kraftpy.broker.txn.metadata import IllegalTransition, TxnMetadata
from kraftpy.broker.txn.records import (
    TxnLogValue,
    TxnRecordError,
    TxnState,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
    txn_record,
)
from kraftpy.protocol.errors import ErrorCode as E
from kraftpy.protocol.topics import OFFSETS_TOPIC

S = TxnState
TXN = "app-1"
T0 = 1_000_000


class Harness:
    """Drives one coordinator that owns every partition; appends succeed unless told otherwise."""

    def __init__(self, **config) -> None:
        config.setdefault("transaction_state_log_num_partitions", 4)
        self.c = TransactionCoordinator(TransactionCoordinatorConfig(**config))
        self.log: dict[int, list] = {}
        self.markers: list[SendMarkers] = []
        self.responses: dict = {}
        self.held: list[Append] = []
        self.hold = False
        self.next_pid = 1000
        self.rid = 0
        for p in range(config["transaction_state_log_num_partitions"]):
            self.c.begin_loading(p, 7)
            self.run(self.c.complete_loading(p, [], T0))

    def run(self, actions, now=T0) -> None:
        for a in actions:
            if isinstance(a, Respond):
                self.responses[a.request_id] = a.body
            elif isinstance(a, SendMarkers):
                self.markers.append(a)
            elif isinstance(a, Append):
                self.log.setdefault(a.partition, []).extend(a.records)
                if self.hold:
                    self.held.append(a)
                else:
                    self.run(self.c.append_completed(a.append_id, E.NONE, now), now)

    def call(self, method, *args, now=T0):
        self.rid += 1
        self.run(getattr(self.c, method)(self.rid, *args, now), now)
        return self.responses.get(self.rid)

    def init(self, txn=TXN, timeout=60_000, pid=-1, epoch=-1, now=T0):
        new = None
        if self.c.needs_producer_id(txn):
            new, self.next_pid = self.next_pid, self.next_pid + 1
        return self.call("init_producer_id", txn, timeout, pid, epoch, new, now=now)

    def add(self, pid, epoch, parts=(("t", 0),), txn=TXN, now=T0):
        return self.call("add_partitions", txn, pid, epoch, list(parts), now=now)

    def end(self, pid, epoch, commit, txn=TXN, now=T0):
        return self.call("end_txn", txn, pid, epoch, commit, now=now)

    def ack_markers(self, now=T0):
        sent, self.markers = self.markers, []
        for m in sent:
            self.run(
                self.c.markers_written(
                    m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, now, m.load_epoch
                ),
                now,
            )
        return sent

    def state(self, txn=TXN):
        return self.c.txns[txn].state


def test_records_round_trip_in_kafkas_layout():
    value = TxnLogValue(42, 3, 60_000, S.ONGOING, {"a": (0, 2), "b": (1,)}, T0 + 5, T0)
    key, raw = txn_record("x", value)
    assert key == b"\x00\x00\x00\x01x"  # int16 version 0, int16 length, UTF-8
    assert raw[:2] == b"\x00\x00" and raw[2:10] == (42).to_bytes(8, "big")
    assert decode_record(key, raw) == ("x", value)
    assert decode_value(None) is None


def test_records_read_value_v1_flexible():
    # v1: compact arrays/strings (length + 1) and tagged fields (tag 0: previous producer id).
    raw = (
        b"\x00\x01" + (7).to_bytes(8, "big") + (1).to_bytes(2, "big") + (5000).to_bytes(4, "big") + b"\x02"
        + b"\x02" + b"\x02t" + b"\x02" + (3).to_bytes(4, "big") + b"\x00"
        + (11).to_bytes(8, "big") + (10).to_bytes(8, "big")
        + b"\x01" + b"\x00\x08" + (6).to_bytes(8, "big")
    )  # fmt: skip
    value = decode_value(raw)
    assert value == TxnLogValue(7, 1, 5000, S.PREPARE_COMMIT, {"t": (3,)}, 11, 10, 6)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00", b"\x00\x05" + b"\x00" * 40, b"\x00\x00" + b"\x00" * 14 + b"\x09", b"\x00\x00" + b"\xff" * 60],
)
def test_hostile_records_are_typed_errors(raw):
    with pytest.raises(TxnRecordError):
        decode_value(raw)


def test_hostile_key_is_typed_error():
    with pytest.raises(TxnRecordError):
        decode_record(b"\x00\x01\x00\x01x", None)
    with pytest.raises(TxnRecordError):
        decode_record(b"\x00\x00\x00\x09x", None)


def test_init_new_id_then_epoch_bumps():
    h = Harness()
    assert h.init() == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    assert h.init() == {"error_code": 0, "producer_id": 1000, "producer_epoch": 1}
    assert h.state() is S.EMPTY
    assert h.c.txns[TXN].previous_producer_id == -1  # an epoch bump keeps the producer id: no previous one
    key, value = h.log[h.c.partition_for(TXN)][-1]
    assert decode_record(key, value)[1].producer_epoch == 1


def test_init_with_timeout_above_max_is_invalid_transaction_timeout():
    h = Harness(transaction_max_timeout_ms=1000)
    assert h.init(timeout=1001)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=0)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=1000)["error_code"] == 0


def test_commit_goes_prepare_markers_complete():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert h.add(pid, epoch, [("t", 0), ("u", 1)])["error_code"] == 0
    assert h.state() is S.ONGOING and h.c.txns[TXN].start_timestamp_ms == T0
    assert h.end(pid, epoch, True) == {"error_code": 0}
    assert h.state() is S.PREPARE_COMMIT
    [m] = h.markers
    assert (m.commit, m.coordinator_epoch, m.partitions) == (True, 7, (("t", 0), ("u", 1)))
    # markers pending: the producer's next moves wait
    assert h.init(pid=pid, epoch=epoch)["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.add(pid, epoch)["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, epoch, True)["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, epoch, False)["error_code"] == E.INVALID_TXN_STATE
    h.ack_markers()
    assert h.state() is S.COMPLETE_COMMIT and h.c.txns[TXN].partitions == set()
    assert h.end(pid, epoch, True) == {"error_code": 0}  # a retried commit
    assert h.end(pid, epoch, False)["error_code"] == E.INVALID_TXN_STATE
    # the next transaction starts from CompleteCommit
    assert h.add(pid, epoch)["error_code"] == 0 and h.state() is S.ONGOING


def test_abort_and_empty_end():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert h.end(pid, epoch, True)["error_code"] == E.INVALID_TXN_STATE  # nothing open
    h.add(pid, epoch)
    assert h.end(pid, epoch, False)["error_code"] == 0
    assert h.state() is S.PREPARE_ABORT and not h.markers[0].commit
    h.ack_markers()
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(pid, epoch, False) == {"error_code": 0}


def test_add_offsets_adds_the_groups_offsets_partition():
    h = Harness(offsets_topic_num_partitions=50)
    r = h.init()
    h.call("add_offsets", TXN, r["producer_id"], r["producer_epoch"], "my-group")
    from kraftpy.broker.groups.records import partition_for

    assert h.c.txns[TXN].partitions == {(OFFSETS_TOPIC, partition_for("my-group", 50))}


def test_init_fences_a_zombie_and_aborts_its_transaction():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch, [("t", 0)])
    # a new incarnation: the open transaction is aborted at epoch + 1
    assert h.init()["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.state() is S.PREPARE_ABORT and h.c.txns[TXN].producer_epoch == epoch + 1
    [m] = h.markers
    assert (m.commit, m.producer_epoch) == (False, epoch + 1)
    # the zombie is fenced everywhere
    assert h.add(pid, epoch)["error_code"] == E.PRODUCER_FENCED
    assert h.end(pid, epoch, True)["error_code"] == E.PRODUCER_FENCED
    assert h.init()["error_code"] == E.CONCURRENT_TRANSACTIONS  # markers still pending
    h.ack_markers()
    assert h.state() is S.COMPLETE_ABORT
    assert h.init() == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 2}


def test_fence_while_the_write_is_in_flight():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch)
    h.hold = True
    h.init()
    assert h.c.txns[TXN].pending is S.PREPARE_EPOCH_FENCE
    assert h.end(pid, epoch, True)["error_code"] == E.PRODUCER_FENCED
    assert h.add(pid, epoch)["error_code"] == E.PRODUCER_FENCED


def test_kip360_a_retried_bump_gets_the_same_answer_an_older_epoch_is_fenced():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    bumped = h.init(pid=pid, epoch=epoch)
    assert bumped == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    written = len(h.log[h.c.partition_for(TXN)])
    # the answer was lost and the producer asks again with the epoch it had (Kafka's lastProducerEpoch):
    # the same answer, nothing written
    assert h.init(pid=pid, epoch=epoch) == bumped
    assert len(h.log[h.c.partition_for(TXN)]) == written
    # once the epoch moved on, that epoch is a zombie's
    assert h.init(pid=pid, epoch=epoch + 1)["producer_epoch"] == epoch + 2
    assert h.init(pid=pid, epoch=epoch)["error_code"] == E.PRODUCER_FENCED
    assert h.init(pid=pid, epoch=epoch + 3)["error_code"] == E.PRODUCER_FENCED


def test_a_refused_bump_is_logged_with_what_was_asked(caplog) -> None:
    # The trail for a duplicate-sequence loss (docs/jepsen.md, seed 2301): which bumps were refused.
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.init(pid=pid, epoch=epoch)
    with caplog.at_level(logging.INFO, logger="kraftpy.broker.txn.coordinator"):
        assert h.init(pid=pid, epoch=epoch + 3)["error_code"] == E.PRODUCER_FENCED
        h.add(pid, epoch + 1)
        # one that names no producer (a first InitProducerId) is retried at will: refused, not logged
        assert h.init()["error_code"] == E.CONCURRENT_TRANSACTIONS
    refused = [m for m in caplog.messages if m.startswith("refused InitProducerId")]
    assert refused == [
        f"refused InitProducerId of transactional id {TXN!r} asked with {pid}/{epoch + 3}: PRODUCER_FENCED "
        f"(producer {pid} epoch {epoch + 3} is not the current one)"
    ]


def test_an_end_txn_refused_for_its_state_is_logged_with_the_state(caplog) -> None:
    # librdkafka takes INVALID_TXN_STATE on EndTxn as fatal: the coordinator's side of that trail.
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    with caplog.at_level(logging.INFO, logger="kraftpy.broker.txn.coordinator"):
        assert h.end(pid, epoch, commit=True)["error_code"] == E.INVALID_TXN_STATE  # nothing added: Empty
        h.add(pid, epoch)
        assert h.end(pid, epoch, commit=False)["error_code"] == E.NONE
        h.ack_markers()
        assert h.end(pid, epoch, commit=True)["error_code"] == E.INVALID_TXN_STATE
    refused = [m for m in caplog.messages if m.startswith("refused EndTxn")]
    assert refused == [
        f"refused EndTxn(commit) of transactional id {TXN!r} at {pid}/{epoch}: INVALID_TXN_STATE "
        f"(the transaction is {state})"
        for state in ("Empty", "CompleteAbort")
    ]


def test_kip360_no_retry_answer_after_a_fence_or_while_a_transaction_is_open():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.init(pid=pid, epoch=epoch)
    h.add(pid, epoch + 1)
    # a late duplicate of the bump while the producer's transaction is open: refused, nothing aborted
    assert h.init(pid=pid, epoch=epoch)["error_code"] == E.PRODUCER_FENCED
    assert h.state() is S.ONGOING
    # a new incarnation fences and aborts at epoch + 2: the old bump's retry no longer matches
    assert h.init()["error_code"] == E.CONCURRENT_TRANSACTIONS
    h.ack_markers()
    assert h.init(pid=pid, epoch=epoch)["error_code"] == E.PRODUCER_FENCED


def test_exhausted_epoch_takes_a_new_producer_id():
    h = Harness()
    h.init()
    h.c.txns[TXN].producer_epoch = 32766
    r = h.init()
    assert (r["producer_id"], r["producer_epoch"]) == (1001, 0)
    assert h.c.txns[TXN].previous_producer_id == 1000


def test_unknown_ids_and_wrong_producers():
    h = Harness()
    assert h.add(5, 0, txn="nobody")["error_code"] == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(5, 0, True, txn="nobody")["error_code"] == E.INVALID_PRODUCER_ID_MAPPING
    r = h.init()
    assert h.add(r["producer_id"] + 1, 0)["error_code"] == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(r["producer_id"], r["producer_epoch"] + 1)["error_code"] == E.PRODUCER_FENCED
    assert h.add(r["producer_id"], r["producer_epoch"] - 1)["error_code"] == E.PRODUCER_FENCED
    assert h.init(txn="")["error_code"] == E.INVALID_REQUEST
    [d] = h.c.describe(["nobody"], T0)
    assert d["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND


def test_oversized_partition_list_is_refused_without_a_write():
    h = Harness(transaction_max_partitions=3)
    r = h.init()
    written = len(h.log[h.c.partition_for(TXN)])
    parts = [("t", i) for i in range(4)]
    assert h.add(r["producer_id"], r["producer_epoch"], parts)["error_code"] == E.INVALID_REQUEST
    assert len(h.log[h.c.partition_for(TXN)]) == written and h.state() is S.EMPTY


def test_a_transaction_may_span_exactly_the_partition_limit():
    h = Harness(transaction_max_partitions=3)
    r = h.init()
    assert h.add(r["producer_id"], r["producer_epoch"], [("t", i) for i in range(3)])["error_code"] == 0
    assert h.state() is S.ONGOING
    assert h.add(r["producer_id"], r["producer_epoch"], [("u", 0)])["error_code"] == E.INVALID_REQUEST


def test_end_txn_while_the_abort_markers_are_written():
    # Kafka's answers: the same decision again is retriable (CONCURRENT_TRANSACTIONS), the other is not.
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch)
    h.end(pid, epoch, False)
    assert h.state() is S.PREPARE_ABORT
    assert h.end(pid, epoch, False)["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, epoch, True)["error_code"] == E.INVALID_TXN_STATE


def test_not_coordinator_and_loading():
    c = TransactionCoordinator(TransactionCoordinatorConfig(transaction_state_log_num_partitions=1))
    out = c.init_producer_id(1, TXN, 1000, -1, -1, 5, T0)
    assert out[0].body["error_code"] == E.NOT_COORDINATOR
    c.begin_loading(0, 1)
    assert c.add_partitions(2, TXN, 1, 0, [("t", 0)], T0)[0].body["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS


def test_timed_out_transaction_is_aborted_with_an_epoch_bump():
    h = Harness(transaction_abort_timed_out_transaction_cleanup_interval_ms=1000)
    r = h.init(timeout=5000)
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch)
    h.run(h.c.tick(T0 + 4000), T0 + 4000)
    assert h.state() is S.ONGOING
    h.run(h.c.tick(T0 + 6000), T0 + 6000)
    assert h.state() is S.PREPARE_ABORT and h.c.txns[TXN].producer_epoch == epoch + 1
    h.ack_markers(T0 + 6000)
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(pid, epoch, True, now=T0 + 6001)["error_code"] == E.PRODUCER_FENCED


def test_idle_transactional_id_expires_with_a_tombstone():
    h = Harness(transactional_id_expiration_ms=10_000, transaction_remove_expired_transaction_cleanup_interval_ms=1000)
    h.init()
    h.run(h.c.tick(T0 + 5000), T0 + 5000)
    assert TXN in h.c.txns
    h.run(h.c.tick(T0 + 11_000), T0 + 11_000)
    assert TXN not in h.c.txns
    key, value = h.log[h.c.partition_for(TXN)][-1]
    assert key == encode_key(TXN) and value is None
    assert h.init()["producer_id"] == 1001  # a new id


def test_failover_resumes_prepare_commit_from_the_log():
    h = Harness()
    r = h.init()
    h.add(r["producer_id"], r["producer_epoch"], [("t", 0)])
    h.end(r["producer_id"], r["producer_epoch"], True)
    partition = h.c.partition_for(TXN)
    records = list(h.log[partition])
    # the coordinator moves before the markers are acknowledged
    h.run(h.c.unload(partition))
    assert TXN not in h.c.txns
    stale = h.markers.pop()
    h.c.begin_loading(partition, 8)
    h.run(h.c.complete_loading(partition, records, T0 + 10))
    assert h.state() is S.PREPARE_COMMIT
    [resent] = h.markers
    assert (resent.commit, resent.coordinator_epoch, resent.partitions) == (True, 8, (("t", 0),))
    # a report from the earlier term (coordinator epoch 7) is ignored
    h.run(h.c.markers_written(TXN, stale.producer_id, stale.producer_epoch, 7, T0 + 11))
    assert h.state() is S.PREPARE_COMMIT
    h.ack_markers(T0 + 12)
    assert h.state() is S.COMPLETE_COMMIT


def test_markers_of_an_earlier_load_do_not_complete_the_next_transaction():
    """A write of unknown fate reloads the partition at the same leader (coordinator) epoch: the
    marker task of the earlier load must not complete the producer's next transaction, whose
    markers are still being written (its late COMMIT markers would then land in later data)."""
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch, [("t", 0)])
    h.end(pid, epoch, True)
    partition = h.c.partition_for(TXN)
    [stale] = h.markers
    h.markers.clear()
    h.run(h.c.unload(partition))
    h.c.begin_loading(partition, stale.coordinator_epoch)
    h.run(h.c.complete_loading(partition, list(h.log[partition]), T0 + 10))
    h.ack_markers(T0 + 11)  # the reload resent the first transaction's markers; it completes
    assert h.state() is S.COMPLETE_COMMIT
    h.add(pid, epoch, [("t", 1)], now=T0 + 12)
    h.end(pid, epoch, True, now=T0 + 13)
    assert h.state() is S.PREPARE_COMMIT
    appended = len(h.log[partition])
    # the earlier load's task reports last: same producer, epoch and coordinator epoch
    h.run(
        h.c.markers_written(
            TXN, stale.producer_id, stale.producer_epoch, stale.coordinator_epoch, T0 + 14, stale.load_epoch
        ),
        T0 + 14,
    )
    assert h.state() is S.PREPARE_COMMIT and len(h.log[partition]) == appended
    h.ack_markers(T0 + 15)
    assert h.state() is S.COMPLETE_COMMIT


def test_failed_append_leaves_state_and_complete_is_retried():
    h = Harness(complete_retry_backoff_ms=50)
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    h.add(pid, epoch)
    h.hold = True
    h.end(pid, epoch, True)
    [a] = h.held
    h.held.clear()
    h.run(h.c.append_completed(a.append_id, E.NOT_LEADER_OR_FOLLOWER, T0))
    assert h.responses[h.rid] == {"error_code": int(E.NOT_COORDINATOR)}
    assert h.state() is S.ONGOING and h.c.txns[TXN].pending is None
    h.hold = False
    h.end(pid, epoch, True)
    h.hold = True
    h.ack_markers()
    [complete] = h.held
    h.held.clear()
    h.run(h.c.append_completed(complete.append_id, E.REQUEST_TIMED_OUT, T0))
    assert h.state() is S.PREPARE_COMMIT
    h.hold = False
    h.run(h.c.tick(T0 + 50), T0 + 50)
    assert h.state() is S.COMPLETE_COMMIT


def test_verify_partitions_for_kip890():
    h = Harness()
    r = h.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert h.c.verify_partitions(TXN, pid, epoch, [("t", 0)]) == {("t", 0): E.INVALID_TXN_STATE}
    h.add(pid, epoch, [("t", 0)])
    assert h.c.verify_partitions(TXN, pid, epoch, [("t", 0), ("t", 1)]) == {
        ("t", 0): E.NONE,
        ("t", 1): E.INVALID_TXN_STATE,
    }
    # Another AddPartitionsToTxn in flight (librdkafka adds partitions while it produces) changes nothing.
    h.c.add_partitions("in-flight", TXN, pid, epoch, [("t", 1)], T0)
    assert h.c.txns[TXN].pending is not None
    assert h.c.verify_partitions(TXN, pid, epoch, [("t", 0), ("t", 1)]) == {
        ("t", 0): E.NONE,
        ("t", 1): E.INVALID_TXN_STATE,
    }
    assert h.c.verify_partitions(TXN, pid, epoch - 1, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    assert h.c.verify_partitions("x", pid, epoch, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}


def test_describe_and_list():
    h = Harness()
    r = h.init()
    h.add(r["producer_id"], r["producer_epoch"], [("t", 1), ("t", 0)])
    h.init(txn="other")
    [d] = h.c.describe([TXN], T0 + 100)
    assert d["transaction_state"] == "Ongoing" and d["topics"] == [{"topic": "t", "partitions": [0, 1]}]
    listed = h.c.list_transactions(["Ongoing", "Bogus"], [], -1, T0)
    assert [s["transactional_id"] for s in listed["states"]] == [TXN]
    assert listed["unknown_state_filters"] == ["Bogus"]
    assert len(h.c.list_transactions([], [], -1, T0)["states"]) == 2
    assert h.c.list_transactions([], [], 1000, T0 + 999)["states"] == []
    assert len(h.c.list_transactions([], [], 1000, T0 + 1000)["states"]) == 1
    # KIP-994's producer id filter keeps only the producers asked for.
    only = h.c.list_transactions([], [r["producer_id"]], -1, T0)["states"]
    assert [s["transactional_id"] for s in only] == [TXN]
    # A duration filter of 0 keeps the transactions that have started, not the idle ids.
    assert [s["transactional_id"] for s in h.c.list_transactions([], [], 0, T0)["states"]] == [TXN]


def test_illegal_transitions_are_refused():
    meta = TxnMetadata("x", 0, 1, 0, 1000, S.EMPTY)
    for target in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(IllegalTransition):
            meta.value(target, T0)
    meta.state = S.PREPARE_COMMIT
    for target in (S.EMPTY, S.ONGOING, S.DEAD, S.COMPLETE_ABORT):
        with pytest.raises(IllegalTransition):
            meta.value(target, T0)


def test_load_skips_undecodable_records():
    c = TransactionCoordinator(TransactionCoordinatorConfig(transaction_state_log_num_partitions=1))
    c.begin_loading(0, 3)
    good = txn_record(TXN, TxnLogValue(9, 2, 1000, S.COMPLETE_ABORT, {}, T0, -1))
    c.complete_loading(0, [(b"\x00\x07junk", b"x"), good, (encode_key("y"), b"\x00")], T0)
    assert c.txns[TXN].producer_epoch == 2 and "y" not in c.txns
    assert encode_value(TxnLogValue(9, 2, 1000, S.COMPLETE_ABORT, {}, T0, -1)) == good[1]
