"""Leader-epoch cache arithmetic, pinned to Kafka's LeaderEpochFileCache behaviour."""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import EpochEndOffset, EpochEntry, LeaderEpochCache
from kraftpy.broker.replication.model import UNDEFINED_EPOCH_END


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(EpochEntry(e, s) for e, s in entries)


def test_end_offset_for_every_case() -> None:
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(5, 25) == EpochEndOffset(5, 25)  # the latest epoch ends at the LEO
    assert c.end_offset_for(3, 25) == EpochEndOffset(3, 20)  # a known epoch ends where the next starts
    assert c.end_offset_for(4, 25) == EpochEndOffset(3, 20)  # unknown, in between: the largest epoch below
    assert c.end_offset_for(0, 25) == EpochEndOffset(0, 0)  # below every epoch: (requested, first start)
    assert c.end_offset_for(6, 25) == UNDEFINED_EPOCH_END  # above every epoch
    assert c.end_offset_for(-1, 25) == UNDEFINED_EPOCH_END
    assert LeaderEpochCache().end_offset_for(1, 0) == UNDEFINED_EPOCH_END


def test_assign_ignores_repeats_and_keeps_entries_monotonic() -> None:
    c = cache((1, 0), (2, 5))
    assert not c.assign(2, 7)  # same epoch, later start: nothing new
    assert c.assign(2, 3)  # same epoch, earlier start: replaces
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 3))
    assert c.assign(4, 10) and c.latest_epoch == 4
    assert c.assign(3, 8)  # a lower epoch drops every entry not strictly below it
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 3), EpochEntry(3, 8))
    with pytest.raises(ValueError):
        c.assign(-1, 0)


def test_truncation_from_either_end() -> None:
    c = cache((1, 0), (3, 10), (5, 20))
    c.truncate_from_end(20)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 10))
    c.truncate_from_start(12)
    assert c.entries == (EpochEntry(3, 12),)
    c.truncate_from_start(5)  # below the first entry: nothing to forget
    assert c.entries == (EpochEntry(3, 12),)
    assert c.epoch_for_offset(11) == -1 and c.epoch_for_offset(30) == 3
    c.clear()
    assert c.latest_epoch == -1


def test_assign_at_the_boundaries() -> None:
    c = cache((1, 0), (2, 5))
    assert not c.assign(2, 5)  # the same entry again
    assert c.assign(3, 5)  # a new epoch starting where the latest did: epoch 2 held nothing, it goes
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 5))


def test_truncation_from_the_start_exactly_at_an_epoch_start() -> None:
    c = cache((1, 0), (3, 10), (5, 20))
    c.truncate_from_start(10)  # offset 10 is epoch 3's first: epoch 1 is gone whole
    assert c.entries == (EpochEntry(3, 10), EpochEntry(5, 20))
    assert c.epoch_for_offset(10) == 3


def test_copy_is_independent() -> None:
    c = cache((1, 0))
    d = c.copy()
    d.assign(2, 4)
    assert c.entries == (EpochEntry(1, 0),)
