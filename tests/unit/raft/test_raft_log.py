"""The log protocol's decisions: OffsetsForLeaderEpoch, Fetch validation (DivergingEpoch,
snapshot), the follower's truncation point, and the memory log's crash model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.raft.log import Entry, FetchVerdict, OffsetAndEpoch, truncation_offset, validate_fetch
from kraftpy.raft.log_view import LogView
from kraftpy.raft.memory_log import LogError, MemoryLog
from tests.unit.raft.test_raft_support import make_log


def test_end_offset_for_epoch() -> None:
    log = make_log(1, 1, 3, 3, 3, 5)  # epoch 1: [0,2), epoch 3: [2,5), epoch 5: [5,6)
    assert log.end_offset_for(1) == (2, 1)
    assert log.end_offset_for(2) == (2, 1)  # largest epoch <= 2 is 1
    assert log.end_offset_for(3) == (5, 3)
    assert log.end_offset_for(4) == (5, 3)
    assert log.end_offset_for(5) == (6, 5)
    assert log.end_offset_for(9) == (6, 5)
    assert log.end_offset_for(0) == (-1, -1)
    assert MemoryLog().end_offset_for(3) == (-1, -1)


@given(
    st.lists(st.integers(1, 4), max_size=6).map(sorted),
    st.lists(st.integers(0, 3), max_size=8),
    st.integers(0, 8),
)
def test_end_offset_for_over_staged_entries_is_as_once_applied(applied, staged_steps, epoch) -> None:
    """The core's view answers OffsetsForLeaderEpoch over entries it staged in this step (not yet
    written by the shell) exactly as the log answers once they are written."""
    log = make_log(*applied)
    view = LogView(log)
    last = applied[-1] if applied else 1
    staged = []
    for step in staged_steps:  # epochs that only go up, as in any log
        last += step
        staged.append(Entry(log.end_offset + len(staged), last, b"x"))
    view.append(staged)
    expected = make_log(*applied, *(e.epoch for e in staged))
    assert view.end_offset_for(epoch) == expected.end_offset_for(epoch)


def test_validate_fetch_valid_positions() -> None:
    leader = make_log(1, 1, 3, 3, 3, 5)
    assert validate_fetch(leader, 0, 0)[0] is FetchVerdict.VALID
    assert validate_fetch(leader, 2, 1)[0] is FetchVerdict.VALID
    assert validate_fetch(leader, 5, 3)[0] is FetchVerdict.VALID
    assert validate_fetch(leader, 6, 5)[0] is FetchVerdict.VALID


@pytest.mark.parametrize(
    ("follower_epochs", "expected"),
    [
        # follower has epoch 1 beyond where the leader's epoch 1 ends: diverging at (1, 2)
        ((1, 1, 1, 1), OffsetAndEpoch(2, 1)),
        # follower has an epoch 2 the leader never had: the leader's largest epoch <= 2 is 1
        ((1, 1, 2, 2), OffsetAndEpoch(2, 1)),
        # follower is ahead of the leader in the leader's own last epoch
        ((1, 1, 3, 3, 3, 5, 5, 5), OffsetAndEpoch(6, 5)),
    ],
)
def test_validate_fetch_diverging(follower_epochs: tuple[int, ...], expected: OffsetAndEpoch) -> None:
    leader = make_log(1, 1, 3, 3, 3, 5)
    follower = make_log(*follower_epochs)
    verdict, position = validate_fetch(leader, follower.end_offset, follower.last_epoch)
    assert verdict is FetchVerdict.DIVERGING
    assert position == expected


def test_follower_converges_by_repeated_diverging_answers() -> None:
    """Figure 7-like: the follower truncates with DivergingEpoch until its fetch is valid."""
    leader = make_log(1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
    follower = make_log(1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3)
    steps = 0
    while True:
        verdict, position = validate_fetch(leader, follower.end_offset, follower.last_epoch)
        if verdict is FetchVerdict.VALID:
            break
        follower.truncate_to(truncation_offset(follower, position))
        steps += 1
        assert steps < 5
    assert follower.end_offset == 3  # kept exactly the common prefix
    assert [e.epoch for e in follower.entries()] == [1, 1, 1]


def test_truncation_uses_the_shorter_range() -> None:
    follower = make_log(1, 1, 3, 3, 3)
    assert truncation_offset(follower, OffsetAndEpoch(4, 3)) == 4
    assert truncation_offset(follower, OffsetAndEpoch(9, 3)) == 5
    # leader's epoch 2 is unknown here: keep up to the end of our largest epoch below it
    assert truncation_offset(follower, OffsetAndEpoch(3, 2)) == 2


def test_fetch_below_log_start_gets_the_snapshot() -> None:
    leader = make_log(1, 1, 2, 2, 2, 2)
    leader.create_snapshot(OffsetAndEpoch(4, 2), b"state")
    leader.trim(4)
    assert leader.log_start_offset == 4
    assert leader.end_offset_for(2) == (6, 2)
    assert validate_fetch(leader, 1, 1) == (FetchVerdict.SNAPSHOT, OffsetAndEpoch(4, 2))
    assert validate_fetch(leader, 4, 1)[0] is FetchVerdict.SNAPSHOT  # at the start, other epoch
    assert validate_fetch(leader, 4, 2)[0] is FetchVerdict.VALID
    assert validate_fetch(leader, 6, 2)[0] is FetchVerdict.VALID


def test_crash_loses_the_unflushed_tail_only() -> None:
    log = make_log(1, 1)
    log.append([Entry(2, 1, b"x"), Entry(3, 2, b"y")])
    log.flush(3)
    log.append([Entry(4, 2, b"z")])
    log.crash()
    assert log.end_offset == 3
    assert log.last_epoch == 1
    assert log.end_offset_for(2) == (3, 1)


def test_truncation_is_durable_at_once() -> None:
    log = make_log(1, 1, 1)
    log.truncate_to(1)
    log.append([Entry(1, 2, b"new")])
    log.crash()  # the new entry was not flushed; the truncation holds anyway
    assert log.end_offset == 1


def test_log_rejects_gaps_and_epochs_going_back() -> None:
    log = make_log(2, 2)
    with pytest.raises(LogError):
        log.append([Entry(5, 2, b"gap")])
    with pytest.raises(LogError):
        log.append([Entry(2, 1, b"older epoch")])
    with pytest.raises(LogError):
        log.trim(1)  # no snapshot ends there


def test_snapshot_install_restarts_the_log() -> None:
    log = make_log(1, 1)
    snap = OffsetAndEpoch(10, 3)
    log.write_snapshot_chunk(snap, 0, b"ab")
    log.write_snapshot_chunk(snap, 2, b"cd")
    log.install_snapshot(snap)
    assert (log.log_start_offset, log.end_offset, log.last_epoch) == (10, 10, 3)
    assert log.read_snapshot(snap, 1, 2) == b"bc"
    assert log.entry_epoch(9) == 3
    assert validate_fetch(log, 10, 3)[0] is FetchVerdict.VALID


@st.composite
def diverged_logs(draw):
    """A leader's and a follower's log that share a prefix, then share part of one epoch E
    (the old leader of E reached them unequally), then continue in disjoint newer epochs."""
    prefix = sorted(draw(st.lists(st.integers(1, 4), max_size=8)))
    shared_epoch = draw(st.integers(prefix[-1] if prefix else 1, 5))
    k_leader, k_follower = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    newer = draw(st.lists(st.integers(6, 20), unique=True, max_size=6))
    split = draw(st.integers(0, len(newer)))
    leader_epochs, follower_epochs = sorted(newer[:split]), sorted(newer[split:])
    leader_tail = sorted(draw(st.lists(st.sampled_from(leader_epochs), max_size=6))) if leader_epochs else []
    follower_tail = sorted(draw(st.lists(st.sampled_from(follower_epochs), max_size=6))) if follower_epochs else []
    leader = [*prefix, *[shared_epoch] * k_leader, *leader_tail]
    follower = [*prefix, *[shared_epoch] * k_follower, *follower_tail]
    common = len(prefix) + min(k_leader, k_follower)
    if k_leader == k_follower:  # the epochs after the shared run differ, so nothing more matches
        common = len(prefix) + k_leader
    return leader, follower, common


def _log_of(epochs: list[int]) -> MemoryLog:
    log = MemoryLog()
    # entries of the same (offset, epoch) carry the same data in both logs (log matching)
    log.append(Entry(i, e, f"{i}:{e}".encode()) for i, e in enumerate(epochs))
    return log


@settings(max_examples=300, deadline=None)
@given(diverged_logs())
def test_diverging_epoch_converges_to_exactly_the_common_prefix(logs) -> None:
    leader_epochs, follower_epochs, common = logs
    leader, follower = _log_of(leader_epochs), _log_of(follower_epochs)
    for _ in range(len(follower_epochs) + 2):
        verdict, position = validate_fetch(leader, follower.end_offset, follower.last_epoch)
        if verdict is FetchVerdict.VALID:
            break
        assert verdict is FetchVerdict.DIVERGING
        follower.truncate_to(truncation_offset(follower, position))
    else:
        pytest.fail("no convergence")
    assert follower.end_offset >= common, "truncated a matching entry"
    assert follower.entries() == leader.entries()[: follower.end_offset], "kept a diverging entry"
