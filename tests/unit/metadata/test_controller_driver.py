"""ControllerDriver driven directly: activation, renouncing, claiming back, packing limits, backpressure."""

from __future__ import annotations

import random

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.driver import (
    CLAIM_RETRY_MS,
    ENTRY_OVERHEAD_BYTES,
    MAX_ENTRY_BYTES,
    Append,
    ControllerDriver,
    RaftView,
    append_limits,
)
from kraftpy.metadata.controller.quorum_controller import QuorumController
from kraftpy.metadata.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopic,
    CreateTopicsRequest,
    DescribeConfigsRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.records import FenceBrokerRecord, NoOpRecord, RegisterBrokerRecord, decode_entry
from kraftpy.protocol.errors import ErrorCode, KafkaError

ME, OTHER = 1, 2
VOTERS = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
CONFIG = ControllerConfig(cluster_id="c", metadata_max_idle_interval_ms=0, auto_leader_rebalance_enable=False)
REFUSED = KafkaError("refused", ErrorCode.NOT_ENOUGH_REPLICAS)


def driver(**kwargs: int) -> ControllerDriver:
    controller = QuorumController(CONFIG, rng=random.Random(0))
    return ControllerDriver(controller, ME, voters=VOTERS, **kwargs)


def register(d: ControllerDriver, broker_id: int, now_ms: int = 0):
    return d.decide(BrokerRegistrationRequest(broker_id, "c", f"inc-{broker_id}"), now_ms)


class Log:
    """Just enough of Raft: offsets for appends, the committed image for commits."""

    def __init__(self, d: ControllerDriver) -> None:
        self.d = d
        self.end = d.committed_offset + 1
        self.entries: list[tuple[int, bytes]] = []

    def append(self, append: Append):
        for entry in append.entries:
            self.entries.append((self.end, entry))
            self.end += 1
        return self.d.appended(append, self.end - 1, 0)

    def commit(self, up_to: int | None = None):
        up_to = self.end - 1 if up_to is None else up_to
        image = self.d.controller.committed_image
        records = [r for offset, e in self.entries if image.offset < offset <= up_to for r in decode_entry(e)]
        return self.d.on_commit(apply_records(image, records, offset=up_to), up_to, 0)


# --- leadership ------------------------------------------------------------------------------------


def test_activates_on_its_own_leadership_once_per_epoch() -> None:
    d = driver()
    effects = d.on_leader_change(ME, 3, 0)
    assert effects.activated and d.is_active and d.controller.epoch == 3 and d.activations == 1
    assert not d.on_leader_change(ME, 3, 0).activated and d.activations == 1  # the same epoch again: nothing
    assert d.on_leader_change(ME, 4, 0).activated and d.activations == 2 and d.renounces == 1


def test_another_leader_renounces_fails_waiting_answers_and_points_at_it() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    decision = register(d, 7)
    for append in decision.appends:
        log.append(append)
    assert d.must_wait(decision)
    d.defer("answer")
    effects = d.on_leader_change(OTHER, 2, 0)
    assert effects.renounced and not effects.activated and effects.failed == ["answer"]
    assert effects.error.code == ErrorCode.NOT_CONTROLLER
    assert effects.error.details == {"leader_id": 2, "leader_address": "127.0.0.1:9002"}
    assert not d.is_active and d.renounces == 1 and len(d.deferred) == 0 and d.backlog_bytes == 0
    refused = register(d, 8)
    assert not refused.active and refused.appends == () and not d.must_wait(refused)
    assert refused.result.response.code == ErrorCode.NOT_CONTROLLER


def test_a_new_epoch_of_ours_after_a_truncation_starts_offsets_from_the_committed_log() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    for append in register(d, 7).appends:
        log.append(append)
    assert d.last_appended_offset == 0 and d.committed_offset == -1
    d.on_leader_change(OTHER, 2, 0)  # the other leader truncates offset 0
    d.on_leader_change(ME, 3, 0)
    assert d.last_appended_offset == -1
    assert not d.must_wait(d.decide(DescribeConfigsRequest(()), 0))  # nothing pending: answered at once


# --- answers ---------------------------------------------------------------------------------------


def test_answers_wait_for_their_records_and_for_everything_appended_before() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    first = register(d, 7)
    assert len(first.appends) == 1 and first.appends[0].epoch == 1
    log.append(first.appends[0])
    d.defer("first")
    read = d.decide(DescribeConfigsRequest(()), 0)
    assert read.appends == () and d.must_wait(read)  # it may depend on the uncommitted registration
    d.defer("read")
    assert log.commit(up_to=-1).released == []
    effects = log.commit()
    assert effects.released == ["first", "read"] and d.committed_offset == 0
    assert isinstance(first.result.response, BrokerRegistrationResponse)
    assert not d.must_wait(d.decide(DescribeConfigsRequest(()), 0))


# --- refused appends: renounce, then claim back ------------------------------------------------------


def test_a_refused_append_while_still_leader_renounces_and_claims_back_behind_a_noop() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    log.append(register(d, 7).appends[0])  # offset 0, not committed
    d.defer("earlier")
    refused = register(d, 8).appends[0]
    effects = d.append_failed(refused, REFUSED, RaftView(is_leader=True, epoch=1, leader_id=ME))
    assert effects.renounced and effects.failed == ["earlier"] and effects.claim_after_ms == CLAIM_RETRY_MS
    assert effects.error.details == {"leader_id": 1, "leader_address": "127.0.0.1:9001"}  # retry here
    assert not d.is_active and d.claiming and d.renounces == 1
    claim = d.claim()
    assert claim is not None and claim.claim and claim.epoch == 1
    assert [decode_entry(e) for e in claim.entries] == [[NoOpRecord()]]
    assert not log.append(claim).activated  # offset 1: activation waits until it commits
    assert not log.commit(up_to=0).activated and d.claiming  # the earlier record alone is not enough
    effects = log.commit()
    assert effects.activated and d.is_active and not d.claiming and d.activations == 2
    assert d.controller.committed_image.broker(7) is not None  # the earlier record did commit


def test_a_refused_append_after_losing_leadership_renounces_towards_the_new_leader_without_claiming() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    append = register(d, 7).appends[0]
    effects = d.append_failed(append, REFUSED, RaftView(is_leader=False, epoch=2, leader_id=OTHER))
    assert effects.renounced and effects.claim_after_ms is None and not d.claiming
    assert effects.error.details["leader_id"] == OTHER and d.claim() is None


def test_a_refused_claim_is_retried_while_still_leader_of_its_epoch() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    d.append_failed(register(d, 7).appends[0], REFUSED, RaftView(True, 1, ME))
    claim = d.claim()
    assert d.append_failed(claim, REFUSED, RaftView(True, 1, ME)).claim_after_ms == CLAIM_RETRY_MS
    assert d.claiming and d.claim() == claim
    assert d.append_failed(claim, REFUSED, RaftView(False, 2, OTHER)).claim_after_ms is None


def test_a_leader_change_while_claiming_ends_the_claim_and_a_late_noop_claims_nothing() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    d.append_failed(register(d, 7).appends[0], REFUSED, RaftView(True, 1, ME))
    claim = d.claim()
    assert d.on_leader_change(OTHER, 2, 0).renounced and not d.claiming and d.claim() is None
    log.append(claim)
    assert not log.commit().activated and not d.is_active


def test_a_claim_that_is_already_committed_activates_at_once() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    d.append_failed(register(d, 7).appends[0], REFUSED, RaftView(True, 1, ME))
    claim = d.claim()
    d.on_commit(d.controller.committed_image, 5, 0)  # Raft committed past where the NoOp lands
    assert d.appended(claim, 5, 0).activated and d.is_active


def test_stop_renounces_never_pointing_at_itself_and_claims_no_more() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    d.append_failed(register(d, 7).appends[0], REFUSED, RaftView(True, 1, ME))
    effects = d.stop(raft_leader_id=ME)
    assert effects.renounced and effects.error.details["leader_id"] is None and d.claim() is None


# --- packing and backpressure ----------------------------------------------------------------------


def big_topic(partitions: int) -> CreateTopicsRequest:
    return CreateTopicsRequest((CreatableTopic("big", partitions, 3),))


def with_brokers(**kwargs: int) -> tuple[ControllerDriver, Log]:
    d = driver(**kwargs)
    d.on_leader_change(ME, 1, 0)
    log = Log(d)
    for b in (1, 2, 3):
        log.append(register(d, b).appends[0])
    log.commit()
    for b in (1, 2, 3):  # unfence
        epoch = d.controller.committed_image.broker(b).broker_epoch
        for append in d.decide(BrokerHeartbeatRequest(b, epoch, d.committed_offset), 0).appends:
            log.append(append)
    log.commit()
    return d, log


def test_a_decision_is_one_atomic_append_of_entries_of_at_most_max_entry_bytes() -> None:
    d, _ = with_brokers()
    decision = d.decide(big_topic(6000), 0)
    (append,) = decision.appends
    assert len(decision.result.records) == 6001 and 1 < len(append.entries) < 40
    assert all(len(e) <= MAX_ENTRY_BYTES for e in append.entries)
    assert [r for e in append.entries for r in decode_entry(e)] == list(decision.result.records)


def test_a_decision_past_max_append_bytes_is_split_into_consecutive_appends_in_order() -> None:
    d, log = with_brokers(max_append_bytes=200_000)
    decision = d.decide(big_topic(6000), 0)
    assert len(decision.appends) > 1
    for append in decision.appends:
        assert append.size_bytes + ENTRY_OVERHEAD_BYTES * len(append.entries) <= 200_000
    records = [r for a in decision.appends for e in a.entries for r in decode_entry(e)]
    assert records == list(decision.result.records)
    for append in decision.appends:
        log.append(append)
    assert d.backlog_bytes == sum(a.size_bytes for a in decision.appends)


def test_append_limits_stay_within_rafts_own() -> None:
    assert append_limits(1_024_000, 4 << 20) == (1_024_000, 4 << 20)
    assert append_limits(1_024_000, 4 << 20, raft_max_batch_bytes=64 * 1024) == (63 * 1024, 4 << 20)
    assert append_limits(1_024_000, 4 << 20, raft_max_uncommitted_bytes=1 << 20) == (1_024_000, 512 * 1024)


def test_backlog_past_the_bound_pauses_ticks_until_commits_drain_it() -> None:
    d, log = with_brokers(max_uncommitted_bytes=1000)
    for append in d.decide(big_topic(100), 0).appends:
        log.append(append)
    assert d.backlogged and d.backlog_bytes > 1000
    far_future = 10**9  # every lease has expired: a tick would fence
    assert d.tick(far_future).appends == () and d.tick(far_future).result.records == ()
    log.commit()
    assert not d.backlogged and d.backlog_bytes == 0
    fenced = d.tick(far_future)
    assert {r.broker_id for r in fenced.result.records if isinstance(r, FenceBrokerRecord)} == {1, 2, 3}


def test_inactive_ticks_append_nothing() -> None:
    d = driver()
    assert d.tick(10**9).appends == () and not d.tick(0).active


def test_a_lone_record_is_its_own_entry() -> None:
    d = driver()
    d.on_leader_change(ME, 1, 0)
    (append,) = register(d, 7).appends
    ((record,),) = [decode_entry(e) for e in append.entries]
    assert isinstance(record, RegisterBrokerRecord)


def test_the_harness_packs_records_into_entries_as_a_node_does() -> None:
    """The harness drives the same driver: a decision of 6,001 records takes a few offsets, not 6,001."""
    h = ControllerHarness(CONFIG)
    h.start_brokers([1, 2, 3])
    before = h.committed.offset
    result = h.send(big_topic(6000))
    assert len(result.records) == 6001 and h.committed.topic("big") is not None
    assert 1 < h.committed.offset - before < 40
    assert [r for _, r in h.log[-6001:]] == list(result.records)
